// Grouped and depthwise convolution (conv's group attribute) through
// include/lms only: the output and the gradients of x, w and b against
// PyTorch (torch/reference.py) on random data with fixed, printed seeds, 2-D
// and 3-D, strided and dilated; and a MobileNet-like depthwise-separable
// network planned with LMS through the Device overload of lms::rewrite at a
// tight budget, bit-identical to the step without LMS at the predicted peak.
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

// Relative L2 error allowed against PyTorch: the same float32 products,
// summed in another order (oneDNN's direct kernels).
constexpr double kTolerance = 1e-5;

struct GroupCase {
  Shape x;
  int64_t k;         // output channels
  Shape kernel;      // spatial kernel
  ConvOptions conv;  // stride, pad, dilation, group (full lists)
  bool bias;
  uint64_t seed;
};

std::vector<double> reals(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

void check_against_torch(const GroupCase& gc) {
  SCOPED_TRACE(testing::Message() << "x " << torch_ref::shape_string(gc.x) << " group "
                                  << gc.conv.group);
  std::printf("grouped conv seed %" PRIu64 "\n", gc.seed);
  Shape w_shape = {gc.k, gc.x[1] / gc.conv.group};
  w_shape.insert(w_shape.end(), gc.kernel.begin(), gc.kernel.end());
  Graph g;
  const TensorId x = g.parameter("x", gc.x, Init{});
  const TensorId w = g.parameter("w", w_shape, Init{});
  const TensorId b = gc.bias ? g.parameter("b", {gc.k}, Init{}) : kNoTensor;
  const TensorId y = conv(g, "y", x, w, b, gc.conv);
  ASSERT_TRUE(g.status().ok()) << g.status();
  const Shape y_shape = g.tensor(y).shape;
  g.set_loss(mse_loss(g, "loss", y, g.input("target", y_shape)));
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.0});
  ASSERT_TRUE(train.ok()) << train.status();

  std::mt19937_64 gen(gc.seed);
  TorchTensors in;
  in["x"] = {gc.x, random_values(num_elements(gc.x), gen)};
  in["w"] = {w_shape, random_values(num_elements(w_shape), gen)};
  if (gc.bias) in["b"] = {{gc.k}, random_values(gc.k, gen)};
  in["target"] = {y_shape, random_values(num_elements(y_shape), gen)};
  auto ref = torch_ref::torch_reference("conv",
                                        {{"stride", reals(gc.conv.stride)},
                                         {"pad", reals(gc.conv.pad)},
                                         {"dilation", reals(gc.conv.dilation)},
                                         {"group", {static_cast<double>(gc.conv.group)}}},
                                        in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ(ref->at("y").shape, y_shape);

  std::vector<std::string> fetches = {"y", "loss", "x/grad", "w/grad"};
  if (gc.bias) fetches.push_back("b/grad");
  const std::optional<StepResult> r = torch_ref::one_step(*train, in, fetches);
  ASSERT_TRUE(r.has_value());
  torch_ref::expect_close_to_torch(*r, *ref, fetches, kTolerance);
}

TEST(GroupedConv, MatchesPyTorch) {
  // ResNeXt-like: 4 groups of 3 channels.
  check_against_torch({{2, 12, 9, 8}, 8, {3, 3}, {{1, 1}, {1, 1}, {1, 1}, 4}, true, 81});
  // Depthwise (MobileNet), strided; 32 channels fill the blocked layout.
  check_against_torch({{2, 32, 10, 10}, 32, {3, 3}, {{2, 2}, {1, 1}, {1, 1}, 32}, false, 82});
  // Depthwise with a channel multiplier of 2, dilated.
  check_against_torch({{1, 6, 11, 9}, 12, {3, 3}, {{1, 1}, {2, 2}, {2, 2}, 6}, true, 83});
  // 3-D, 2 groups.
  check_against_torch(
      {{1, 4, 5, 6, 4}, 6, {3, 3, 3}, {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 2}, true, 84});
}

// conv 3x3 -> relu -> depthwise 3x3 -> ReLU6 -> pointwise 1x1 -> relu ->
// grouped 3x3 (4 groups) -> mse.
TEST(GroupedConv, DepthwiseSeparableNetWithLmsIsBitIdenticalAtThePredictedPeak) {
  constexpr uint64_t kSeed = 85;
  constexpr int64_t kN = 4, kSize = 32;
  std::printf("seed %" PRIu64 "\n", kSeed);
  Graph g;
  const TensorId x = g.input("x", {kN, 3, kSize, kSize});
  TensorId h = relu(g, "relu1", conv2d(g, "conv1", x, 16, {3}, {.pad = {1}, .seed = 1}));
  h = conv2d(g, "dw", h, 16, {3}, {.pad = {1}, .seed = 2, .group = 16});
  h = clip(g, "relu6", h, 0.0, 6.0);
  h = relu(g, "relu2", conv2d(g, "pw", h, 32, {1}, {.seed = 3}));
  h = conv2d(g, "grouped", h, 32, {3}, {.pad = {1}, .seed = 4, .group = 4});
  g.set_loss(mse_loss(g, "loss", h, g.input("target", {kN, 32, kSize, kSize})));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.05, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(kN * 3 * kSize * kSize, gen)},
                       {"target", random_values(kN * 32 * kSize * kSize, gen)}};
  user::expect_lms_steps_bit_identical(*train, feeds, 3);
}

}  // namespace
}  // namespace lms
