// attention / attention_bwd kernels (tiled, Note [CPU tiled attention])
// against a naive double-precision reference (masked scores, softmax,
// weighted sum) and its analytic backward, over shapes of one tile and of
// many, T and S not multiples of a tile, head dims 3 to 128; the backward
// (dq, dk, dv from the saved out and lse) of small shapes also against
// central finite differences of L = sum(out * r), r random; the workspace
// does not grow with T (checked at T = 256, 1024 and 4096); the same bits
// for 1, 2 and 4 threads; bad specs rejected naming the node.
#include <omp.h>

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

constexpr double kFwdTol = 2e-5;  // float32 tiles against the double reference
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

// The gradients {dq, dk, dv} of L = Σ out∘dout, in double: P from the
// reference scores, dV = Pᵀ dO, dS = P∘(dO vᵀ - rowsum(dO∘O)), dQ = scale
// dS k, dK = scale dSᵀ q.
std::vector<std::vector<double>> attention_grad_ref(const Dims& a, double scale,
                                                    const std::vector<double>& q,
                                                    const std::vector<double>& k,
                                                    const std::vector<double>& v,
                                                    const std::vector<double>& dout) {
  std::vector<double> lse;
  const std::vector<double> out = attention_ref(a, scale, q, k, v, &lse);
  std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
  for (int64_t i = 0; i < a.n * a.h; ++i) {
    for (int64_t t = 0; t < a.t; ++t) {
      const double* qt = &q[(i * a.t + t) * a.d];
      const double* gt = &dout[(i * a.t + t) * a.d];
      double di = 0;
      for (int64_t j = 0; j < a.d; ++j) di += gt[j] * out[(i * a.t + t) * a.d + j];
      for (int64_t s = 0; s < a.s; ++s) {
        if (a.causal && s > t) continue;
        const double* ks = &k[(i * a.s + s) * a.d];
        const double* vs = &v[(i * a.s + s) * a.d];
        double qk = 0, dp = 0;
        for (int64_t j = 0; j < a.d; ++j) {
          qk += qt[j] * ks[j];
          dp += gt[j] * vs[j];
        }
        const double p = std::exp(scale * qk - lse[i * a.t + t]);
        const double ds = p * (dp - di);
        for (int64_t j = 0; j < a.d; ++j) {
          dv[(i * a.s + s) * a.d + j] += p * gt[j];
          dq[(i * a.t + t) * a.d + j] += scale * ds * ks[j];
          dk[(i * a.s + s) * a.d + j] += scale * ds * qt[j];
        }
      }
    }
  }
  return {dq, dk, dv};
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

// Shapes of many tiles (kTileQ = kTileK = 128), T and S
// not multiples of a tile, T != S, and the head dims of real models.
class AttentionTiledTest : public ::testing::TestWithParam<Dims> {
 protected:
  CpuKernelContext ctx_ = testing::make_context();
};

TEST_P(AttentionTiledTest, ForwardAndBackwardMatchReference) {
  const Dims a = GetParam();
  const Shape qs = {a.n, a.h, a.t, a.d}, ks = {a.n, a.h, a.s, a.d}, ls = {a.n, a.h, a.t};
  std::mt19937 rng = testing::seeded_rng(2030, "attention tiled");
  Buffers in = {testing::random_vector(rng, num_elements(qs), -1.f, 1.f),
                testing::random_vector(rng, num_elements(ks), -1.f, 1.f),
                testing::random_vector(rng, num_elements(ks))};
  const std::vector<float> dout = testing::random_vector(rng, num_elements(qs));
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.d));
  auto fwd =
      run_spec(make_spec(OpKind::kAttention, {qs, ks, ks}, {qs, ls}, attrs_of(a, scale)), in, ctx_);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  const std::vector<double> q = testing::to_double(in[0]), k = testing::to_double(in[1]),
                            v = testing::to_double(in[2]);
  std::vector<double> lse;
  EXPECT_LT(testing::max_rel_error((*fwd)[0], attention_ref(a, scale, q, k, v, &lse)), kFwdTol);
  EXPECT_LT(testing::max_rel_error((*fwd)[1], lse), kFwdTol);
  Buffers bwd_in = {in[0], in[1], in[2], (*fwd)[0], (*fwd)[1], dout};
  auto grads = run_spec(
      make_spec(OpKind::kAttentionBwd, {qs, ks, ks, qs, ls, qs}, {qs, ks, ks}, attrs_of(a, scale)),
      bwd_in, ctx_);
  ASSERT_TRUE(grads.ok()) << grads.status();
  const auto want = attention_grad_ref(a, scale, q, k, v, testing::to_double(dout));
  for (int which = 0; which < 3; ++which) {
    EXPECT_LT(testing::max_rel_error((*grads)[which], want[which]), kFwdTol) << "input " << which;
  }
}

INSTANTIATE_TEST_SUITE_P(Tiles, AttentionTiledTest,
                         ::testing::Values(Dims{1, 2, 200, 200, 32, true},
                                           Dims{1, 1, 257, 257, 64, true},
                                           Dims{2, 1, 130, 300, 80, false},
                                           Dims{1, 1, 65, 129, 128, false},
                                           Dims{1, 2, 300, 70, 64, false}));

