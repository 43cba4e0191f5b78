// nn.LayerNorm imported from PyTorch exports in training mode
// (tests/onnx/make_layer_norm_model.py, written at test time by Debian's
// /usr/bin/python3; skipped, saying why, without torch or onnx): at opset 17
// its LayerNormalization node, at opset 14 the decomposition PyTorch writes
// there (fused by the importer), each becomes one layer_norm node whose
// gamma and beta are the trainable initializers "1.weight" and "1.bias";
// one training step matches PyTorch's output, loss and gradients.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <variant>

#include "lms/device.h"
#include "lms/loss.h"
#include "lms/onnx.h"
#include "lms/session.h"
#include "lms/training.h"
#include "reference.h"

namespace lms {
namespace {

using onnx_test::read_reference;
using onnx_test::rel_l2;

constexpr double kTolerance = 1e-4;  // relative L2 error against PyTorch

// Writes the model of `form` (an opset, or "axis0") into a fresh folder and returns it; empty
// with `why` set when it cannot (exit 77 or 127: torch or onnx missing, or
// "failed: ...").
std::string write_model(const std::string& form, std::string* why) {
  std::string dir = (std::filesystem::temp_directory_path() / "lms_layer_norm.XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    *why = "failed: mkdtemp";
    return "";
  }
  const std::string command = "/usr/bin/python3 " + std::string(LMS_SOURCE_DIR) +
                              "/tests/onnx/make_layer_norm_model.py " + dir + " " + form;
  const int status = std::system(command.c_str());
  if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return dir;
  *why = "/usr/bin/python3 with torch and onnx is needed to write the model (" + command + ")";
  if (!(WIFEXITED(status) && (WEXITSTATUS(status) == 77 || WEXITSTATUS(status) == 127))) {
    *why = "failed: " + command;
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return "";
}

class LayerNormImport : public ::testing::TestWithParam<int> {};

TEST_P(LayerNormImport, OneLayerNormNodeTrainsAsPyTorch) {
  const int opset = GetParam();
  std::string why;
  const std::string dir = write_model(std::to_string(opset), &why);
  if (dir.empty() && why.rfind("failed", 0) != 0) GTEST_SKIP() << why;
  ASSERT_FALSE(dir.empty()) << why;
  auto m = import_onnx(dir + "/ln_mlp.onnx");
  auto ref = read_reference(dir + "/ln_mlp_ref.txt");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->opset, opset);

  const Graph& g = m->graph;
  std::vector<NodeId> norms;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (g.node(id).op == OpKind::kLayerNorm) norms.push_back(id);
  }
  ASSERT_EQ(norms.size(), 1u);
  ASSERT_EQ(g.num_nodes(), 3);  // linear, layer_norm, linear: nothing of the decomposition left
  const Node& ln = g.node(norms[0]);
  EXPECT_NEAR(std::get<double>(ln.attrs.at("eps")), 1e-5, 1e-10);
  EXPECT_EQ(g.tensor(ln.inputs[1]).name, "1.weight");
  EXPECT_EQ(g.tensor(ln.inputs[2]).name, "1.bias");
  for (int k : {1, 2}) EXPECT_EQ(g.tensor(ln.inputs[k]).role, TensorRole::kParameter);
  EXPECT_EQ(m->parameters.size(), 6u);

  const std::vector<std::string> parameters = m->parameters;
  Graph fwd = std::move(m->graph);
  ASSERT_TRUE(attach_loss(fwd, "output", Mse{.target = "target"}).ok());
  auto train = training_graph(fwd, fwd.loss(), Sgd{.lr = 0});
  ASSERT_TRUE(train.ok()) << train.status();
  SessionOptions options;
  options.fetches = {"output", "loss"};
  for (const std::string& p : parameters) options.fetches.push_back(p + "/grad");
  auto device = make_cpu_device({});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session = Session::create(*train, **device, options);
  ASSERT_TRUE(session.ok()) << session.status();
  StepResult step;
  ASSERT_TRUE((*session)->run({{"input", ref["input"]}, {"target", ref["target"]}}, &step).ok());
  for (const std::string& name : options.fetches) {
    ASSERT_FALSE(ref[name].empty()) << name << " has no PyTorch reference";
    const double e = rel_l2(step.fetched[name], ref[name]);
    std::printf("opset %d %-12s relative L2 error %.3g\n", opset, name.c_str(), e);
    EXPECT_LE(e, kTolerance) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Opsets, LayerNormImport, ::testing::Values(17, 14),
                         [](const ::testing::TestParamInfo<int>& info) {
                           std::string name = "opset";
                           name += std::to_string(info.param);  // gcc 12 -Wrestrict otherwise
                           return name;
                         });

// A LayerNormalization over another axis than the last has no lms op: an
// InvalidArgument naming the node, the attribute and what is supported.
TEST(LayerNormImportErrors, AnotherAxisThanTheLastIsRefused) {
  std::string why;
  const std::string dir = write_model("axis0", &why);
  if (dir.empty() && why.rfind("failed", 0) != 0) GTEST_SKIP() << why;
  ASSERT_FALSE(dir.empty()) << why;
  auto m = import_onnx(dir + "/ln_axis0.onnx");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.status().message(),
            "ONNX node 'ln' (LayerNormalization): attribute axis=0 not supported; supported: -1 "
            "or 1 (the last axis of X)");
}

}  // namespace
}  // namespace lms
