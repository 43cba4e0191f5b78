// Broadcasting add and mul through include/lms only: the output and the
// gradients of both operands against PyTorch's autograd (torch/reference.py,
// which sums a broadcast operand's gradient over the broadcast axes) on
// random data with fixed, printed seeds; and a squeeze-excitation block (the
// [N,C,1,1] gate times [N,C,H,W] of MobileNetV3 / EfficientNet) planned with
// LMS through the Device overload of lms::rewrite at a tight budget,
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

// a + b and a * b are exact; the gradient of a broadcast operand is a sum
// (lms in double, PyTorch in float), so the only error is rounding.
constexpr double kTolerance = 1e-6;

struct BroadcastCase {
  Shape a, b, y;  // y: the broadcast shape
  bool mul;
  uint64_t seed;
};

void check_against_torch(const BroadcastCase& c) {
  SCOPED_TRACE(testing::Message() << (c.mul ? "mul " : "add ") << torch_ref::shape_string(c.a)
                                  << " with " << torch_ref::shape_string(c.b));
  std::printf("%s %s with %s, seed %" PRIu64 "\n", c.mul ? "mul" : "add",
              torch_ref::shape_string(c.a).c_str(), torch_ref::shape_string(c.b).c_str(), c.seed);
  Graph g;
  const TensorId a = g.parameter("a", c.a, Init{});
  const TensorId b = g.parameter("b", c.b, Init{});
  const TensorId y = c.mul ? mul(g, "y", a, b) : add(g, "y", a, b);
  ASSERT_TRUE(g.status().ok()) << g.status();
  ASSERT_EQ(g.tensor(y).shape, c.y);
  g.set_loss(mse_loss(g, "loss", y, g.input("target", c.y)));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.0});
  ASSERT_TRUE(train.ok()) << train.status();

  std::mt19937_64 gen(c.seed);
  TorchTensors in;
  in["a"] = {c.a, random_values(num_elements(c.a), gen, 2.0f)};
  in["b"] = {c.b, random_values(num_elements(c.b), gen, 2.0f)};
  in["target"] = {c.y, random_values(num_elements(c.y), gen, 1.0f)};
  auto ref = torch_ref::torch_reference("broadcast", {{"mul", {c.mul ? 1.0 : 0.0}}}, in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();

  const std::vector<std::string> fetches = {"y", "loss", "a/grad", "b/grad"};
  const std::optional<StepResult> r = torch_ref::one_step(*train, in, fetches);
  ASSERT_TRUE(r.has_value());
  for (const std::string& name : fetches) {
    ASSERT_EQ(r->fetched.at(name).size(), ref->at(name).values.size()) << name;
    const double err = relative_l2(r->fetched.at(name), ref->at(name).values);
    std::printf("  %-7s relative L2 error %.3g\n", name.c_str(), err);
    EXPECT_LE(err, kTolerance) << name;
  }
}

TEST(Broadcast, MatchesPyTorch) {
  // The squeeze-excitation gate, on either side.
  check_against_torch({{2, 8, 1, 1}, {2, 8, 5, 5}, {2, 8, 5, 5}, true, 71});
  check_against_torch({{2, 8, 5, 5}, {2, 8, 1, 1}, {2, 8, 5, 5}, true, 72});
  // A per-channel bias of lower rank, and a scale over the rows of a matrix.
  check_against_torch({{2, 8, 5, 5}, {8, 1, 1}, {2, 8, 5, 5}, false, 73});
  check_against_torch({{3, 1, 7}, {3, 4, 7}, {3, 4, 7}, false, 74});
  check_against_torch({{6, 4}, {4}, {6, 4}, true, 75});
  // A scalar, and equal shapes (the flat kernel).
  check_against_torch({{}, {2, 3, 4}, {2, 3, 4}, true, 76});
  check_against_torch({{2, 3, 4}, {2, 3, 4}, {2, 3, 4}, false, 77});
}

TEST(Broadcast, BothOperandsBroadcastIsRefused) {
  Graph g;
  const TensorId a = g.parameter("a", {4, 1}, Init{});
  const TensorId b = g.parameter("b", {1, 3}, Init{});
  add(g, "y", a, b);
  ASSERT_FALSE(g.status().ok());
  EXPECT_NE(g.status().message().find("one operand must have the output's shape"),
            std::string::npos)
      << g.status();
}

// conv -> relu -> [global average pool -> conv -> relu -> conv -> sigmoid]
// gate, times the block's features -> conv -> mse. 16 channels: the
// convolutions' tensors may take oneDNN's blocked layout, the broadcasting
// mul reads plain.
TEST(Broadcast, SqueezeExcitationWithLmsIsBitIdenticalAtThePredictedPeak) {
  constexpr uint64_t kSeed = 78;
  constexpr int64_t kN = 4, kC = 16, kSize = 24;
  std::printf("seed %" PRIu64 "\n", kSeed);
  Graph g;
  const TensorId x = g.input("x", {kN, 3, kSize, kSize});
  const TensorId h = relu(g, "relu1", conv2d(g, "conv1", x, kC, {3}, {.pad = {1}, .seed = 1}));
  TensorId gate = global_avg_pool(g, "squeeze", h);
  gate = relu(g, "se_relu", conv2d(g, "se_reduce", gate, 4, {1}, {.seed = 2}));
  gate = sigmoid(g, "se_gate", conv2d(g, "se_expand", gate, kC, {1}, {.seed = 3}));
  const TensorId scaled = mul(g, "excite", gate, h);
  const TensorId out = conv2d(g, "conv2", scaled, 8, {3}, {.pad = {1}, .seed = 4});
  g.set_loss(mse_loss(g, "loss", out, g.input("target", {kN, 8, kSize, kSize})));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.05, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(kN * 3 * kSize * kSize, gen, 2.0f)},
                       {"target", random_values(kN * 8 * kSize * kSize, gen, 1.0f)}};
  user::expect_lms_steps_bit_identical(*train, feeds, 3);
}

}  // namespace
}  // namespace lms
