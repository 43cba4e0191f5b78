// mse_loss, soft_dice_loss, reduce_mean kernels against double-precision
// references of docs/ops.md; their backward ops against central finite
// differences of dloss * loss(pred).
#include <cmath>

#include "gtest/gtest.h"
#include "pointwise_test_util.h"

namespace lms::cpu {
namespace {

using testing::Buffers;
using testing::make_spec;
using testing::run_spec;

// Losses accumulate in double and round once to float.
constexpr double kFwdTol = 1e-6;
constexpr double kBwdTol = 1e-5;
const Shape kScalar = {};

double mse_ref(const std::vector<double>& p, const std::vector<float>& t) {
  double s = 0;
  for (size_t i = 0; i < p.size(); ++i) s += (p[i] - t[i]) * (p[i] - t[i]);
  return s / static_cast<double>(p.size());
}

double dice_ref(const Shape& shape, const std::vector<double>& p, const std::vector<float>& t,
                double eps) {
  const int64_t slices = shape[0] * shape[1], s = num_elements(shape) / slices;
  double acc = 0;
  for (int64_t j = 0; j < slices; ++j) {
    double inter = 0, sp = 0, st = 0;
    for (int64_t i = j * s; i < (j + 1) * s; ++i) {
      inter += p[i] * t[i];
      sp += p[i];
      st += t[i];
    }
    acc += (2 * inter + eps) / (sp + st + eps);
  }
  return 1 - acc / static_cast<double>(slices);
}

class LossTest : public ::testing::Test {
 protected:
  CpuKernelContext ctx_ = testing::make_context();
};

TEST_F(LossTest, MseForwardAndBackward) {
  std::mt19937 rng = testing::seeded_rng(11, "mse");
  const Shape s = {2, 1, 7, 9};
  const int64_t n = num_elements(s);
  Buffers in = {testing::random_vector(rng, n), testing::random_vector(rng, n)};
  auto loss = run_spec(make_spec(OpKind::kMseLoss, {s, s}, {kScalar}), in, ctx_);
  ASSERT_TRUE(loss.ok()) << loss.status();
  const double want = mse_ref(testing::to_double(in[0]), in[1]);
  EXPECT_LT(std::abs((*loss)[0][0] - want) / want, kFwdTol);

  const float dloss = 1.7f;
  Buffers bwd_in = {in[0], in[1], {dloss}};
  auto grad = run_spec(make_spec(OpKind::kMseLossBwd, {s, s, kScalar}, {s}), bwd_in, ctx_);
  ASSERT_TRUE(grad.ok()) << grad.status();
  auto f = [&](const std::vector<double>& p) { return dloss * mse_ref(p, in[1]); };
  EXPECT_LT(testing::max_rel_error((*grad)[0], testing::finite_diff(f, testing::to_double(in[0]))),
            kBwdTol);
}

TEST_F(LossTest, SoftDiceForwardAndBackward) {
  std::mt19937 rng = testing::seeded_rng(12, "soft_dice");
  for (const Shape& s : {Shape{2, 3, 4, 5}, Shape{1, 2, 3, 3, 4}}) {
    for (double eps : {1e-5, 1.0}) {
      SCOPED_TRACE(::testing::Message() << "rank " << s.size() << " eps " << eps);
      const int64_t n = num_elements(s);
      std::vector<float> target(n);
      for (float& t : target) t = rng() % 3 == 0 ? 1.f : 0.f;
      Buffers in = {testing::random_vector(rng, n, 0.f, 1.f), target};
      const Attrs attrs = {{"eps", eps}};
      auto loss = run_spec(make_spec(OpKind::kSoftDiceLoss, {s, s}, {kScalar}, attrs), in, ctx_);
      ASSERT_TRUE(loss.ok()) << loss.status();
      const double want = dice_ref(s, testing::to_double(in[0]), target, eps);
      EXPECT_LT(std::abs((*loss)[0][0] - want), kFwdTol);

      const float dloss = -0.6f;
      Buffers bwd_in = {in[0], target, {dloss}};
      auto grad =
          run_spec(make_spec(OpKind::kSoftDiceLossBwd, {s, s, kScalar}, {s}, attrs), bwd_in, ctx_);
      ASSERT_TRUE(grad.ok()) << grad.status();
      auto f = [&](const std::vector<double>& p) { return dloss * dice_ref(s, p, target, eps); };
      const auto fd = testing::finite_diff(f, testing::to_double(in[0]));
      EXPECT_LT(testing::max_rel_error((*grad)[0], fd), kBwdTol);
    }
  }
}

TEST_F(LossTest, PerfectPredictionHasZeroDiceLoss) {
  const Shape s = {1, 2, 2, 2};
  Buffers in = {{1, 0, 1, 0, 0, 1, 1, 1}, {1, 0, 1, 0, 0, 1, 1, 1}};
  auto loss =
      run_spec(make_spec(OpKind::kSoftDiceLoss, {s, s}, {kScalar}, {{"eps", 1e-6}}), in, ctx_);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR((*loss)[0][0], 0.0, 1e-7);
}

TEST_F(LossTest, ReduceMeanForwardAndBackward) {
  std::mt19937 rng = testing::seeded_rng(13, "reduce_mean");
  const Shape s = {3, 4, 5};
  const int64_t n = num_elements(s);
  Buffers in = {testing::random_vector(rng, n, 0.f, 2.f)};
  auto y = run_spec(make_spec(OpKind::kReduceMean, {s}, {kScalar}), in, ctx_);
  ASSERT_TRUE(y.ok()) << y.status();
  double want = 0;
  for (float v : in[0]) want += v;
  want /= n;
  EXPECT_LT(std::abs((*y)[0][0] - want) / want, kFwdTol);

  Buffers dy = {{3.0f}};
  auto dx = run_spec(
      make_spec(OpKind::kReduceMeanBwd, {kScalar}, {s}, {{"input_shape", std::vector<int64_t>(s)}}),
      dy, ctx_);
  ASSERT_TRUE(dx.ok()) << dx.status();
  for (float v : (*dx)[0]) ASSERT_FLOAT_EQ(v, 3.0f / n);
}

TEST_F(LossTest, RepeatedRunsAreBitIdentical) {
  std::mt19937 rng = testing::seeded_rng(14, "loss_determinism");
  const Shape s = {4, 3, 16, 16};
  const int64_t n = num_elements(s);
  Buffers in = {
      testing::random_vector(rng, n, 0.f, 1.f), testing::random_vector(rng, n, 0.f, 1.f), {0.5f}};
  const KernelSpec spec =
      make_spec(OpKind::kSoftDiceLossBwd, {s, s, kScalar}, {s}, {{"eps", 1e-5}});
  auto a = run_spec(spec, in, ctx_);
  auto b = run_spec(spec, in, ctx_);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(testing::bit_identical(*a, *b));
}

// sum_to against a double reference, over the leading rows (a bias
// gradient, summed row after row) and over other axes (the general walk):
// both sum each output's terms in x's order, in double.
TEST_F(LossTest, SumToMatchesReference) {
  std::mt19937 rng = testing::seeded_rng(15, "sum_to");
  struct Case {
    Shape x, y;
  };
  for (const Case& c :
       {Case{{4, 33, 70}, {70}}, Case{{4, 33, 70}, {1, 1, 70}}, Case{{4, 33, 70}, {4, 1, 70}},
        Case{{4, 33, 70}, {1, 33, 1}}, Case{{5, 7}, {1}}, Case{{5, 7}, {5, 1}}}) {
    const int64_t n = num_elements(c.x);
    Buffers in = {testing::random_vector(rng, n)};
    auto y = run_spec(make_spec(OpKind::kSumTo, {c.x}, {c.y}, {{"shape", c.y}}), in, ctx_);
    ASSERT_TRUE(y.ok()) << y.status();
    // y aligned to x's rank (leading 1s), then each x element added in order.
    Shape ya(c.x.size() - c.y.size(), 1);
    ya.insert(ya.end(), c.y.begin(), c.y.end());
    std::vector<double> want(num_elements(c.y), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t rest = i, j = 0, stride = 1;
      for (size_t d = c.x.size(); d-- > 0;) {
        const int64_t coord = rest % c.x[d];
        rest /= c.x[d];
        if (ya[d] > 1) j += coord * stride;
        stride *= ya[d];
      }
      want[j] += in[0][i];
    }
    ASSERT_EQ((*y)[0].size(), want.size());
    for (size_t j = 0; j < want.size(); ++j) {
      EXPECT_EQ((*y)[0][j], static_cast<float>(want[j]))
          << "case x rank " << c.x.size() << ", y numel " << want.size() << ", output " << j;
    }
  }
}

TEST_F(LossTest, InvalidSpecsAreRejected) {
  const Shape s = {2, 3, 4};
  const std::vector<KernelSpec> bad = {
      make_spec(OpKind::kMseLoss, {s, {2, 3, 5}}, {kScalar}),                   // target shape
      make_spec(OpKind::kMseLoss, {s, s}, {s}),                                 // loss not scalar
      make_spec(OpKind::kMseLossBwd, {s, s, {2}}, {s}),                         // dloss not scalar
      make_spec(OpKind::kSoftDiceLoss, {s, s}, {kScalar}),                      // eps missing
      make_spec(OpKind::kSoftDiceLoss, {s, s}, {kScalar}, {{"eps", -1.0}}),     // eps < 0
      make_spec(OpKind::kSoftDiceLoss, {{6}, {6}}, {kScalar}, {{"eps", 1.0}}),  // rank 1
      make_spec(OpKind::kReduceMeanBwd, {kScalar}, {s},
                {{"input_shape", std::vector<int64_t>{2, 3}}}),
      make_spec(OpKind::kReduceMeanBwd, {kScalar}, {s}, {{"input_shape", int64_t{24}}}),
  };
  for (const KernelSpec& spec : bad) {
    auto k = create_cpu_kernel(spec, ctx_);
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << op_name(spec.op);
    EXPECT_NE(k.status().message().find(spec.name), std::string::npos) << k.status();
  }
}

}  // namespace
}  // namespace lms::cpu
