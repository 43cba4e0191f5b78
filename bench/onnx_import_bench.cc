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
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lms/graph.h"
#include "lms/onnx.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.onnx INPUT N,C,H,W [--repeat N]\n", argv[0]);
    return 2;
  }
  int repeat = 3;
  for (int i = 4; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::max(1, std::atoi(argv[i + 1]));
  }
  lms::Shape shape;
  for (const char* p = argv[3]; *p != '\0';) {
    char* end = nullptr;
    shape.push_back(std::strtoll(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p != '\0') break;
  }
  double best = 1e30;
  lms::ImportedModel kept;
  for (int r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    auto m = lms::import_onnx(argv[1], {.input_shapes = {{argv[2], shape}}});
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
              argv[1], best, repeat, kept.graph.num_nodes(), kept.graph.num_tensors(),
              kept.parameters.size(), parameter_bytes, kept.state.size(), kept.opset);
  return 0;
}
