// The exact GELU as torch.onnx.export writes it at opsets 14 to 17 (Div /
// Erf / Add / Mul / Mul, Note [GELU chain]) imports as one lms gelu node: a
// PyTorch MLP (tests/onnx/make_gelu_models.py, run at test time by Debian's
// /usr/bin/python3; skipped, saying why, without torch or onnx) gives
// PyTorch's output, loss and gradients, and the hand-written Mul form with
// swapped operands is fused too; a chain with other constants, or one whose
// inner value is read elsewhere, is not fused and is refused at its Erf.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "lms/device.h"
#include "lms/loss.h"
#include "lms/onnx.h"
#include "lms/session.h"
#include "lms/training.h"
#include "reference.h"

namespace lms {
namespace {

constexpr uint64_t kMiBytes = uint64_t{1} << 20;
// oneDNN's and PyTorch's float erf differ by a few ulps; the products add
// their own rounding.
constexpr double kTolerance = 1e-5;

// A fresh folder that make_gelu_models.py wrote into, removed with the
// object; `dir` is empty, with `why` set, when the script could not run.
struct Models {
  std::string dir;
  std::string why;
  bool missing_torch = false;

  Models() {
    std::string made = (std::filesystem::temp_directory_path() / "lms_gelu.XXXXXX").string();
    if (mkdtemp(made.data()) == nullptr) {
      why = "mkdtemp failed";
      return;
    }
    const std::string command = "/usr/bin/python3 " + std::string(LMS_SOURCE_DIR) +
                                "/tests/onnx/make_gelu_models.py " + made;
    const int status = std::system(command.c_str());
    if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      dir = made;
      return;
    }
    std::error_code ignored;
    std::filesystem::remove_all(made, ignored);
    missing_torch = WIFEXITED(status) && (WEXITSTATUS(status) == 77 || WEXITSTATUS(status) == 127);
    why = missing_torch ? "/usr/bin/python3 with torch and onnx is needed to write the models"
                        : "failed: " + command;
  }
  ~Models() {
    std::error_code ignored;
    if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
  }
};

#define LMS_NEED_MODELS(m)                          \
  do {                                              \
    if ((m).missing_torch) GTEST_SKIP() << (m).why; \
    ASSERT_FALSE((m).dir.empty()) << (m).why;       \
  } while (0)

std::map<OpKind, int> op_counts(const Graph& g) {
  std::map<OpKind, int> counts;
  for (NodeId id = 0; id < g.num_nodes(); ++id) ++counts[g.node(id).op];
  return counts;
}

double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return got.size() == want.size() ? std::sqrt(diff / std::max(norm, 1e-30)) : INFINITY;
}

// One step of the imported MLP with mse_loss against the reference's
// target at learning rate 0: the output, the loss and every parameter
// gradient against PyTorch's.
void expect_matches_pytorch(ImportedModel m, const std::string& ref_path) {
  const auto ref = onnx_test::read_reference(ref_path);
  Graph g = std::move(m.graph);
  ASSERT_TRUE(attach_loss(g, m.outputs[0], Mse{.target = "target"}).ok());
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.0});
  ASSERT_TRUE(train.ok()) << train.status();
  std::vector<std::string> fetches = {m.outputs[0], "loss"};
  for (const std::string& p : m.parameters) fetches.push_back(p + "/grad");
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiBytes, .host_pool_bytes = kMiBytes});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session = Session::create(*train, **device, {.fetches = fetches});
  ASSERT_TRUE(session.ok()) << session.status();
  StepResult r;
  absl::Status s = (*session)->run({{m.inputs[0], ref.at("x")}, {"target", ref.at("target")}}, &r);
  ASSERT_TRUE(s.ok()) << s;
  for (const std::string& name : fetches) {
    const std::string key = name == m.outputs[0] ? "y" : name;
    ASSERT_TRUE(ref.contains(key)) << key;
    const double err = relative_l2(r.fetched.at(name), ref.at(key));
    std::printf("  %-14s relative L2 error %.3g\n", key.c_str(), err);
    EXPECT_LE(err, kTolerance) << key;
  }
}

TEST(GeluImport, PyTorchExportIsOneGeluNodeAndMatchesPyTorch) {
  const Models models;
  LMS_NEED_MODELS(models);
  for (int opset : {14, 17}) {
    SCOPED_TRACE(opset);
    auto m = import_onnx(models.dir + "/gelu_mlp_opset" + std::to_string(opset) + ".onnx");
    ASSERT_TRUE(m.ok()) << m.status();
    const std::map<OpKind, int> want = {{OpKind::kLinear, 2}, {OpKind::kGelu, 1}};
    EXPECT_EQ(op_counts(m->graph), want);
    expect_matches_pytorch(std::move(*m), models.dir + "/gelu_mlp_ref.txt");
  }
}

// Mul(1/sqrt(2), x), Add(1, e), Mul(a, x), Mul(0.5, m): the other orders.
TEST(GeluImport, MulFormWithSwappedOperandsIsFused) {
  const Models models;
  LMS_NEED_MODELS(models);
  auto m = import_onnx(models.dir + "/gelu_mul_form.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  const Graph& g = m->graph;
  ASSERT_EQ(g.num_nodes(), 1);
  EXPECT_EQ(g.node(0).op, OpKind::kGelu);
  EXPECT_EQ(g.tensor(g.node(0).inputs[0]).name, "x");
  EXPECT_EQ(m->outputs, std::vector<std::string>{g.tensor(g.node(0).outputs[0]).name});
  EXPECT_TRUE(m->parameters.empty());
}

// Add(., 2) is no GELU: the chain is visited node by node, and lms has no
// Erf.
TEST(GeluImport, ChainWithOtherConstantsIsRefusedAtErf) {
  const Models models;
  LMS_NEED_MODELS(models);
  auto m = import_onnx(models.dir + "/gelu_wrong_constant.onnx");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()),
              ::testing::HasSubstr("ONNX node 'erf' (Erf): op not supported by lms"));
}

// Erf's output is also a graph output: the chain's values are needed on
// their own, so it is not fused, and lms has no Erf.
TEST(GeluImport, ChainWhoseInnerValueIsAGraphOutputIsNotFused) {
  const Models models;
  LMS_NEED_MODELS(models);
  auto m = import_onnx(models.dir + "/gelu_erf_is_output.onnx");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()),
              ::testing::HasSubstr("ONNX node 'erf' (Erf): op not supported by lms"));
}

}  // namespace
}  // namespace lms
