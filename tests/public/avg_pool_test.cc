// avg_pool and global_avg_pool through include/lms only: the output and the
// gradient of x against PyTorch (torch/reference.py) on random data with
// fixed, printed seeds, 2-D and 3-D, with and without counting the padding;
// and a small classifier-like network (conv, avg_pool, conv,
// global_avg_pool) planned with LMS through the Device overload of
// lms::rewrite at a tight budget, bit-identical to the step without LMS at
// the predicted peak.
#include <gtest/gtest.h>

#include <cinttypes>
#include <optional>
#include <random>

#include "budget_check.h"
#include "torch_compare.h"
#include "torch_reference.h"
#include "user_models.h"

namespace lms {
namespace {

using torch_ref::random_values;
using torch_ref::relative_l2;
using torch_ref::TorchTensors;
using user::kMiB;

// Relative L2 error allowed against PyTorch: window sums of at most a few
// hundred float32 terms in another order.
constexpr double kTolerance = 1e-5;

struct PoolCase {
  Shape x;
  PoolOptions pool;  // empty kernel: global_avg_pool
  uint64_t seed;
};

// y = avg_pool(x) (x a parameter, so that it gets a gradient), loss =
// mse(y, target); SGD with lr 0 leaves x as written.
absl::StatusOr<Graph> pool_graph(const PoolCase& pc, Shape* y_shape) {
  Graph g;
  const TensorId x = g.parameter("x", pc.x, Init{});
  const TensorId y =
      pc.pool.kernel.empty() ? global_avg_pool(g, "y", x) : avg_pool(g, "y", x, pc.pool);
  LMS_RETURN_IF_ERROR(g.status());
  *y_shape = g.tensor(y).shape;
  g.set_loss(mse_loss(g, "loss", y, g.input("target", *y_shape)));
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, g.loss(), Sgd{.lr = 0.0});
}

void check_against_torch(const PoolCase& pc) {
  SCOPED_TRACE(testing::Message() << "x " << torch_ref::shape_string(pc.x) << " kernel "
                                  << torch_ref::shape_string(pc.pool.kernel));
  std::printf("avg_pool seed %" PRIu64 "\n", pc.seed);
  Shape y_shape;
  auto train = pool_graph(pc, &y_shape);
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(pc.seed);
  TorchTensors in;
  in["x"] = {pc.x, random_values(num_elements(pc.x), gen)};
  in["target"] = {y_shape, random_values(num_elements(y_shape), gen)};
  const size_t r = pc.x.size() - 2;
  const std::vector<int64_t> spatial(pc.x.begin() + 2, pc.x.end());
  const bool global = pc.pool.kernel.empty();
  auto reals = [](const std::vector<int64_t>& v) {
    return std::vector<double>(v.begin(), v.end());
  };
  torch_ref::TorchAttrs attrs = {
      {"kernel", reals(global ? spatial : pc.pool.kernel)},
      {"stride", reals(global ? spatial : pc.pool.stride)},
      {"pad", global || pc.pool.pad.empty() ? std::vector<double>(r, 0.0) : reals(pc.pool.pad)},
      {"count_include_pad", {pc.pool.count_include_pad ? 1.0 : 0.0}},
      {"ceil_mode", {pc.pool.ceil_mode ? 1.0 : 0.0}}};
  auto ref = torch_ref::torch_reference("avg_pool", attrs, in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();

  const std::vector<std::string> fetches = {"y", "loss", "x/grad"};
  const std::optional<StepResult> result = torch_ref::one_step(*train, in, fetches);
  ASSERT_TRUE(result.has_value());
  torch_ref::expect_close_to_torch(*result, *ref, fetches, kTolerance);
}

TEST(AvgPool, MatchesPyTorch) {
  // DenseNet's transition: 2x2, stride 2.
  check_against_torch({{2, 3, 8, 6}, {.kernel = {2, 2}, .stride = {2, 2}}, 51});
  // Inception's 3x3, stride 1, pad 1, padding counted (PyTorch's default).
  check_against_torch({{2, 3, 7, 9}, {.kernel = {3, 3}, .stride = {1, 1}, .pad = {1, 1}}, 52});
  check_against_torch(
      {{1, 4, 9, 8},
       {.kernel = {3, 2}, .stride = {2, 1}, .pad = {1, 1}, .count_include_pad = false},
       53});
  check_against_torch(
      {{1, 2, 5, 6, 4}, {.kernel = {2, 3, 2}, .stride = {1, 2, 2}, .pad = {1, 1, 0}}, 54});
  // ceil_mode: 9 -> 5 (floor: 4) with the last window holding one row of
  // x, and in 3-D; with count_include_pad where rounding up adds no window
  // (7 + 2 -> 4, as floor; one that adds a window is refused, below).
  check_against_torch(
      {{2, 3, 9, 9},
       {.kernel = {2, 2}, .stride = {2, 2}, .count_include_pad = false, .ceil_mode = true},
       57});
  check_against_torch(
      {{1, 2, 7, 7}, {.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1}, .ceil_mode = true}, 58});
  check_against_torch(
      {{1, 2, 5, 6, 7},
       {.kernel = {2, 3, 2}, .stride = {2, 2, 2}, .count_include_pad = false, .ceil_mode = true},
       59});
  // Global average pooling, ResNet's head (7x7) and 3-D.
  check_against_torch({{3, 5, 7, 7}, {}, 55});
  check_against_torch({{2, 3, 4, 5, 3}, {}, 56});
}

// With count_include_pad, a ceil_mode window that runs past the padding is
// refused when the graph is built, naming the dimension: PyTorch divides it
// by its part inside the padding, which no lms kernel computes.
TEST(AvgPool, CeilModeWithPaddingCountedPastThePaddingIsRefused) {
  Graph g;
  const TensorId x = g.input("x", {1, 2, 9, 9});
  EXPECT_EQ(avg_pool(g, "pool", x, {.kernel = {2, 2}, .stride = {2, 2}, .ceil_mode = true}),
            kNoTensor);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("spatial dim 0 runs 1 past the padded input"),
            absl::string_view::npos)
      << g.status();
  EXPECT_NE(g.status().message().find("count_include_pad = 0"), absl::string_view::npos)
      << g.status();
  // The same window in max_pool sees only x: accepted, 9 -> 5.
  Graph h;
  const TensorId y = max_pool(h, "pool", h.input("x", {1, 2, 9, 9}),
                              {.kernel = {2, 2}, .stride = {2, 2}, .ceil_mode = true});
  ASSERT_TRUE(h.status().ok()) << h.status();
  EXPECT_EQ(h.tensor(y).shape, (Shape{1, 2, 5, 5}));
}

