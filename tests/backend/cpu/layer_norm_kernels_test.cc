// layer_norm / layer_norm_bwd kernels (oneDNN layer_normalization) against a
// naive double-precision reference; the backward op (dx, dgamma, dbeta)
// against central finite differences of L = sum(y * r), r random; bad specs
// rejected naming the node.
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "pointwise_test_util.h"

namespace lms::cpu {
namespace {

using testing::Buffers;
using testing::make_spec;
using testing::run_spec;

constexpr double kFwdTol = 1e-5;  // float statistics over at most 300 elements
constexpr double kBwdTol = 2e-4;  // vs finite differences (h = 1e-4) of the reference
constexpr double kEps = 1e-3;

// y = gamma * (x - mean) / sqrt(var + eps) + beta, statistics per row of the
// last axis.
std::vector<double> layer_norm_ref(const Shape& s, const std::vector<double>& x,
                                   const std::vector<double>& gamma,
                                   const std::vector<double>& beta) {
  const int64_t cols = s.back(), rows = num_elements(s) / cols;
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * cols;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < cols; ++i) mean += xr[i];
    mean /= static_cast<double>(cols);
    for (int64_t i = 0; i < cols; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(cols);
    const double inv = 1.0 / std::sqrt(var + kEps);
    for (int64_t i = 0; i < cols; ++i) y[r * cols + i] = gamma[i] * (xr[i] - mean) * inv + beta[i];
  }
  return y;
}

class LayerNormTest : public ::testing::TestWithParam<Shape> {
 protected:
  CpuKernelContext ctx_ = testing::make_context();
};

TEST_P(LayerNormTest, ForwardMatchesReference) {
  const Shape& s = GetParam();
  std::mt19937 rng = testing::seeded_rng(2025, "layer_norm");
  const int64_t n = num_elements(s), c = s.back();
  Buffers in = {testing::random_vector(rng, n, -2.f, 3.f),
                testing::random_vector(rng, c, 0.5f, 2.f), testing::random_vector(rng, c)};
  auto y = run_spec(make_spec(OpKind::kLayerNorm, {s, {c}, {c}}, {s}, {{"eps", kEps}}), in, ctx_);
  ASSERT_TRUE(y.ok()) << y.status();
  const auto want = layer_norm_ref(s, testing::to_double(in[0]), testing::to_double(in[1]),
                                   testing::to_double(in[2]));
  EXPECT_LT(testing::max_rel_error((*y)[0], want), kFwdTol);
}

TEST_P(LayerNormTest, BackwardMatchesFiniteDifferences) {
  const Shape& s = GetParam();
  std::mt19937 rng = testing::seeded_rng(4049, "layer_norm_bwd");
  const int64_t n = num_elements(s), c = s.back();
  const auto x = testing::random_vector(rng, n, -2.f, 3.f);
  const auto gamma = testing::random_vector(rng, c, 0.5f, 2.f);
  const auto beta = testing::random_vector(rng, c);
  const auto r = testing::random_vector(rng, n);
  const KernelSpec spec =
      make_spec(OpKind::kLayerNormBwd, {s, {c}, s}, {s, {c}, {c}}, {{"eps", kEps}});
  Buffers in = {x, gamma, r};
  auto grads = run_spec(spec, in, ctx_);
  ASSERT_TRUE(grads.ok()) << grads.status();

  const auto xd = testing::to_double(x), gd = testing::to_double(gamma),
             bd = testing::to_double(beta);
  auto loss_x = [&](const std::vector<double>& v) {
    return testing::dot(layer_norm_ref(s, v, gd, bd), r);
  };
  auto loss_g = [&](const std::vector<double>& v) {
    return testing::dot(layer_norm_ref(s, xd, v, bd), r);
  };
  auto loss_b = [&](const std::vector<double>& v) {
    return testing::dot(layer_norm_ref(s, xd, gd, v), r);
  };
  EXPECT_LT(testing::max_rel_error((*grads)[0], testing::finite_diff(loss_x, xd)), kBwdTol);
  EXPECT_LT(testing::max_rel_error((*grads)[1], testing::finite_diff(loss_g, gd)), kBwdTol);
  EXPECT_LT(testing::max_rel_error((*grads)[2], testing::finite_diff(loss_b, bd)), kBwdTol);

  Buffers again = {x, gamma, r};
  auto grads2 = run_spec(spec, again, ctx_);
  ASSERT_TRUE(grads2.ok());
  EXPECT_TRUE(testing::bit_identical(*grads, *grads2));
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayerNormTest,
                         ::testing::Values(Shape{4, 16}, Shape{3, 67}, Shape{2, 3, 10},
                                           Shape{2, 2, 3, 5}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           std::string name = "x";
                           for (int64_t d : info.param) {
                             name += '_';  // not "_" + ...: gcc 12's -Wrestrict false positive
                             name += std::to_string(d);
                           }
                           return name;
                         });

TEST(LayerNormSpec, InvalidSpecsAreRejected) {
  const CpuKernelContext ctx = testing::make_context();
  const Shape s = {2, 3, 8};
  const std::vector<KernelSpec> bad = {
      make_spec(OpKind::kLayerNorm, {s, {3}, {8}}, {s}, {{"eps", 1e-5}}),  // gamma is [x[1]]
      make_spec(OpKind::kLayerNorm, {s, {8}, {8}}, {s}, {{"eps", 0.0}}),   // eps <= 0
      make_spec(OpKind::kLayerNorm, {s, {8}, {8}}, {s}),                   // eps missing
      make_spec(OpKind::kLayerNorm, {{2, 1, 3, 4, 8}, {8}, {8}}, {{2, 1, 3, 4, 8}},
                {{"eps", 1e-5}}),                                                // rank 5
      make_spec(OpKind::kLayerNormBwd, {s, {8}, s}, {s, {8}}, {{"eps", 1e-5}}),  // outputs
      make_spec(OpKind::kLayerNormBwd, {s, {8}, {2, 8}}, {s, {8}, {8}}, {{"eps", 1e-5}}),
  };
  for (const KernelSpec& spec : bad) {
    auto k = create_cpu_kernel(spec, ctx);
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << op_name(spec.op);
    EXPECT_NE(k.status().message().find(spec.name), std::string::npos) << k.status();
  }
}

}  // namespace
}  // namespace lms::cpu
