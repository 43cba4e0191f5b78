// linear (ONNX Gemm) through include/lms only: its output and the gradients
// of x, w and b against PyTorch (torch/reference.py) on random data with
// fixed, printed seeds, both weight layouts, with and without bias; and a
// small MLP planned with LMS through the Device overload of lms::rewrite at
// a tight budget, bit-identical to the step without LMS at the predicted
// peak.
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

// Relative L2 error allowed against PyTorch: the same float32 products and
// sums in another order.
constexpr double kTolerance = 1e-5;

struct LinearCase {
  int64_t n, c, k;
  bool trans_b, bias;
  uint64_t seed;
};

// y = linear(x, w, b?), loss = mse(y, target), every operand a parameter so
// that each gets a gradient; SGD with lr 0 leaves them as written.
absl::StatusOr<Graph> linear_graph(const LinearCase& lc) {
  Graph g;
  const TensorId x = g.parameter("x", {lc.n, lc.c}, Init{});
  const Shape w_shape = lc.trans_b ? Shape{lc.k, lc.c} : Shape{lc.c, lc.k};
  const TensorId w = g.parameter("w", w_shape, Init{});
  const TensorId b = lc.bias ? g.parameter("b", {lc.k}, Init{}) : kNoTensor;
  const TensorId target = g.input("target", {lc.n, lc.k});
  const TensorId y = linear(g, "y", x, w, b, lc.trans_b);
  g.set_loss(mse_loss(g, "loss", y, target));
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, g.loss(), Sgd{.lr = 0.0});
}

void check_against_torch(const LinearCase& lc) {
  SCOPED_TRACE(testing::Message() << "N " << lc.n << " C " << lc.c << " K " << lc.k << " trans_b "
                                  << lc.trans_b << " bias " << lc.bias);
  std::printf("linear [%" PRId64 ",%" PRId64 "] -> %" PRId64 ", seed %" PRIu64 "\n", lc.n, lc.c,
              lc.k, lc.seed);
  std::mt19937_64 gen(lc.seed);
  TorchTensors in;
  in["x"] = {{lc.n, lc.c}, random_values(lc.n * lc.c, gen)};
  in["w"] = {lc.trans_b ? Shape{lc.k, lc.c} : Shape{lc.c, lc.k}, random_values(lc.c * lc.k, gen)};
  if (lc.bias) in["b"] = {{lc.k}, random_values(lc.k, gen)};
  in["target"] = {{lc.n, lc.k}, random_values(lc.n * lc.k, gen)};
  auto ref = torch_ref::torch_reference("linear", {{"trans_b", {lc.trans_b ? 1.0 : 0.0}}}, in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();

  auto train = linear_graph(lc);
  ASSERT_TRUE(train.ok()) << train.status();
  std::vector<std::string> fetches = {"y", "loss", "x/grad", "w/grad"};
  if (lc.bias) fetches.push_back("b/grad");
  const std::optional<StepResult> r = torch_ref::one_step(*train, in, fetches);
  ASSERT_TRUE(r.has_value());
  torch_ref::expect_close_to_torch(*r, *ref, fetches, kTolerance);
}

TEST(Linear, MatchesPyTorch) {
  check_against_torch({.n = 3, .c = 5, .k = 4, .trans_b = true, .bias = true, .seed = 31});
  check_against_torch({.n = 7, .c = 33, .k = 10, .trans_b = false, .bias = false, .seed = 32});
  check_against_torch({.n = 16, .c = 130, .k = 17, .trans_b = true, .bias = false, .seed = 33});
  check_against_torch({.n = 1, .c = 64, .k = 100, .trans_b = false, .bias = true, .seed = 34});
}

// A classifier head as an MLP: [N,C] -> 4C -> 4C -> K, relu between.
absl::StatusOr<Graph> mlp(int64_t n, int64_t c, int64_t k) {
  Graph g;
  const TensorId x = g.input("x", {n, c});
  const TensorId target = g.input("target", {n, k});
  TensorId h = x;
  const std::vector<int64_t> widths = {4 * c, 4 * c, k};
  int64_t in = c;
  for (size_t i = 0; i < widths.size(); ++i) {
    const std::string name = "fc" + std::to_string(i + 1);
    const bool trans_b = i != 1;  // one layer in ONNX Gemm's default layout
    const Shape w_shape = trans_b ? Shape{widths[i], in} : Shape{in, widths[i]};
    const TensorId w = g.parameter(name + "/w", w_shape, Init::he_normal(i + 1, in));
    const TensorId b = g.parameter(name + "/b", {widths[i]}, Init::constant(0.01));
    h = linear(g, name, h, w, b, trans_b);
    if (i + 1 < widths.size()) h = relu(g, name + "/relu", h);
    in = widths[i];
  }
  g.set_loss(mse_loss(g, "loss", h, target));
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, g.loss(), Sgd{.lr = 0.05, .momentum = 0.9});
}

TEST(Linear, MlpWithLmsIsBitIdenticalAtThePredictedPeak) {
  constexpr uint64_t kSeed = 35;
  constexpr int64_t kN = 64, kC = 96, kK = 10;
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto train = mlp(kN, kC, kK);
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(kN * kC, gen)}, {"target", random_values(kN * kK, gen)}};
  user::expect_lms_steps_bit_identical(*train, feeds, 3);
}

}  // namespace
}  // namespace lms
