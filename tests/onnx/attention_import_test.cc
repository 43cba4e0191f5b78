// A tiny self-attention block imported from a PyTorch export at opset 14
// (tests/onnx/make_attention_model.py, written at test time by Debian's
// /usr/bin/python3; skipped, saying why, without torch or onnx): the
// MatMul / Transpose / Mul or Div / Add (causal mask) / Softmax / MatMul
// chain becomes one attention node, and one training step matches
// PyTorch's output, loss and gradients, with the causal mask a buffer or
// computed from the positions (Note [Causal mask from positions]: Less or
// Greater, then Mul or Where). A mask that is not causal is not fused, and
// the separate ops train as PyTorch too.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
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

constexpr double kTolerance = 1e-4;  // relative L2 error against PyTorch (float32)
// The input x[N*T, C] of make_attention_model.py (N 2, T 5, C 8); the
// positions forms export its first axis as dynamic.
const OnnxImportOptions kShapes = {.input_shapes = {{"input", {10, 8}}}};

// Writes the model of `form` into a fresh folder and returns it; empty with
// `why` set when it cannot (exit 77 or 127: torch or onnx missing, or
// "failed: ...").
std::string write_model(const std::string& form, std::string* why) {
  std::string dir = (std::filesystem::temp_directory_path() / "lms_attention.XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    *why = "failed: mkdtemp";
    return "";
  }
  const std::string command = "/usr/bin/python3 " + std::string(LMS_SOURCE_DIR) +
                              "/tests/onnx/make_attention_model.py " + dir + " " + form;
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

int count_op(const Graph& g, OpKind op) {
  int n = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) n += g.node(id).op == op ? 1 : 0;
  return n;
}

// One training step of the imported model `m` matches PyTorch's reference:
// output, loss and every parameter's gradient.
void expect_step_as_pytorch(ImportedModel m, std::map<std::string, std::vector<float>>& ref,
                            const std::string& form) {
  const std::vector<std::string> parameters = m.parameters;
  Graph fwd = std::move(m.graph);
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
    if (name == "k.bias/grad") {
      // Adding b to every key adds q·b to every score of a row, which the
      // softmax cancels: the gradient is 0, and both sides hold rounding
      // noise (about 1e-9 against q.bias's 1e-2), so compare with the scale
      // of the other gradients.
      double got = 0, scale = 0;
      for (float v : step.fetched[name]) got += double(v) * v;
      for (float v : ref["q.bias/grad"]) scale += double(v) * v;
      std::printf("%s %-12s |lms| / |q.bias/grad| %.3g\n", form.c_str(), name.c_str(),
                  std::sqrt(got / scale));
      EXPECT_LE(std::sqrt(got / scale), 1e-5) << name;
      continue;
    }
    const double e = rel_l2(step.fetched[name], ref[name]);
    std::printf("%s %-12s relative L2 error %.3g\n", form.c_str(), name.c_str(), e);
    EXPECT_LE(e, kTolerance) << name;
  }
}

class AttentionImport : public ::testing::TestWithParam<std::string> {};

TEST_P(AttentionImport, OneAttentionNodeTrainsAsPyTorch) {
  const std::string form = GetParam();
  std::string why;
  const std::string dir = write_model(form, &why);
  if (dir.empty() && why.rfind("failed", 0) != 0) GTEST_SKIP() << why;
  ASSERT_FALSE(dir.empty()) << why;
  auto m = import_onnx(dir + "/attention.onnx", kShapes);
  auto ref = read_reference(dir + "/attention_ref.txt");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->opset, 14);

  const Graph& g = m->graph;
  ASSERT_EQ(count_op(g, OpKind::kAttention), 1);
  EXPECT_EQ(count_op(g, OpKind::kSoftmax), 0);
  EXPECT_EQ(count_op(g, OpKind::kScale), 0);
  EXPECT_EQ(count_op(g, OpKind::kAdd), 0);
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.op != OpKind::kAttention) continue;
    EXPECT_NEAR(std::get<double>(n.attrs.at("softmax_scale")), 0.5, 1e-7);  // 1/sqrt(D), D = 4
    EXPECT_EQ(std::get<int64_t>(n.attrs.at("causal")), form == "plain" ? 0 : 1);
    EXPECT_EQ(g.tensor(n.inputs[0]).shape, (Shape{2, 2, 5, 4}));
    EXPECT_EQ(g.tensor(n.inputs[1]).shape, (Shape{2, 2, 5, 4}));
  }

  EXPECT_EQ(m->parameters.size(), 8u);
  expect_step_as_pytorch(*std::move(m), ref, form);
}

INSTANTIATE_TEST_SUITE_P(Forms, AttentionImport,
                         ::testing::Values("causal", "plain", "positions_less", "positions_where"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// A mask below the diagonal (a buffer, or computed from the positions) is
// not PyTorch's causal one: the chain is not fused (the mask from positions
// is folded after all) and imports as its separate ops, which train as
// PyTorch does.
class AttentionImportUnfused : public ::testing::TestWithParam<std::string> {};

TEST_P(AttentionImportUnfused, AMaskThatIsNotCausalIsNotFusedAndTrainsAsPyTorch) {
  std::string why;
  const std::string dir = write_model(GetParam(), &why);
  if (dir.empty() && why.rfind("failed", 0) != 0) GTEST_SKIP() << why;
  ASSERT_FALSE(dir.empty()) << why;
  auto m = import_onnx(dir + "/attention.onnx", kShapes);
  auto ref = read_reference(dir + "/attention_ref.txt");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(count_op(m->graph, OpKind::kAttention), 0);
  EXPECT_EQ(count_op(m->graph, OpKind::kSoftmax), 1);
  expect_step_as_pytorch(*std::move(m), ref, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Masks, AttentionImportUnfused,
                         ::testing::Values("bad_mask", "positions_anticausal"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace lms
