// nn.MultiheadAttention (batch_first either way) and a small torchvision
// VisionTransformer (vit_b_16's architecture, opsets 14 and 17), exported
// by tests/onnx/make_mha_models.py at test time (Debian's /usr/bin/python3;
// skipped, saying why, without torch, torchvision or onnx): torch 1.13
// writes their attention with q scaled before a rank-3 [N·H,T,D] product
// (Note [Attention chain]). Each block's attention becomes one attention op
// (one head of the reshaped [N·H,1,T,D]), no Softmax is left, the training
// graph holds no [.., T, T] tensor, and one training step matches
// PyTorch's output, loss and gradients. An attention whose probabilities
// are read elsewhere too is not fused and trains as PyTorch all the same.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <ostream>
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

struct Form {
  std::string name;
  int blocks = 1;  // attention ops expected
  Shape q;         // the attention's q: [N·H, 1, T, D]; [.., T, D] unfused
};

class MhaImport : public ::testing::TestWithParam<Form> {
 public:
  static void SetUpTestSuite() { fixture_ = onnx_test::run_fixture_script("make_mha_models.py"); }
  static void TearDownTestSuite() {
    std::error_code ignored;
    if (!fixture_.dir.empty()) std::filesystem::remove_all(fixture_.dir, ignored);
  }

 protected:
  static onnx_test::ScriptFixture fixture_;
};
onnx_test::ScriptFixture MhaImport::fixture_;

void PrintTo(const Form& f, std::ostream* os) { *os << f.name; }

int count_op(const Graph& g, OpKind op) {
  int n = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) n += g.node(id).op == op ? 1 : 0;
  return n;
}

TEST_P(MhaImport, EachAttentionIsOneOpAndTrainsAsPyTorch) {
  const Form form = GetParam();
  if (fixture_.dir.empty() && !fixture_.failed) GTEST_SKIP() << fixture_.why;
  ASSERT_FALSE(fixture_.dir.empty()) << fixture_.why;
  auto m = import_onnx(fixture_.dir + "/" + form.name + ".onnx");
  auto ref = read_reference(fixture_.dir + "/" + form.name + "_ref.txt");
  ASSERT_TRUE(m.ok()) << m.status();

  const Graph& g = m->graph;
  EXPECT_EQ(count_op(g, OpKind::kAttention), form.blocks);
  // Unfused (the probabilities have another reader): separate ops, as exact.
  EXPECT_EQ(count_op(g, OpKind::kSoftmax), form.blocks > 0 ? 0 : 1);
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.op != OpKind::kAttention) continue;
    EXPECT_NEAR(std::get<double>(n.attrs.at("softmax_scale")), 1 / std::sqrt(8.0), 1e-7);  // D 8
    EXPECT_EQ(std::get<int64_t>(n.attrs.at("causal")), 0);
    EXPECT_EQ(g.tensor(n.inputs[0]).shape, form.q);
  }

  const std::vector<std::string> parameters = m->parameters;
  Graph fwd = std::move(m->graph);
  ASSERT_TRUE(attach_loss(fwd, "output", Mse{.target = "target"}).ok());
  auto train = training_graph(fwd, fwd.loss(), Sgd{.lr = 0});
  ASSERT_TRUE(train.ok()) << train.status();
  // The attention saves its output and row log-sum-exp: no [.., T, T]
  // scores or probabilities anywhere in the step.
  const int64_t t = form.q[form.q.size() - 2];
  for (TensorId id = 0; form.blocks > 0 && id < train->num_tensors(); ++id) {
    const Shape& s = train->tensor(id).shape;
    EXPECT_FALSE(s.size() >= 2 && s[s.size() - 1] == t && s[s.size() - 2] == t)
        << train->tensor(id).name;
  }
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
    if (name.find("in_proj_weight/grad") != std::string::npos) {
      double norm = 0;
      for (float v : ref[name]) norm += double(v) * v;
      EXPECT_GT(norm, 1e-12) << name << ": a zero reference would test nothing";
    }
    const double e = rel_l2(step.fetched[name], ref[name]);
    std::printf("%s %-36s relative L2 error %.3g\n", form.name.c_str(), name.c_str(), e);
    EXPECT_LE(e, kTolerance) << name;
  }
}

// x [3, 5, 16]: N 3, T 5 batch first, T 3, N 5 sequence first; H 2, D 8.
// ViT: N 2, H 2, T 17 (16 patches and the class token), D 8.
INSTANTIATE_TEST_SUITE_P(
    Models, MhaImport,
    ::testing::Values(Form{"mha_batch_first", 1, {6, 1, 5, 8}},
                      Form{"mha_seq_first", 1, {10, 1, 3, 8}}, Form{"mha_weights", 0, {6, 5, 8}},
                      Form{"vit14", 2, {4, 1, 17, 8}}, Form{"vit17", 2, {4, 1, 17, 8}}),
    [](const ::testing::TestParamInfo<Form>& info) { return info.param.name; });

}  // namespace
}  // namespace lms
