// transpose through include/lms only: the output and the gradient of x
// against PyTorch's permute (torch/reference.py) on random data with fixed,
// printed seeds, at ranks 1 to 8; its errors; and a channels-last head
// (conv, transpose to [N,H,W,C], reshape, linear) planned with LMS through
// the Device overload of lms::rewrite at a tight budget, bit-identical to
// the step without LMS at the predicted peak.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cinttypes>
#include <optional>
#include <random>

#include "budget_check.h"
#include "torch_compare.h"
#include "torch_reference.h"

namespace lms {
namespace {

using ::testing::HasSubstr;
using torch_ref::random_values;
using torch_ref::relative_l2;
using torch_ref::TorchTensors;
using user::kMiB;

// A copy: the only error is the mse gradient's rounding.
constexpr double kTolerance = 1e-6;

struct TransposeCase {
  Shape x;
  std::vector<int64_t> perm;
  uint64_t seed;
};

void check_against_torch(const TransposeCase& tc) {
  SCOPED_TRACE(testing::Message() << "x " << torch_ref::shape_string(tc.x) << " perm "
                                  << torch_ref::shape_string(tc.perm));
  std::printf("transpose seed %" PRIu64 "\n", tc.seed);
  Graph g;
  const TensorId x = g.parameter("x", tc.x, Init{});
  const TensorId y = transpose(g, "y", x, tc.perm);
  ASSERT_TRUE(g.status().ok()) << g.status();
  const Shape y_shape = g.tensor(y).shape;
  g.set_loss(mse_loss(g, "loss", y, g.input("target", y_shape)));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.0});
  ASSERT_TRUE(train.ok()) << train.status();

  std::mt19937_64 gen(tc.seed);
  TorchTensors in;
  in["x"] = {tc.x, random_values(num_elements(tc.x), gen, 2.0f)};
  in["target"] = {y_shape, random_values(num_elements(y_shape), gen, 1.0f)};
  std::vector<double> perm(tc.perm.begin(), tc.perm.end());
  auto ref = torch_ref::torch_reference("transpose", {{"perm", perm}}, in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();

  const std::vector<std::string> fetches = {"y", "loss", "x/grad"};
  const std::optional<StepResult> r =
      torch_ref::one_step(*train, in, {.written = {"x"}, .fed = {"target"}, .fetches = fetches});
  ASSERT_TRUE(r.has_value());
  // The forward is a permutation of x's values: exactly PyTorch's.
  EXPECT_EQ(r->fetched.at("y"), ref->at("y").values);
  torch_ref::expect_close_to_torch(*r, *ref, fetches, kTolerance);
}

TEST(Transpose, MatchesPyTorch) {
  check_against_torch({{5, 7}, {1, 0}, 71});
  check_against_torch({{2, 3, 4, 5}, {0, 2, 1, 3}, 72});  // attention's head split
  check_against_torch({{3, 4, 6}, {2, 0, 1}, 73});
  check_against_torch({{2, 3, 2, 4, 3}, {4, 2, 0, 3, 1}, 74});
  check_against_torch({{9}, {0}, 75});
  check_against_torch({{2, 1, 2, 3, 1, 2, 2, 3}, {7, 0, 6, 1, 5, 2, 4, 3}, 76});
}

TEST(Transpose, DefaultReversesTheDimensions) {
  Graph g;
  const TensorId y = transpose(g, "y", g.input("x", {2, 3, 4}));
  ASSERT_TRUE(g.status().ok()) << g.status();
  EXPECT_EQ(g.tensor(y).shape, (Shape{4, 3, 2}));
}

TEST(Transpose, BadPermutationsNameTheNode) {
  const std::vector<std::vector<int64_t>> bad = {{0, 1}, {0, 0, 1}, {0, 1, 3}, {-1, 0, 1}};
  for (const auto& perm : bad) {
    Graph g;
    transpose(g, "t1", g.input("x", {2, 3, 4}), perm);
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(g.status().message()), HasSubstr("'t1'"));
    EXPECT_THAT(std::string(g.status().message()), HasSubstr("perm"));
  }
}

// conv -> transpose to channels last -> reshape [N*H*W, C] -> linear -> mse.
TEST(Transpose, ChannelsLastHeadWithLmsIsBitIdenticalAtThePredictedPeak) {
  constexpr uint64_t kSeed = 77;
  constexpr int64_t kN = 4, kC = 16, kSize = 32;
  std::printf("seed %" PRIu64 "\n", kSeed);
  Graph g;
  const TensorId x = g.input("x", {kN, 3, kSize, kSize});
  TensorId h = relu(g, "relu1", conv2d(g, "conv1", x, kC, {3}, {.pad = {1}, .seed = 1}));
  h = transpose(g, "to_nhwc", h, {0, 2, 3, 1});
  h = reshape(g, "rows", h, {kN * kSize * kSize, kC});
  const TensorId w = g.parameter("w", {8, kC}, Init::he_normal(3, kC));
  h = linear(g, "fc", h, w, kNoTensor, true);
  g.set_loss(mse_loss(g, "loss", h, g.input("target", {kN * kSize * kSize, 8})));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.05, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(kN * 3 * kSize * kSize, gen, 2.0f)},
                       {"target", random_values(kN * kSize * kSize * 8, gen, 1.0f)}};
  user::expect_lms_steps_bit_identical(*train, feeds, 3);
}

}  // namespace
}  // namespace lms
