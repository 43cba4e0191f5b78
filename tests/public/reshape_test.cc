// reshape and flatten through include/lms only: the bytes and the gradient
// of x against PyTorch (torch/reference.py) on random data with fixed,
// printed seeds; and a ResNet-like classifier head (conv, relu,
// global_avg_pool, flatten, linear) planned with LMS through the Device
// overload of lms::rewrite at a tight budget, bit-identical to the step
// without LMS at the predicted peak.
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

struct ReshapeCase {
  Shape x;
  Shape y;  // reshape to y, or when empty flatten at `axis`
  int64_t axis;
  uint64_t seed;
};

void check_against_torch(const ReshapeCase& rc) {
  SCOPED_TRACE(testing::Message() << "x " << torch_ref::shape_string(rc.x));
  std::printf("reshape seed %" PRIu64 "\n", rc.seed);
  Graph g;
  const TensorId x = g.parameter("x", rc.x, Init{});
  const TensorId y = rc.y.empty() ? flatten(g, "y", x, rc.axis) : reshape(g, "y", x, rc.y);
  ASSERT_TRUE(g.status().ok()) << g.status();
  const Shape y_shape = g.tensor(y).shape;
  g.set_loss(mse_loss(g, "loss", y, g.input("target", y_shape)));
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.0});
  ASSERT_TRUE(train.ok()) << train.status();

  std::mt19937_64 gen(rc.seed);
  TorchTensors in;
  in["x"] = {rc.x, random_values(num_elements(rc.x), gen)};
  in["target"] = {y_shape, random_values(num_elements(y_shape), gen)};
  auto ref = torch_ref::torch_reference(
      "reshape", {{"shape", std::vector<double>(y_shape.begin(), y_shape.end())}}, in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(ref->at("y").shape, y_shape);

  const std::vector<std::string> fetches = {"y", "loss", "x/grad"};
  const std::optional<StepResult> r = torch_ref::one_step(*train, in, fetches);
  ASSERT_TRUE(r.has_value());
  // A reshape keeps every byte of x.
  EXPECT_EQ(r->fetched.at("y"), in.at("x").values);
  torch_ref::expect_close_to_torch(*r, *ref, fetches, 1e-6);
}

TEST(Reshape, MatchesPyTorch) {
  check_against_torch({{2, 5, 1, 1}, {}, 1, 71});  // a pooled ResNet output
  check_against_torch({{3, 4, 5, 2}, {}, 2, 72});
  check_against_torch({{2, 3, 4}, {4, 6}, 0, 73});
  check_against_torch({{6}, {1, 2, 3}, 0, 74});
}

TEST(Reshape, FlattenAxisOutOfRangeIsRefused) {
  Graph g;
  const TensorId x = g.input("x", {2, 3});
  EXPECT_EQ(flatten(g, "f", x, 3), kNoTensor);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("axis 3 is out of range [0, 2]"), absl::string_view::npos)
      << g.status();
}

// conv -> relu -> global_avg_pool -> flatten -> linear -> mse.
TEST(Reshape, ClassifierHeadWithLmsIsBitIdenticalAtThePredictedPeak) {
  constexpr uint64_t kSeed = 75;
  constexpr int64_t kN = 4, kSize = 32, kClasses = 10;
  std::printf("seed %" PRIu64 "\n", kSeed);
  Graph g;
  const TensorId x = g.input("x", {kN, 3, kSize, kSize});
  TensorId h = relu(g, "relu1", conv2d(g, "conv1", x, 16, {3}, {.pad = {1}, .seed = 1}));
  h = relu(g, "relu2", conv2d(g, "conv2", h, 32, {3}, {.pad = {1}, .seed = 2}));
  h = flatten(g, "flatten", global_avg_pool(g, "gap", h));
  const TensorId w = g.parameter("fc/w", {kClasses, 32}, Init::he_normal(3, 32));
  const TensorId b = g.parameter("fc/b", {kClasses}, Init::constant(0.01));
  h = linear(g, "fc", h, w, b);
  g.set_loss(mse_loss(g, "loss", h, g.input("target", {kN, kClasses})));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.05, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(kN * 3 * kSize * kSize, gen)},
                       {"target", random_values(kN * kClasses, gen)}};
  user::expect_lms_steps_bit_identical(*train, feeds, 3);
}

}  // namespace
}  // namespace lms
