// clip (ReLU6 and other bounds) through include/lms only: the output and the
// gradient of x against PyTorch's hardtanh (torch/reference.py) on random
// data with fixed, printed seeds; and a MobileNet-like block (conv,
// batch_norm, ReLU6) planned with LMS through the Device overload of
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

// Element-wise min / max and a mask: exact, so the only error is the mse
// gradient's rounding.
constexpr double kTolerance = 1e-6;

struct ClipCase {
  Shape x;
  double min, max;
  float scale;  // x uniform in [-scale, scale]
  uint64_t seed;
};

void check_against_torch(const ClipCase& cc) {
  SCOPED_TRACE(testing::Message() << "x " << torch_ref::shape_string(cc.x) << " min " << cc.min
                                  << " max " << cc.max);
  std::printf("clip seed %" PRIu64 "\n", cc.seed);
  Graph g;
  const TensorId x = g.parameter("x", cc.x, Init{});
  const TensorId y = clip(g, "y", x, cc.min, cc.max);
  g.set_loss(mse_loss(g, "loss", y, g.input("target", cc.x)));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.0});
  ASSERT_TRUE(train.ok()) << train.status();

  std::mt19937_64 gen(cc.seed);
  TorchTensors in;
  in["x"] = {cc.x, random_values(num_elements(cc.x), gen, cc.scale)};
  in["target"] = {cc.x, random_values(num_elements(cc.x), gen, 1.0f)};
  auto ref = torch_ref::torch_reference("clip", {{"min", {cc.min}}, {"max", {cc.max}}}, in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();

  const std::vector<std::string> fetches = {"y", "loss", "x/grad"};
  const std::optional<StepResult> r =
      torch_ref::one_step(*train, in, {.written = {"x"}, .fed = {"target"}, .fetches = fetches});
  ASSERT_TRUE(r.has_value());
  torch_ref::expect_close_to_torch(*r, *ref, fetches, kTolerance);
}

TEST(Clip, MatchesPyTorch) {
  check_against_torch({{2, 3, 5, 7}, 0.0, 6.0, 8.0f, 61});  // ReLU6
  check_against_torch({{4, 33}, -0.5, 0.7, 1.0f, 62});
  check_against_torch({{1, 2, 3, 4, 5}, -2.0, 2.0, 3.0f, 63});
}

// conv -> batch_norm -> ReLU6 -> conv -> ReLU6 -> mse.
TEST(Clip, MobileNetBlockWithLmsIsBitIdenticalAtThePredictedPeak) {
  constexpr uint64_t kSeed = 64;
  constexpr int64_t kN = 4, kSize = 32;
  std::printf("seed %" PRIu64 "\n", kSeed);
  Graph g;
  const TensorId x = g.input("x", {kN, 3, kSize, kSize});
  TensorId h = conv2d(g, "conv1", x, 16, {3}, {.pad = {1}, .bias = false, .seed = 1});
  h = clip(g, "relu6_1", batch_norm(g, "bn1", h), 0.0, 6.0);
  h = clip(g, "relu6_2", conv2d(g, "conv2", h, 8, {3}, {.pad = {1}, .seed = 2}), 0.0, 6.0);
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
