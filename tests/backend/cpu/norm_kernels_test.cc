// instance_norm / batch_norm kernels (oneDNN batch_normalization) against a
// naive double-precision reference; their backward ops (dx, dgamma, dbeta)
// against central finite differences of L = sum(y * r), r random.
#include <cmath>

#include "gtest/gtest.h"
#include "pointwise_test_util.h"

namespace lms::cpu {
namespace {

using testing::Buffers;
using testing::make_spec;
using testing::run_spec;

// Forward: float statistics over at most a few hundred elements.
constexpr double kFwdTol = 1e-5;
// Backward vs finite differences (h = 1e-4) of the double reference.
constexpr double kBwdTol = 2e-4;
constexpr double kEps = 1e-3;

// y = gamma * (x - mean) / sqrt(var + eps) + beta; statistics over S per
// (n, c) when instance, else over N and S per c.
std::vector<double> norm_ref(const Shape& s, const std::vector<double>& x,
                             const std::vector<double>& gamma, const std::vector<double>& beta,
                             bool instance) {
  const int64_t n_count = s[0], c_count = s[1], inner = num_elements(s) / (s[0] * s[1]);
  std::vector<double> y(x.size());
  const int64_t groups = instance ? n_count : 1;
  const int64_t per_group = instance ? 1 : n_count;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < c_count; ++c) {
      auto at = [&](int64_t j, int64_t i) {
        return ((g * per_group + j) * c_count + c) * inner + i;
      };
      double mean = 0, var = 0;
      const double count = static_cast<double>(per_group * inner);
      for (int64_t j = 0; j < per_group; ++j)
        for (int64_t i = 0; i < inner; ++i) mean += x[at(j, i)];
      mean /= count;
      for (int64_t j = 0; j < per_group; ++j)
        for (int64_t i = 0; i < inner; ++i) var += (x[at(j, i)] - mean) * (x[at(j, i)] - mean);
      var /= count;
      const double inv = 1.0 / std::sqrt(var + kEps);
      for (int64_t j = 0; j < per_group; ++j)
        for (int64_t i = 0; i < inner; ++i)
          y[at(j, i)] = gamma[c] * (x[at(j, i)] - mean) * inv + beta[c];
    }
  }
  return y;
}

struct Case {
  OpKind op;
  OpKind bwd;
  bool instance;
  Shape shape;
};

class NormTest : public ::testing::TestWithParam<Case> {
 protected:
  CpuKernelContext ctx_ = testing::make_context();
};

TEST_P(NormTest, ForwardMatchesReference) {
  const Case& c = GetParam();
  std::mt19937 rng = testing::seeded_rng(2024, op_name(c.op));
  const int64_t n = num_elements(c.shape), ch = c.shape[1];
  Buffers in = {testing::random_vector(rng, n, -2.f, 3.f),
                testing::random_vector(rng, ch, 0.5f, 2.f), testing::random_vector(rng, ch)};
  const Attrs attrs = {{"eps", kEps}};
  auto y = run_spec(make_spec(c.op, {c.shape, {ch}, {ch}}, {c.shape}, attrs), in, ctx_);
  ASSERT_TRUE(y.ok()) << y.status();
  const auto want = norm_ref(c.shape, testing::to_double(in[0]), testing::to_double(in[1]),
                             testing::to_double(in[2]), c.instance);
  EXPECT_LT(testing::max_rel_error((*y)[0], want), kFwdTol);
}

TEST_P(NormTest, BackwardMatchesFiniteDifferences) {
  const Case& c = GetParam();
  std::mt19937 rng = testing::seeded_rng(4048, op_name(c.op));
  const int64_t n = num_elements(c.shape), ch = c.shape[1];
  const auto x = testing::random_vector(rng, n, -2.f, 3.f);
  const auto gamma = testing::random_vector(rng, ch, 0.5f, 2.f);
  const auto beta = testing::random_vector(rng, ch);
  const auto r = testing::random_vector(rng, n);
  Buffers in = {x, gamma, r};
  const Attrs attrs = {{"eps", kEps}};
  const OpKind op = c.bwd;
  auto grads =
      run_spec(make_spec(op, {c.shape, {ch}, c.shape}, {c.shape, {ch}, {ch}}, attrs), in, ctx_);
  ASSERT_TRUE(grads.ok()) << grads.status();

  const auto xd = testing::to_double(x), gd = testing::to_double(gamma),
             bd = testing::to_double(beta);
  auto loss_x = [&](const std::vector<double>& v) {
    return testing::dot(norm_ref(c.shape, v, gd, bd, c.instance), r);
  };
  auto loss_g = [&](const std::vector<double>& v) {
    return testing::dot(norm_ref(c.shape, xd, v, bd, c.instance), r);
  };
  auto loss_b = [&](const std::vector<double>& v) {
    return testing::dot(norm_ref(c.shape, xd, gd, v, c.instance), r);
  };
  EXPECT_LT(testing::max_rel_error((*grads)[0], testing::finite_diff(loss_x, xd)), kBwdTol);
  EXPECT_LT(testing::max_rel_error((*grads)[1], testing::finite_diff(loss_g, gd)), kBwdTol);
  EXPECT_LT(testing::max_rel_error((*grads)[2], testing::finite_diff(loss_b, bd)), kBwdTol);

  // Same inputs again: bit-identical.
  Buffers again = {x, gamma, r};
  auto grads2 =
      run_spec(make_spec(op, {c.shape, {ch}, c.shape}, {c.shape, {ch}, {ch}}, attrs), again, ctx_);
  ASSERT_TRUE(grads2.ok());
  EXPECT_TRUE(testing::bit_identical(*grads, *grads2));
}