// conv 3x3 -> relu -> avg_pool 2 -> conv 3x3 -> relu -> global_avg_pool -> mse.
absl::StatusOr<Graph> pooled_net(int64_t n, int64_t size) {
  Graph g;
  const TensorId x = g.input("x", {n, 3, size, size});
  TensorId h = relu(g, "relu1", conv2d(g, "conv1", x, 16, {3}, {.pad = {1}, .seed = 1}));
  h = avg_pool(g, "pool1", h, {.kernel = {2, 2}});
  h = relu(g, "relu2", conv2d(g, "conv2", h, 32, {3}, {.pad = {1}, .seed = 2}));
  h = global_avg_pool(g, "gap", h);
  g.set_loss(mse_loss(g, "loss", h, g.input("target", {n, 32, 1, 1})));
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, g.loss(), Sgd{.lr = 0.05, .momentum = 0.9});
}

TEST(AvgPool, NetworkWithLmsIsBitIdenticalAtThePredictedPeak) {
  constexpr uint64_t kSeed = 57;
  constexpr int64_t kN = 4, kSize = 32;
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto train = pooled_net(kN, kSize);
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(kN * 3 * kSize * kSize, gen)},
                       {"target", random_values(kN * 32, gen)}};
  user::expect_lms_steps_bit_identical(*train, feeds, 3);
}

}  // namespace
}  // namespace lms
