// gelu (the erf form) through include/lms only: the output and the gradient
// of x against PyTorch's F.gelu with approximate='none' (torch/reference.py)
// on random data with fixed, printed seeds, past both tails of erf; and a
// conv / GELU block planned with LMS through the Device overload of
// lms::rewrite at a tight budget, bit-identical to the step without LMS at
// the predicted peak.
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

// PyTorch 1.13's CPU gelu and oneDNN's eltwise_gelu_erf agree bit for bit
// on the machines tried; another ISA's erf approximation may differ by a
// few ulps per element.
constexpr double kTolerance = 1e-6;

struct GeluCase {
  Shape x;
  float scale;  // x uniform in [-scale, scale]
  uint64_t seed;
};

void check_against_torch(const GeluCase& gc) {
  SCOPED_TRACE(testing::Message() << "x " << torch_ref::shape_string(gc.x) << " scale "
                                  << gc.scale);
  std::printf("gelu seed %" PRIu64 "\n", gc.seed);
  Graph g;
  const TensorId x = g.parameter("x", gc.x, Init{});
  const TensorId y = gelu(g, "y", x);
  g.set_loss(mse_loss(g, "loss", y, g.input("target", gc.x)));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.0});
  ASSERT_TRUE(train.ok()) << train.status();

  std::mt19937_64 gen(gc.seed);
  TorchTensors in;
  in["x"] = {gc.x, random_values(num_elements(gc.x), gen, gc.scale)};
  in["target"] = {gc.x, random_values(num_elements(gc.x), gen, 1.0f)};
  auto ref = torch_ref::torch_reference("gelu", {}, in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();

  const std::vector<std::string> fetches = {"y", "loss", "x/grad"};
  const std::optional<StepResult> r = torch_ref::one_step(*train, in, fetches);
  ASSERT_TRUE(r.has_value());
  torch_ref::expect_close_to_torch(*r, *ref, fetches, kTolerance);
}

TEST(Gelu, MatchesPyTorch) {
  check_against_torch({{2, 3, 5, 7}, 3.0f, 71});
  check_against_torch({{4, 33}, 1.0f, 72});
  check_against_torch({{1, 2, 3, 4, 5}, 8.0f, 73});  // erf saturates: y = x or 0
}

// conv -> GELU -> conv -> GELU -> mse.
TEST(Gelu, ConvBlockWithLmsIsBitIdenticalAtThePredictedPeak) {
  constexpr uint64_t kSeed = 74;
  constexpr int64_t kN = 4, kSize = 32;
  std::printf("seed %" PRIu64 "\n", kSeed);
  Graph g;
  const TensorId x = g.input("x", {kN, 3, kSize, kSize});
  TensorId h = gelu(g, "gelu1", conv2d(g, "conv1", x, 16, {3}, {.pad = {1}, .seed = 1}));
  h = gelu(g, "gelu2", conv2d(g, "conv2", h, 8, {3}, {.pad = {1}, .seed = 2}));
  g.set_loss(mse_loss(g, "loss", h, g.input("target", {kN, 8, kSize, kSize})));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.05, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(kN * 3 * kSize * kSize, gen, 4.0f)},
                       {"target", random_values(kN * 8 * kSize * kSize, gen, 3.0f)}};
  user::expect_lms_steps_bit_identical(*train, feeds, 3);
}

}  // namespace
}  // namespace lms
