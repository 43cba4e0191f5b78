// attention / attention_bwd kernels against a naive double-precision
// reference (masked scores, softmax, weighted sum); the backward (dq, dk,
// dv from the saved out and lse) against central finite differences of
// L = sum(out * r), r random; the workspace holds one (n, h) slice, not the
// [N,H,T,S] probabilities; bad specs rejected naming the node.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "pointwise_test_util.h"

namespace lms::cpu {
namespace {

using testing::Buffers;
using testing::make_spec;
using testing::run_spec;

constexpr double kFwdTol = 1e-6;  // sums in double, outputs rounded to float
constexpr double kBwdTol = 1e-4;  // vs finite differences (h = 1e-4) of the reference

struct Dims {
  int64_t n, h, t, s, d;
  bool causal;
};

Attrs attrs_of(const Dims& a, double scale) {
  return {{"softmax_scale", scale}, {"causal", int64_t{a.causal ? 1 : 0}}};
}

// out[N,H,T,D] = softmax(scale q kᵀ + mask) v; lse (optional) per row.
std::vector<double> attention_ref(const Dims& a, double scale, const std::vector<double>& q,
                                  const std::vector<double>& k, const std::vector<double>& v,
                                  std::vector<double>* lse = nullptr) {
  std::vector<double> out(a.n * a.h * a.t * a.d, 0.0), row(a.s);
  for (int64_t i = 0; i < a.n * a.h; ++i) {
    for (int64_t t = 0; t < a.t; ++t) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t s = 0; s < a.s; ++s) {
        double dot = 0;
        for (int64_t j = 0; j < a.d; ++j) {
          dot += q[(i * a.t + t) * a.d + j] * k[(i * a.s + s) * a.d + j];
        }
        row[s] = a.causal && s > t ? -std::numeric_limits<double>::infinity() : scale * dot;
        m = std::max(m, row[s]);
      }
      double sum = 0;
      for (int64_t s = 0; s < a.s; ++s) sum += std::exp(row[s] - m);
      if (lse != nullptr) lse->push_back(m + std::log(sum));
      for (int64_t s = 0; s < a.s; ++s) {
        const double p = std::exp(row[s] - m) / sum;
        for (int64_t j = 0; j < a.d; ++j) {
          out[(i * a.t + t) * a.d + j] += p * v[(i * a.s + s) * a.d + j];
        }
      }
    }
  }
  return out;
}

class AttentionKernelTest : public ::testing::TestWithParam<Dims> {
 protected:
  CpuKernelContext ctx_ = testing::make_context();
};

TEST_P(AttentionKernelTest, ForwardMatchesReference) {
  const Dims a = GetParam();
  const Shape qs = {a.n, a.h, a.t, a.d}, ks = {a.n, a.h, a.s, a.d}, ls = {a.n, a.h, a.t};
  std::mt19937 rng = testing::seeded_rng(2027, "attention");
  Buffers in = {testing::random_vector(rng, num_elements(qs), -2.f, 2.f),
                testing::random_vector(rng, num_elements(ks), -2.f, 2.f),
                testing::random_vector(rng, num_elements(ks))};
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.d));
  auto y =
      run_spec(make_spec(OpKind::kAttention, {qs, ks, ks}, {qs, ls}, attrs_of(a, scale)), in, ctx_);
  ASSERT_TRUE(y.ok()) << y.status();
  std::vector<double> lse;
  const auto want = attention_ref(a, scale, testing::to_double(in[0]), testing::to_double(in[1]),
                                  testing::to_double(in[2]), &lse);
  EXPECT_LT(testing::max_rel_error((*y)[0], want), kFwdTol);
  EXPECT_LT(testing::max_rel_error((*y)[1], lse), kFwdTol);
}