INSTANTIATE_TEST_SUITE_P(
    Ops, NormTest,
    ::testing::Values(Case{OpKind::kInstanceNorm, OpKind::kInstanceNormBwd, true, {2, 3, 4, 5}},
                      Case{OpKind::kInstanceNorm, OpKind::kInstanceNormBwd, true, {2, 2, 3, 2, 4}},
                      Case{OpKind::kBatchNorm, OpKind::kBatchNormBwd, false, {3, 4, 3, 3}},
                      Case{OpKind::kBatchNorm, OpKind::kBatchNormBwd, false, {2, 3, 2, 3, 2}}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(op_name(info.param.op)) + "_rank" +
             std::to_string(info.param.shape.size());
    });

// Per-channel batch mean and biased variance of x[N,C,S], in double.
void channel_stats(const Shape& s, const std::vector<float>& x, std::vector<double>& mean,
                   std::vector<double>& var) {
  const int64_t n = s[0], c = s[1], inner = num_elements(s) / (n * c);
  mean.assign(c, 0.0);
  var.assign(c, 0.0);
  const double count = static_cast<double>(n * inner);
  for (int64_t j = 0; j < c; ++j) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < inner; ++k) mean[j] += x[(i * c + j) * inner + k];
    mean[j] /= count;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < inner; ++k) {
        const double d = x[(i * c + j) * inner + k] - mean[j];
        var[j] += d * d;
      }
    var[j] /= count;
  }
}

// Training mode with running statistics: y as without them, and the batch
// mean and biased variance as outputs 1 and 2.
TEST(BatchNormRunningStats, TrainingSavesTheBatchStatistics) {
  CpuKernelContext ctx = testing::make_context();
  const Shape s = {3, 4, 3, 3};
  std::mt19937 rng = testing::seeded_rng(77, "bn_save");
  Buffers in = {testing::random_vector(rng, num_elements(s), -2.f, 3.f),
                testing::random_vector(rng, 4, 0.5f, 2.f), testing::random_vector(rng, 4),
                testing::random_vector(rng, 4), testing::random_vector(rng, 4, 0.5f, 2.f)};
  auto out = run_spec(make_spec(OpKind::kBatchNorm, {s, {4}, {4}, {4}, {4}}, {s, {4}, {4}},
                                {{"eps", kEps}, {"momentum", 0.1}}),
                      in, ctx);
  ASSERT_TRUE(out.ok()) << out.status();
  const auto want = norm_ref(s, testing::to_double(in[0]), testing::to_double(in[1]),
                             testing::to_double(in[2]), false);
  EXPECT_LT(testing::max_rel_error((*out)[0], want), kFwdTol);
  std::vector<double> mean, var;
  channel_stats(s, in[0], mean, var);
  EXPECT_LT(testing::max_rel_error((*out)[1], mean), kFwdTol);
  EXPECT_LT(testing::max_rel_error((*out)[2], var), kFwdTol);
}

// Eval mode: normalised with the running statistics given as inputs 3, 4.
TEST(BatchNormRunningStats, EvalUsesTheRunningStatistics) {
  CpuKernelContext ctx = testing::make_context();
  const Shape s = {2, 3, 2, 3, 2};
  std::mt19937 rng = testing::seeded_rng(78, "bn_eval");
  Buffers in = {testing::random_vector(rng, num_elements(s), -2.f, 3.f),
                testing::random_vector(rng, 3, 0.5f, 2.f), testing::random_vector(rng, 3),
                testing::random_vector(rng, 3), testing::random_vector(rng, 3, 0.5f, 2.f)};
  auto out = run_spec(make_spec(OpKind::kBatchNorm, {s, {3}, {3}, {3}, {3}}, {s},
                                {{"eps", kEps}, {"training", int64_t{0}}}),
                      in, ctx);
  ASSERT_TRUE(out.ok()) << out.status();
  const int64_t inner = num_elements(s) / (s[0] * s[1]);
  std::vector<double> want(in[0].size());
  for (size_t i = 0; i < want.size(); ++i) {
    const size_t c = (i / inner) % 3;
    want[i] = in[1][c] * (in[0][i] - double{in[3][c]}) / std::sqrt(in[4][c] + kEps) + in[2][c];
  }
  EXPECT_LT(testing::max_rel_error((*out)[0], want), kFwdTol);
}

