// global_norm, increment, sgd_update, adam_update kernels against
// hand-written double-precision references of the formulas in docs/ops.md,
// over 3 steps, with and without gradient clipping.
#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"
#include "pointwise_test_util.h"

namespace lms::cpu {
namespace {

using testing::Buffers;
using testing::make_spec;
using testing::run_spec;

constexpr int kSteps = 3;
const Shape kScalar = {};
const Shape kParam = {4, 3, 3, 3};
// Float state vs double reference after 3 steps, relative to the largest
// parameter change (updates) or state value.
constexpr double kTol = 1e-4;

double norm_ref(const std::vector<std::vector<float>>& gs) {
  double s = 0;
  for (const auto& g : gs)
    for (float v : g) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

double clip_ref(double clip_norm, double norm, bool has_norm) {
  if (clip_norm <= 0 || !has_norm) return 1.0;
  return std::min(1.0, clip_norm / (norm + 1e-6));
}

// The optimizer hyper-parameters of one scenario.
struct Scenario {
  double clip_norm;
  bool has_norm;  // the norm input is present
  double weight_decay;
};

std::vector<Scenario> scenarios() {
  // clip_norm 0.3 is below every gradient norm here (~3), so clipping is on.
  return {{0.0, false, 0.0}, {0.3, true, 1e-2}, {0.0, true, 1e-2}, {0.3, false, 0.0}};
}

class OptimizerTest : public ::testing::TestWithParam<Scenario> {
 protected:
  CpuKernelContext ctx_ = testing::make_context();
};

// Returns the gradient of one step and its global norm (a float input).
std::pair<std::vector<float>, float> step_grad(std::mt19937& rng) {
  std::vector<float> g = testing::random_vector(rng, num_elements(kParam));
  return {g, static_cast<float>(norm_ref({g}))};
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  const std::vector<float>& start, const char* what) {
  std::vector<double> want_delta(want.size());
  std::vector<float> got_delta(got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    want_delta[i] = want[i] - start[i];
    got_delta[i] = got[i] - start[i];
  }
  EXPECT_LT(testing::max_rel_error(got_delta, want_delta), kTol) << what;
}

TEST_P(OptimizerTest, SgdMatchesReferenceOverThreeSteps) {
  const Scenario sc = GetParam();
  std::mt19937 rng = testing::seeded_rng(301, "sgd");
  const int64_t n = num_elements(kParam);
  const double lr = 0.05, momentum = 0.9;
  const Attrs attrs = {{"lr", lr},
                       {"momentum", momentum},
                       {"weight_decay", sc.weight_decay},
                       {"clip_norm", sc.clip_norm}};
  std::vector<Shape> shapes = {kParam, kParam, kParam};
  if (sc.has_norm) shapes.push_back(kScalar);
  const KernelSpec spec = make_spec(OpKind::kSgdUpdate, shapes, {}, attrs);

  const std::vector<float> p0 = testing::random_vector(rng, n);
  std::vector<float> p = p0, v(n, 0.f);
  std::vector<double> pr = testing::to_double(p0), vr(n, 0.0);
  for (int step = 0; step < kSteps; ++step) {
    auto [g, norm] = step_grad(rng);
    Buffers in = {p, g, v};
    if (sc.has_norm) in.push_back({norm});
    auto out = run_spec(spec, in, ctx_);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(in[1], g) << "grad must not be modified";
    p = in[0];
    v = in[2];
    const double c = clip_ref(sc.clip_norm, norm, sc.has_norm);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = c * g[i] + sc.weight_decay * pr[i];
      vr[i] = momentum * vr[i] + gi;
      pr[i] -= lr * vr[i];
    }
  }
  expect_close(p, pr, p0, "param");
  EXPECT_LT(testing::max_rel_error(v, vr), kTol);
}

TEST_P(OptimizerTest, AdamMatchesReferenceOverThreeSteps) {
  const Scenario sc = GetParam();
  std::mt19937 rng = testing::seeded_rng(302, "adam");
  const int64_t n = num_elements(kParam);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  const Attrs attrs = {{"lr", lr},
                       {"beta1", b1},
                       {"beta2", b2},
                       {"eps", eps},
                       {"weight_decay", sc.weight_decay},
                       {"clip_norm", sc.clip_norm}};
  std::vector<Shape> shapes = {kParam, kParam, kParam, kParam, kScalar};
  if (sc.has_norm) shapes.push_back(kScalar);
  const KernelSpec spec = make_spec(OpKind::kAdamUpdate, shapes, {}, attrs);
  const KernelSpec inc = make_spec(OpKind::kIncrement, {kScalar}, {});

  const std::vector<float> p0 = testing::random_vector(rng, n);
  std::vector<float> p = p0, m(n, 0.f), v(n, 0.f), step = {0.f};
  std::vector<double> pr = testing::to_double(p0), mr(n, 0.0), vr(n, 0.0);
  for (int t = 1; t <= kSteps; ++t) {
    Buffers inc_in = {step};
    ASSERT_TRUE(run_spec(inc, inc_in, ctx_).ok());
    step = inc_in[0];
    ASSERT_EQ(step[0], static_cast<float>(t));
    auto [g, norm] = step_grad(rng);
    Buffers in = {p, g, m, v, step};
    if (sc.has_norm) in.push_back({norm});
    auto out = run_spec(spec, in, ctx_);
    ASSERT_TRUE(out.ok()) << out.status();
    p = in[0];
    m = in[2];
    v = in[3];
    const double c = clip_ref(sc.clip_norm, norm, sc.has_norm);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = c * g[i] + sc.weight_decay * pr[i];
      mr[i] = b1 * mr[i] + (1 - b1) * gi;
      vr[i] = b2 * vr[i] + (1 - b2) * gi * gi;
      const double mhat = mr[i] / (1 - std::pow(b1, t)), vhat = vr[i] / (1 - std::pow(b2, t));
      pr[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
  expect_close(p, pr, p0, "param");
  EXPECT_LT(testing::max_rel_error(m, mr), kTol);
  EXPECT_LT(testing::max_rel_error(v, vr), kTol);
}

INSTANTIATE_TEST_SUITE_P(Clipping, OptimizerTest, ::testing::ValuesIn(scenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& info) {
                           const Scenario& s = info.param;
                           return std::string(s.clip_norm > 0 ? "clip" : "noclip") +
                                  (s.has_norm ? "_norm" : "_nonorm") +
                                  (s.weight_decay > 0 ? "_wd" : "");
                         });

// The poly schedule (decay_steps T = 3, power 0.9): step t uses
// lr * (1 - (t-1)/T)^0.9, so step 4 moves no parameter but still updates the
// moments.
TEST(OptimizerSchedule, AdamPolyDecayMatchesReference) {
  CpuKernelContext ctx = testing::make_context();
  std::mt19937 rng = testing::seeded_rng(304, "adam_poly");
  const int64_t n = num_elements(kParam);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, power = 0.9;
  const int64_t decay_steps = 3;
  const Attrs attrs = {{"lr", lr},
                       {"beta1", b1},
                       {"beta2", b2},
                       {"eps", eps},
                       {"weight_decay", 0.0},
                       {"clip_norm", 0.0},
                       {"decay_steps", decay_steps},
                       {"decay_power", power}};
  const KernelSpec spec =
      make_spec(OpKind::kAdamUpdate, {kParam, kParam, kParam, kParam, kScalar}, {}, attrs);
  const std::vector<float> p0 = testing::random_vector(rng, n);
  std::vector<float> p = p0, m(n, 0.f), v(n, 0.f);
  std::vector<double> pr = testing::to_double(p0), mr(n, 0.0), vr(n, 0.0);
  for (int t = 1; t <= decay_steps + 1; ++t) {
    const std::vector<float> g = testing::random_vector(rng, n);
    const std::vector<float> before = p, m_before = m;
    Buffers in = {p, g, m, v, {static_cast<float>(t)}};
    auto out = run_spec(spec, in, ctx);
    ASSERT_TRUE(out.ok()) << out.status();
    p = in[0];
    m = in[2];
    v = in[3];
    const double lr_t = lr * std::pow(std::max(0.0, 1.0 - (t - 1.0) / decay_steps), power);
    for (int64_t i = 0; i < n; ++i) {
      mr[i] = b1 * mr[i] + (1 - b1) * g[i];
      vr[i] = b2 * vr[i] + (1 - b2) * g[i] * g[i];
      const double mhat = mr[i] / (1 - std::pow(b1, t)), vhat = vr[i] / (1 - std::pow(b2, t));
      pr[i] -= lr_t * mhat / (std::sqrt(vhat) + eps);
    }
    if (t > decay_steps) {
      EXPECT_EQ(p, before) << "step " << t << " is past decay_steps: lr is 0";
      EXPECT_NE(m, m_before) << "the moments still update";
    } else {
      EXPECT_NE(p, before) << "step " << t;
    }
  }
  expect_close(p, pr, p0, "param");
  EXPECT_LT(testing::max_rel_error(m, mr), kTol);
  EXPECT_LT(testing::max_rel_error(v, vr), kTol);
}

class OptimizerSpecTest : public ::testing::Test {
 protected:
  CpuKernelContext ctx_ = testing::make_context();
};

TEST_F(OptimizerSpecTest, GlobalNormOverSeveralTensors) {
  std::mt19937 rng = testing::seeded_rng(303, "global_norm");
  const std::vector<Shape> shapes = {{64, 3, 3, 3}, {64}, {1, 64, 3, 3}, {}};
  Buffers in;
  for (const Shape& s : shapes) in.push_back(testing::random_vector(rng, num_elements(s), -2, 2));
  auto norm = run_spec(make_spec(OpKind::kGlobalNorm, shapes, {kScalar}), in, ctx_);
  ASSERT_TRUE(norm.ok()) << norm.status();
  const double want = norm_ref(in);
  EXPECT_LT(std::abs((*norm)[0][0] - want) / want, 1e-6);
}

TEST_F(OptimizerSpecTest, AdamRejectsStepZeroAtRunTime) {
  const int64_t n = num_elements(kParam);
  const Attrs attrs = {{"lr", 0.1},   {"beta1", 0.9},        {"beta2", 0.999},
                       {"eps", 1e-8}, {"weight_decay", 0.0}, {"clip_norm", 0.0}};
  Buffers in = {std::vector<float>(n, 1.f),
                std::vector<float>(n, 1.f),
                std::vector<float>(n),
                std::vector<float>(n),
                {0.f}};
  auto out =
      run_spec(make_spec(OpKind::kAdamUpdate, {kParam, kParam, kParam, kParam, kScalar}, {}, attrs),
               in, ctx_);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition) << out.status();
  EXPECT_EQ(in[0], std::vector<float>(n, 1.f)) << "param must be untouched";
}

TEST_F(OptimizerSpecTest, InvalidSpecsAreRejected) {
  const Shape p = kParam;
  const Attrs sgd = {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.0}, {"clip_norm", 0.0}};
  Attrs bad_mom = sgd;
  bad_mom["momentum"] = 1.0;
  Attrs neg_lr = sgd;
  neg_lr["lr"] = -0.1;
  Attrs no_wd = sgd;
  no_wd.erase("weight_decay");
  const Attrs adam = {{"lr", 0.1},   {"beta1", 1.0},        {"beta2", 0.999},
                      {"eps", 1e-8}, {"weight_decay", 0.0}, {"clip_norm", 0.0}};
  Attrs decay_zero = adam;
  decay_zero["beta1"] = 0.9;
  decay_zero["decay_steps"] = int64_t{0};
  decay_zero["decay_power"] = 0.9;
  Attrs power_zero = decay_zero;
  power_zero["decay_steps"] = int64_t{10};
  power_zero["decay_power"] = 0.0;
  Attrs power_missing = power_zero;
  power_missing.erase("decay_power");
  const std::vector<KernelSpec> bad = {
      make_spec(OpKind::kSgdUpdate, {p, p}, {}, sgd),                         // too few inputs
      make_spec(OpKind::kSgdUpdate, {p, p, {4, 3, 3}}, {}, sgd),              // velocity shape
      make_spec(OpKind::kSgdUpdate, {p, p, p, {2}}, {}, sgd),                 // norm not scalar
      make_spec(OpKind::kSgdUpdate, {p, p, p}, {p}, sgd),                     // has an output
      make_spec(OpKind::kSgdUpdate, {p, p, p}, {}, bad_mom),                  // momentum >= 1
      make_spec(OpKind::kSgdUpdate, {p, p, p}, {}, neg_lr),                   // lr < 0
      make_spec(OpKind::kSgdUpdate, {p, p, p}, {}, no_wd),                    // missing attr
      make_spec(OpKind::kAdamUpdate, {p, p, p, p, kScalar}, {}, adam),        // beta1 >= 1
      make_spec(OpKind::kAdamUpdate, {p, p, p, p, p}, {}, adam),              // step not scalar
      make_spec(OpKind::kAdamUpdate, {p, p, p, p, kScalar}, {}, decay_zero),  // decay_steps < 1
      make_spec(OpKind::kAdamUpdate, {p, p, p, p, kScalar}, {}, power_zero),  // decay_power <= 0
      make_spec(OpKind::kAdamUpdate, {p, p, p, p, kScalar}, {},
                power_missing),                  // decay_steps alone
      make_spec(OpKind::kIncrement, {{2}}, {}),  // step not scalar
      make_spec(OpKind::kGlobalNorm, {p}, {p}),  // norm not scalar
  };
  for (const KernelSpec& spec : bad) {
    auto k = create_cpu_kernel(spec, ctx_);
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << op_name(spec.op);
    EXPECT_NE(k.status().message().find(spec.name), std::string::npos) << k.status();
  }
}

}  // namespace
}  // namespace lms::cpu
