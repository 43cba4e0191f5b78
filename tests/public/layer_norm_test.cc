// layer_norm through include/lms only: the output and the gradients of x,
// gamma and beta against PyTorch's F.layer_norm (torch/reference.py) on
// random data with fixed, printed seeds; and a small transformer-like MLP
// block (linear, layer_norm, relu, linear) planned with LMS through the
// Device overload of lms::rewrite at a tight budget, bit-identical to the
// step without LMS at the predicted peak.
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

// Both sides normalise in float32 with different summation orders (oneDNN's
// vectorised rows, PyTorch's own kernel); the row statistics amplify the
// rounding by at most 1/std.
constexpr double kTolerance = 1e-4;

struct LayerNormCase {
  Shape x;
  double eps;
  float scale;  // x uniform in [-scale, scale]
  uint64_t seed;
};

void check_against_torch(const LayerNormCase& lc) {
  SCOPED_TRACE(testing::Message() << "x " << torch_ref::shape_string(lc.x) << " eps " << lc.eps);
  std::printf("layer_norm seed %" PRIu64 "\n", lc.seed);
  const Shape c = {lc.x.back()};
  Graph g;
  const TensorId x = g.parameter("x", lc.x, Init{});
  const TensorId gamma = g.parameter("gamma", c, Init{});
  const TensorId beta = g.parameter("beta", c, Init{});
  const TensorId y = layer_norm(g, "y", x, gamma, beta, {.eps = lc.eps});
  g.set_loss(mse_loss(g, "loss", y, g.input("target", lc.x)));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.0});
  ASSERT_TRUE(train.ok()) << train.status();

  std::mt19937_64 gen(lc.seed);
  TorchTensors in;
  in["x"] = {lc.x, random_values(num_elements(lc.x), gen, lc.scale)};
  in["gamma"] = {c, random_values(c[0], gen, 2.0f)};
  in["beta"] = {c, random_values(c[0], gen, 1.0f)};
  in["target"] = {lc.x, random_values(num_elements(lc.x), gen, 1.0f)};
  auto ref = torch_ref::torch_reference("layer_norm", {{"eps", {lc.eps}}}, in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();

  const std::vector<std::string> fetches = {"y", "loss", "x/grad", "gamma/grad", "beta/grad"};
  const std::optional<StepResult> r = torch_ref::one_step(*train, in, fetches);
  ASSERT_TRUE(r.has_value());
  for (const std::string& name : fetches) {
    const double err = relative_l2(r->fetched.at(name), ref->at(name).values);
    std::printf("  %-10s relative L2 error %.3g\n", name.c_str(), err);
    EXPECT_LE(err, kTolerance) << name;
  }
}

TEST(LayerNorm, MatchesPyTorch) {
  check_against_torch({{8, 16}, 1e-5, 1.0f, 71});
  check_against_torch({{3, 300}, 1e-5, 4.0f, 72});      // rows longer than a vector
  check_against_torch({{2, 5, 33}, 1e-3, 2.0f, 73});    // rank 3, odd C
  check_against_torch({{2, 3, 4, 7}, 1e-5, 0.5f, 74});  // rank 4
}

// fc1 -> layer_norm -> relu -> fc2 -> mse on rows of [N, T, C] tokens.
TEST(LayerNorm, MlpBlockWithLmsIsBitIdenticalAtThePredictedPeak) {
  constexpr uint64_t kSeed = 75;
  constexpr int64_t kN = 8, kT = 32, kC = 64;
  std::printf("seed %" PRIu64 "\n", kSeed);
  Graph g;
  const TensorId x = g.input("x", {kN * kT, kC});
  const TensorId w1 = g.parameter("fc1/w", {4 * kC, kC}, Init::he_normal(1, kC));
  const TensorId w2 = g.parameter("fc2/w", {kC, 4 * kC}, Init::he_normal(2, 4 * kC));
  TensorId h = linear(g, "fc1", x, w1);
  h = relu(g, "relu", layer_norm(g, "ln1", h));
  h = layer_norm(g, "ln2", linear(g, "fc2", h, w2));
  g.set_loss(mse_loss(g, "loss", h, g.input("target", {kN * kT, kC})));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.05, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(kN * kT * kC, gen, 2.0f)},
                       {"target", random_values(kN * kT * kC, gen, 1.0f)}};
  user::expect_lms_steps_bit_identical(*train, feeds, 3);
}

}  // namespace
}  // namespace lms