// PyTorch's rule: r = (1 - m) r + m batch, the variance unbiased.
TEST(BatchNormRunningStats, UpdateFollowsPyTorchsRule) {
  CpuKernelContext ctx = testing::make_context();
  const Buffers start = {{1.f, -2.f}, {0.5f, 4.f}};
  Buffers in = {start[0], start[1], {3.f, 0.f}, {2.f, 8.f}};
  auto out = run_spec(make_spec(OpKind::kBnStatsUpdate, {{2}, {2}, {2}, {2}}, {},
                                {{"momentum", 0.25}, {"count", int64_t{5}}}),
                      in, ctx);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(in[0], (std::vector<float>{0.75f * 1 + 0.25f * 3, 0.75f * -2}));
  EXPECT_EQ(in[1], (std::vector<float>{0.75f * 0.5f + 0.25f * 2 * 1.25f, 0.75f * 4 + 0.25f * 10}));
}

TEST(BatchNormRunningStats, BadSpecsAreRefused) {
  CpuKernelContext ctx = testing::make_context();
  const Shape s = {2, 3, 4, 4};
  const Attrs eval = {{"eps", kEps}, {"training", int64_t{0}}};
  const Attrs stats = {{"momentum", 0.1}, {"count", int64_t{4}}};
  for (const KernelSpec& spec : {
           make_spec(OpKind::kBatchNorm, {s, {3}, {3}}, {s}, eval),  // no running stats
           make_spec(OpKind::kBatchNorm, {s, {3}, {3}, {3}, {3}}, {s}, {{"eps", kEps}}),
           make_spec(OpKind::kBatchNorm, {s, {3}, {3}, {3}, {2}}, {s}, eval),  // var shape
           make_spec(OpKind::kBnStatsUpdate, {{3}, {3}, {3}}, {}, stats),      // too few
           make_spec(OpKind::kBnStatsUpdate, {{3}, {3}, {3}, {3}}, {},
                     {{"momentum", 0.1}, {"count", int64_t{1}}}),
       }) {
    auto k = create_cpu_kernel(spec, ctx);
    ASSERT_FALSE(k.ok()) << spec.name;
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << k.status();
  }
}

class NormSpecTest : public ::testing::Test {
 protected:
  CpuKernelContext ctx_ = testing::make_context();
};

TEST_F(NormSpecTest, BatchNormWorkspaceHoldsStatisticsAndIsRequired) {
  const Shape s = {4, 8, 6, 6};
  auto k =
      create_cpu_kernel(make_spec(OpKind::kBatchNorm, {s, {8}, {8}}, {s}, {{"eps", 1e-5}}), ctx_);
  ASSERT_TRUE(k.ok()) << k.status();
  // Mean and variance of C = 8 floats live in the workspace.
  EXPECT_GE((*k)->workspace_bytes(), 2u * 8 * sizeof(float));
  KernelArgs args;
  std::vector<float> x(num_elements(s)), g(8), b(8), y(num_elements(s));
  args.inputs = {x.data(), g.data(), b.data()};
  args.outputs = {y.data()};
  EXPECT_EQ((*k)->run(args).code(), absl::StatusCode::kInvalidArgument);  // no workspace
}

TEST_F(NormSpecTest, InvalidSpecsAreRejected) {
  const Shape s = {2, 3, 4, 4};
  const std::vector<KernelSpec> bad = {
      make_spec(OpKind::kInstanceNorm, {s, {4}, {3}}, {s}, {{"eps", 1e-5}}),  // gamma size
      make_spec(OpKind::kInstanceNorm, {s, {3}, {3}}, {s}, {{"eps", 0.0}}),   // eps <= 0
      make_spec(OpKind::kInstanceNorm, {s, {3}, {3}}, {s}),                   // eps missing
      make_spec(OpKind::kInstanceNorm, {{2, 3}, {3}, {3}}, {{2, 3}},
                {{"eps", 1e-5}}),                                             // no spatial
      make_spec(OpKind::kBatchNorm, {s, {3}, {3}}, {s, s}, {{"eps", 1e-5}}),  // outputs
      make_spec(OpKind::kBatchNormBwd, {s, {3}, s}, {s, {3}}, {{"eps", 1e-5}}),
      make_spec(OpKind::kBatchNormBwd, {s, {3}, {2, 3, 4, 5}}, {s, {3}, {3}}, {{"eps", 1e-5}}),
  };
  for (const KernelSpec& spec : bad) {
    auto k = create_cpu_kernel(spec, ctx_);
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << op_name(spec.op);
    EXPECT_NE(k.status().message().find(spec.name), std::string::npos) << k.status();
  }
}

}  // namespace
}  // namespace lms::cpu
