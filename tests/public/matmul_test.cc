// matmul through include/lms only: the output and the gradients of a and b
// against PyTorch's torch.matmul (with transposes of the last two dims;
// torch/reference.py) on random data with fixed, printed seeds, batched,
// with a shared rank-2 weight and with transposed operands; and a small
// attention-like block (two batched products and a shared weight) planned
// with LMS through the Device overload of lms::rewrite at a tight budget,
// bit-identical to the step without LMS at the predicted peak.
#include <gtest/gtest.h>

#include <cinttypes>
#include <optional>
#include <random>

#include "budget_check.h"
#include "torch_compare.h"
#include "torch_reference.h"

namespace lms {
namespace {

using torch_ref::random_values;
using torch_ref::relative_l2;
using torch_ref::TorchTensors;
using user::kMiB;

// Float32 sums of at most 8 products on both sides, in different orders
// (oneDNN's blocked kernels, PyTorch's BLAS).
constexpr double kTolerance = 1e-5;

struct MatMulCase {
  Shape a, b, y;
  bool trans_a, trans_b;
  uint64_t seed;
};

void check_against_torch(const MatMulCase& mc) {
  SCOPED_TRACE(testing::Message() << "a " << torch_ref::shape_string(mc.a) << " b "
                                  << torch_ref::shape_string(mc.b) << " trans_a " << mc.trans_a
                                  << " trans_b " << mc.trans_b);
  std::printf("matmul seed %" PRIu64 "\n", mc.seed);
  Graph g;
  const TensorId a = g.parameter("a", mc.a, Init{});
  const TensorId b = g.parameter("b", mc.b, Init{});
  const TensorId y = matmul(g, "y", a, b, mc.trans_a, mc.trans_b);
  g.set_loss(mse_loss(g, "loss", y, g.input("target", mc.y)));
  ASSERT_TRUE(g.status().ok()) << g.status();
  ASSERT_EQ(g.tensor(y).shape, mc.y);
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.0});
  ASSERT_TRUE(train.ok()) << train.status();

  std::mt19937_64 gen(mc.seed);
  TorchTensors in;
  in["a"] = {mc.a, random_values(num_elements(mc.a), gen, 1.0f)};
  in["b"] = {mc.b, random_values(num_elements(mc.b), gen, 1.0f)};
  in["target"] = {mc.y, random_values(num_elements(mc.y), gen, 1.0f)};
  const double ta = mc.trans_a ? 1.0 : 0.0, tb = mc.trans_b ? 1.0 : 0.0;
  auto ref = torch_ref::torch_reference("matmul", {{"trans_a", {ta}}, {"trans_b", {tb}}}, in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();

  const std::vector<std::string> fetches = {"y", "loss", "a/grad", "b/grad"};
  const std::optional<StepResult> r = torch_ref::one_step(*train, in, fetches);
  ASSERT_TRUE(r.has_value());
  for (const std::string& name : fetches) {
    const double err = relative_l2(r->fetched.at(name), ref->at(name).values);
    std::printf("  %-8s relative L2 error %.3g\n", name.c_str(), err);
    EXPECT_LE(err, kTolerance) << name;
  }
}

TEST(MatMul, BatchedMatchesPyTorch) {
  check_against_torch({{2, 3, 5, 4}, {2, 3, 4, 6}, {2, 3, 5, 6}, false, false, 81});
  check_against_torch({{2, 5, 4}, {2, 4, 6}, {2, 5, 6}, false, false, 82});
}

TEST(MatMul, SharedWeightMatchesPyTorch) {
  check_against_torch({{2, 5, 4}, {4, 6}, {2, 5, 6}, false, false, 83});
  check_against_torch({{2, 3, 5, 4}, {6, 4}, {2, 3, 5, 6}, false, true, 84});
  check_against_torch({{4, 5}, {2, 4, 6}, {2, 5, 6}, true, false, 85});  // a shared
}

TEST(MatMul, TransposedOperandsMatchPyTorch) {
  check_against_torch({{2, 3, 5, 4}, {2, 3, 6, 4}, {2, 3, 5, 6}, false, true, 86});
  check_against_torch({{2, 3, 4, 5}, {2, 3, 6, 4}, {2, 3, 5, 6}, true, true, 87});
  check_against_torch({{2, 4, 5}, {4, 6}, {2, 5, 6}, true, false, 88});
  check_against_torch({{2, 1, 5, 4}, {3, 4, 6}, {2, 3, 5, 6}, false, false, 89});
}

// q = x·Wq, k = x·Wk (shared weights), s = q·kᵀ per sequence, y = s·x,
// trained on mse against a target: every backward form of matmul (shared
// weight, transposed b, batched) in one step.
TEST(MatMul, AttentionLikeBlockWithLmsIsBitIdenticalAtThePredictedPeak) {
  constexpr uint64_t kSeed = 90;
  constexpr int64_t kN = 4, kT = 64, kC = 32;
  std::printf("seed %" PRIu64 "\n", kSeed);
  Graph g;
  const TensorId x = g.input("x", {kN, kT, kC});
  const TensorId wq = g.parameter("wq", {kC, kC}, Init::he_normal(1, kC));
  const TensorId wk = g.parameter("wk", {kC, kC}, Init::he_normal(2, kC));
  const TensorId q = relu(g, "q_relu", matmul(g, "q", x, wq));
  const TensorId k = relu(g, "k_relu", matmul(g, "k", x, wk, false, true));
  const TensorId s = scale(g, "s_scaled", matmul(g, "s", q, k, false, true), 1.0 / kC);
  const TensorId y = matmul(g, "y", s, x);
  g.set_loss(mse_loss(g, "loss", y, g.input("target", {kN, kT, kC})));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.05, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(kN * kT * kC, gen, 1.0f)},
                       {"target", random_values(kN * kT * kC, gen, 1.0f)}};
  user::expect_lms_steps_bit_identical(*train, feeds, 3);
}

}  // namespace
}  // namespace lms