TEST_P(AttentionKernelTest, BackwardMatchesFiniteDifferences) {
  const Dims a = GetParam();
  const Shape qs = {a.n, a.h, a.t, a.d}, ks = {a.n, a.h, a.s, a.d}, ls = {a.n, a.h, a.t};
  std::mt19937 rng = testing::seeded_rng(2028, "attention_bwd");
  Buffers in = {testing::random_vector(rng, num_elements(qs), -2.f, 2.f),
                testing::random_vector(rng, num_elements(ks), -2.f, 2.f),
                testing::random_vector(rng, num_elements(ks))};
  const std::vector<float> r = testing::random_vector(rng, num_elements(qs));
  const double scale = 0.7;
  auto fwd =
      run_spec(make_spec(OpKind::kAttention, {qs, ks, ks}, {qs, ls}, attrs_of(a, scale)), in, ctx_);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  Buffers bwd_in = {in[0], in[1], in[2], (*fwd)[0], (*fwd)[1], r};
  auto grads = run_spec(
      make_spec(OpKind::kAttentionBwd, {qs, ks, ks, qs, ls, qs}, {qs, ks, ks}, attrs_of(a, scale)),
      bwd_in, ctx_);
  ASSERT_TRUE(grads.ok()) << grads.status();
  std::vector<std::vector<double>> x = {testing::to_double(in[0]), testing::to_double(in[1]),
                                        testing::to_double(in[2])};
  for (int which = 0; which < 3; ++which) {
    auto loss = [&](const std::vector<double>& xi) {
      std::vector<std::vector<double>> args = x;
      args[which] = xi;
      return testing::dot(attention_ref(a, scale, args[0], args[1], args[2]), r);
    };
    EXPECT_LT(testing::max_rel_error((*grads)[which], testing::finite_diff(loss, x[which])),
              kBwdTol)
        << "input " << which;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernelTest,
                         ::testing::Values(Dims{2, 3, 7, 7, 4, true}, Dims{2, 3, 7, 7, 4, false},
                                           Dims{1, 2, 7, 5, 8, false}, Dims{1, 1, 33, 33, 3, true},
                                           Dims{2, 1, 1, 9, 2, false}));

// The workspace holds what one (n, h) problem needs ([T,S] floats and a few
// rows), never the [N,H,T,S] probabilities; two runs give the same bits.
TEST(AttentionKernel, WorkspaceIsOneHeadAndRunsAreDeterministic) {
  const CpuKernelContext ctx = testing::make_context();
  const Dims a = {2, 8, 64, 64, 16, true};
  const Shape qs = {a.n, a.h, a.t, a.d}, ls = {a.n, a.h, a.t};
  const KernelSpec bwd =
      make_spec(OpKind::kAttentionBwd, {qs, qs, qs, qs, ls, qs}, {qs, qs, qs}, attrs_of(a, 0.25));
  auto k = testing::compile(bwd, ctx);
  ASSERT_TRUE(k.ok()) << k.status();
  const uint64_t all_probs_bytes = 4 * a.n * a.h * a.t * a.s;
  EXPECT_GE((*k)->workspace_bytes(), 4u * a.t * a.s);
  EXPECT_LT((*k)->workspace_bytes(), all_probs_bytes / 8);
  std::mt19937 rng = testing::seeded_rng(2029, "attention determinism");
  Buffers in;
  for (const Shape& s : bwd.input_shapes)
    in.push_back(testing::random_vector(rng, num_elements(s)));
  const auto start = std::chrono::steady_clock::now();
  auto first = run_spec(bwd, in, ctx);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("attention_bwd N %ld H %ld T %ld D %ld: %.3f s\n", static_cast<long>(a.n),
              static_cast<long>(a.h), static_cast<long>(a.t), static_cast<long>(a.d), seconds);
  auto second = run_spec(bwd, in, ctx);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(testing::bit_identical(*first, *second));
}

TEST(AttentionKernel, InvalidSpecsAreRejected) {
  const CpuKernelContext ctx = testing::make_context();
  const Shape q = {2, 3, 7, 4}, k = {2, 3, 5, 4}, l = {2, 3, 7};
  const Attrs plain = {{"softmax_scale", 0.5}, {"causal", int64_t{0}}};
  const Attrs causal = {{"softmax_scale", 0.5}, {"causal", int64_t{1}}};
  const std::vector<std::pair<KernelSpec, std::string>> bad = {
      {make_spec(OpKind::kAttention, {q, k, k}, {q, l}, causal),
       "needs as many queries as keys (T == S)"},
      {make_spec(OpKind::kAttention, {q, {2, 3, 5, 8}, k}, {q, l}, plain),
       "k must have shape [2,3,S,4]"},
      {make_spec(OpKind::kAttention, {q, k, {2, 3, 6, 4}}, {q, l}, plain),
       "v must have the shape of k"},
      {make_spec(OpKind::kAttention, {{3, 7, 4}, k, k}, {q, l}, plain), "q must have 4 dims"},
      {make_spec(OpKind::kAttention, {q, k, k}, {q}, plain), "output"},
      {make_spec(OpKind::kAttention, {q, k, k}, {q, l},
                 {{"softmax_scale", 0.0}, {"causal", int64_t{0}}}),
       "softmax_scale"},
      {make_spec(OpKind::kAttentionBwd, {q, k, k, q, q, q}, {q, k, k}, plain),
       "lse must have shape [2,3,7]"},
  };
  for (const auto& [spec, what] : bad) {
    auto kernel = create_cpu_kernel(spec, ctx);
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(kernel.status().message().find(spec.name), std::string::npos) << kernel.status();
    EXPECT_NE(kernel.status().message().find(what), std::string::npos) << kernel.status();
  }
}

}  // namespace
}  // namespace lms::cpu
