// How long lms::import_onnx takes on a model file, and what it gives.
//
//   /usr/bin/python3 scripts/export_torchvision.py resnet50 1,3,224,224 resnet50.onnx
//   build-release/bench/onnx_import_bench resnet50.onnx input 8,3,224,224 [--repeat 3]
//
// Prints the fastest of the runs (wall seconds: reading the file, folding,
// building the graph) and the graph's nodes, tensors, trainable parameters
// (count and bytes) and other initializers.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "flags.h"
#include "lms/graph.h"
#include "lms/onnx.h"

int main(int argc, char** argv) {
  std::string model, input;
  lms::Shape shape;
  int repeat = 3;
  CLI::App app("onnx_import_bench: how long lms::import_onnx takes on a model file.",
               "onnx_import_bench");
  lms::flags::add_string(app, "model MODEL.onnx", &model, "the model file")->required();
  lms::flags::add_string(app, "input INPUT", &input, "the name of its input")->required();
  lms::flags::add_int_list(app, "shape N,C,H,W", &shape, "the input's shape", {.min = 1})
      ->required();
  lms::flags::add_int(app, "--repeat", &repeat, "imports; the fastest is printed", {.min = 1});
  if (std::optional<int> exit = lms::flags::parse_main(app, argc, argv, 2)) return *exit;
  double best = 1e30;
  lms::ImportedModel kept;
  for (int r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    auto m = lms::import_onnx(model, {.input_shapes = {{input, shape}}});
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", std::string(m.status().message()).c_str());
      return 1;
    }
    kept = *std::move(m);
  }
  uint64_t parameter_bytes = 0;
  for (const std::string& name : kept.parameters) {
    parameter_bytes += kept.graph.tensor(kept.graph.find_tensor(name)).bytes();
  }
  std::printf("%s: import %.3f s (fastest of %d); %d nodes, %d tensors, %zu parameters (%" PRIu64
              " bytes), %zu other initializers, opset %" PRId64 "\n",
              model.c_str(), best, repeat, kept.graph.num_nodes(), kept.graph.num_tensors(),
              kept.parameters.size(), parameter_bytes, kept.state.size(), kept.opset);
  return 0;
}