// The forward and backward of one spec run on a team of `threads`.
Buffers run_with_threads(int threads, const Dims& a, Buffers in, const CpuKernelContext& ctx) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  const Shape qs = {a.n, a.h, a.t, a.d}, ks = {a.n, a.h, a.s, a.d}, ls = {a.n, a.h, a.t};
  auto fwd =
      run_spec(make_spec(OpKind::kAttention, {qs, ks, ks}, {qs, ls}, attrs_of(a, 0.3)), in, ctx);
  EXPECT_TRUE(fwd.ok()) << fwd.status();
  Buffers bwd_in = {in[0], in[1], in[2], (*fwd)[0], (*fwd)[1], in[3]};
  auto bwd = run_spec(
      make_spec(OpKind::kAttentionBwd, {qs, ks, ks, qs, ls, qs}, {qs, ks, ks}, attrs_of(a, 0.3)),
      bwd_in, ctx);
  EXPECT_TRUE(bwd.ok()) << bwd.status();
  omp_set_num_threads(saved);
  Buffers all = *fwd;
  all.insert(all.end(), bwd->begin(), bwd->end());
  return all;
}

// Each task of the kernel sums in a fixed tile order on one thread, so the
// team size changes no bit (two passes, no atomics).
TEST(AttentionKernel, SameBitsForOneTwoAndFourThreads) {
  const CpuKernelContext ctx = testing::make_context();
  for (const Dims& a : {Dims{2, 3, 333, 333, 32, true}, Dims{1, 4, 150, 400, 64, false}}) {
    std::mt19937 rng = testing::seeded_rng(2031, "attention threads");
    const int64_t qn = a.n * a.h * a.t * a.d, kn = a.n * a.h * a.s * a.d;
    const Buffers in = {testing::random_vector(rng, qn, -2.f, 2.f),
                        testing::random_vector(rng, kn, -2.f, 2.f), testing::random_vector(rng, kn),
                        testing::random_vector(rng, qn)};
    const Buffers one = run_with_threads(1, a, in, ctx);
    for (int threads : {2, 4}) {
      EXPECT_TRUE(testing::bit_identical(one, run_with_threads(threads, a, in, ctx)))
          << threads << " threads, T " << a.t << " S " << a.s;
    }
  }
}

// The declared workspace is one set of tiles per thread: the same at
// T = 256, 1024 and 4096, far below one head's [T,T] scores.
TEST(AttentionKernel, WorkspaceDoesNotGrowWithTheSequence) {
  const CpuKernelContext ctx = testing::make_context();
  for (bool causal : {false, true}) {
    std::vector<uint64_t> bytes;
    for (int64_t t : {256, 1024, 4096}) {
      const Dims a = {1, 8, t, t, 64, causal};
      const Shape qs = {a.n, a.h, a.t, a.d}, ls = {a.n, a.h, a.t};
      for (const KernelSpec& spec :
           {make_spec(OpKind::kAttention, {qs, qs, qs}, {qs, ls}, attrs_of(a, 0.125)),
            make_spec(OpKind::kAttentionBwd, {qs, qs, qs, qs, ls, qs}, {qs, qs, qs},
                      attrs_of(a, 0.125))}) {
        auto k = testing::compile(spec, ctx);
        ASSERT_TRUE(k.ok()) << k.status();
        std::printf("attention%s T %ld causal %d: workspace %lu bytes\n",
                    spec.op == OpKind::kAttentionBwd ? "_bwd" : "", static_cast<long>(t),
                    static_cast<int>(causal), static_cast<unsigned long>((*k)->workspace_bytes()));
        bytes.push_back((*k)->workspace_bytes());
      }
    }
    // bytes: forward, backward at T = 256, then at 1024, then at 4096.
    EXPECT_EQ(bytes[0], bytes[2]) << "forward, causal " << causal;
    EXPECT_EQ(bytes[0], bytes[4]) << "forward, causal " << causal;
    EXPECT_EQ(bytes[1], bytes[3]) << "backward, causal " << causal;
    EXPECT_EQ(bytes[1], bytes[5]) << "backward, causal " << causal;
    EXPECT_LT(bytes[5], 4u * 256 * 256 * static_cast<uint64_t>(std::max(omp_get_max_threads(), 1)));
  }
}

// Two runs of a kernel give the same bits.
TEST(AttentionKernel, RunsAreDeterministic) {
  const CpuKernelContext ctx = testing::make_context();
  const Dims a = {2, 8, 64, 64, 16, true};
  const Shape qs = {a.n, a.h, a.t, a.d}, ls = {a.n, a.h, a.t};
  const KernelSpec bwd =
      make_spec(OpKind::kAttentionBwd, {qs, qs, qs, qs, ls, qs}, {qs, qs, qs}, attrs_of(a, 0.25));
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
      {make_spec(OpKind::kAttention, {{2, 3, 7, 300}, {2, 3, 5, 300}, {2, 3, 5, 300}},
                 {{2, 3, 7, 300}, l}, plain),
       "head dim D = 300 is not supported: attention takes 1 to 256"},
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
