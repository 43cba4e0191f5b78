// attention and attention_bwd of docs/ops.md on the CPU device: plain loops
// over the N*H independent (n, h) problems, sums in double in index order
// (deterministic for any thread count). The [T,S] probabilities of one
// (n, h) live in the kernel's workspace (Note [Pointwise workspace]) and
// never in a graph tensor: the backward recomputes them from q, k and the
// saved row log-sum-exp (FlashAttention's recomputation, Dao et al. 2022,
// untiled). The keys (and, backward, the values) of one (n, h) are first
// transposed into the workspace, so that the scores of a query are D passes
// over contiguous rows, which the compiler vectorises; each score is still
// summed over the head dim in index order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "backend/cpu/kernels/pointwise_common.h"
#include "lms/status.h"

namespace lms::cpu::pointwise {
namespace {

using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

// One (n, h) problem: q[T,D], k and v [S,D], rows contiguous.
struct Head {
  const float* q;
  const float* k;
  const float* v;
};

Head head_at(const KernelArgs& a, const AttentionDims& d, int64_t i) {
  return {a.inputs[0] + i * d.t * d.d, a.inputs[1] + i * d.s * d.d, a.inputs[2] + i * d.s * d.d};
}

// Keys query t attends to: [0, s_end).
int64_t keys_of(const AttentionDims& d, int64_t t) { return d.causal ? t + 1 : d.s; }

double dot(const float* a, const float* b, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(a[i]) * b[i];
  return acc;
}

// xt[j*rows + r] = x[r*cols + j].
void transpose_rows(const float* x, int64_t rows, int64_t cols, float* xt) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) xt[j * rows + r] = x[r * cols + j];
  }
}

// row[s] = factor * Σ_j x[j] yt[j*S + s] for s < n (yt the [D,S] transpose
// of a head's keys or values), summed over j in index order.
void row_products(const AttentionDims& d, const float* x, const float* yt, int64_t n, double factor,
                  double* row) {
  std::fill(row, row + n, 0.0);
  for (int64_t j = 0; j < d.d; ++j) {
    const double xj = x[j];
    const float* yj = yt + j * d.s;
    for (int64_t s = 0; s < n; ++s) row[s] += xj * yj[s];
  }
  for (int64_t s = 0; s < n; ++s) row[s] *= factor;
}

// The scaled scores of query t into `row` (keys_of(t) entries), kt the
// head's keys transposed; returns the row's log-sum-exp.
double score_row(const AttentionDims& d, const float* qt, const float* kt, int64_t t, double* row) {
  const int64_t n = keys_of(d, t);
  row_products(d, qt, kt, n, d.scale, row);
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t s = 0; s < n; ++s) m = std::max(m, row[s]);
  double sum = 0.0;
  for (int64_t s = 0; s < n; ++s) sum += std::exp(row[s] - m);
  return m + std::log(sum);
}

// Workspace of the forward: the head's keys transposed [D,S] (floats), a
// score row [S] and an output row [D] (doubles).
struct FwdScratch {
  float* kt;
  double* row;
  double* acc;
};

// out[t,:] = Σ_s P[t,s] v[s,:], P = exp(row - lse); lse[t].
void attention_head_fwd(const AttentionDims& d, const Head& h, const FwdScratch& w, float* out,
                        float* lse) {
  transpose_rows(h.k, d.s, d.d, w.kt);
  for (int64_t t = 0; t < d.t; ++t) {
    const double l = score_row(d, h.q + t * d.d, w.kt, t, w.row);
    std::fill(w.acc, w.acc + d.d, 0.0);
    for (int64_t s = 0; s < keys_of(d, t); ++s) {
      const double p = std::exp(w.row[s] - l);
      for (int64_t j = 0; j < d.d; ++j) w.acc[j] += p * h.v[s * d.d + j];
    }
    for (int64_t j = 0; j < d.d; ++j) out[t * d.d + j] = static_cast<float>(w.acc[j]);
    lse[t] = static_cast<float>(l);
  }
}

KernelOr make_attention_fwd(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(AttentionDims d, attention_dims(spec));
  auto k = std::make_unique<StepKernel>(spec, ctx);
  const uint64_t kt = k->layout().add_floats(d.d * d.s);
  const uint64_t row = k->layout().add_floats(2 * d.s);  // doubles
  const uint64_t acc = k->layout().add_floats(2 * d.d);
  k->add_loop([=](const KernelArgs& a) {
    const FwdScratch w = {ws_floats(a, kt), reinterpret_cast<double*>(ws_floats(a, row)),
                          reinterpret_cast<double*>(ws_floats(a, acc))};
    for (int64_t i = 0; i < d.heads; ++i) {
      attention_head_fwd(d, head_at(a, d, i), w, a.outputs[0] + i * d.t * d.d,
                         a.outputs[1] + i * d.t);
    }
    return absl::OkStatus();
  });
  return k;
}

// The backward's per-(n, h) tensors besides q, k, v.
struct HeadGrad {
  const float* out;
  const float* lse;
  const float* dout;
  float* dq;
  float* dk;
  float* dv;
};

// Workspace of the backward: P, then dS, of the head [T,S]; its keys and
// values transposed [D,S] (floats); a row [S] and an output row [D]
// (doubles).
struct BwdScratch {
  float* p;
  float* kt;
  float* vt;
  double* row;
  double* acc;
};

// P[t,s] = exp(scale q_t·k_s - lse_t), 0 where masked.
void recompute_probs(const AttentionDims& d, const Head& h, const float* lse, const BwdScratch& w) {
  for (int64_t t = 0; t < d.t; ++t) {
    const int64_t n = keys_of(d, t);
    row_products(d, h.q + t * d.d, w.kt, n, d.scale, w.row);
    float* pt = w.p + t * d.s;
    for (int64_t s = 0; s < n; ++s) {
      pt[s] = static_cast<float>(std::exp(w.row[s] - static_cast<double>(lse[t])));
    }
    std::fill(pt + n, pt + d.s, 0.0f);
  }
}

// dst[r,:] = factor * Σ_i w(r, i) src[i,:] over i < n, in index order.
template <typename W>
void weighted_rows(int64_t rows, int64_t n, int64_t dim, double factor, W w, const float* src,
                   double* acc, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(acc, acc + dim, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const double wi = w(r, i);
      if (wi == 0.0) continue;
      for (int64_t j = 0; j < dim; ++j) acc[j] += wi * src[i * dim + j];
    }
    for (int64_t j = 0; j < dim; ++j) dst[r * dim + j] = static_cast<float>(factor * acc[j]);
  }
}

// dV = Pᵀ·dO; dS = P∘(dO·Vᵀ - rowsum(dO∘O)) in place of P; dQ = scale dS·K;
// dK = scale dSᵀ·Q.
void attention_head_bwd(const AttentionDims& d, const Head& h, const HeadGrad& g,
                        const BwdScratch& w) {
  transpose_rows(h.k, d.s, d.d, w.kt);
  transpose_rows(h.v, d.s, d.d, w.vt);
  recompute_probs(d, h, g.lse, w);
  float* p = w.p;
  const int64_t ts = d.s;
  weighted_rows(
      d.s, d.t, d.d, 1.0, [&](int64_t s, int64_t t) { return p[t * ts + s]; }, g.dout, w.acc, g.dv);
  for (int64_t t = 0; t < d.t; ++t) {
    const int64_t n = keys_of(d, t);
    const double di = dot(g.dout + t * d.d, g.out + t * d.d, d.d);
    row_products(d, g.dout + t * d.d, w.vt, n, 1.0, w.row);  // dP[t,:]
    for (int64_t s = 0; s < n; ++s) {
      p[t * d.s + s] = static_cast<float>(p[t * d.s + s] * (w.row[s] - di));
    }
  }
  weighted_rows(
      d.t, d.s, d.d, d.scale, [&](int64_t t, int64_t s) { return p[t * ts + s]; }, h.k, w.acc,
      g.dq);
  weighted_rows(
      d.s, d.t, d.d, d.scale, [&](int64_t s, int64_t t) { return p[t * ts + s]; }, h.q, w.acc,
      g.dk);
}

KernelOr make_attention_bwd(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(AttentionDims d, attention_dims(spec));
  auto k = std::make_unique<StepKernel>(spec, ctx);
  const uint64_t probs = k->layout().add_floats(d.t * d.s);  // one (n, h) at a time
  const uint64_t kt = k->layout().add_floats(d.d * d.s);
  const uint64_t vt = k->layout().add_floats(d.d * d.s);
  const uint64_t row = k->layout().add_floats(2 * d.s);  // doubles
  const uint64_t acc = k->layout().add_floats(2 * d.d);
  k->add_loop([=](const KernelArgs& a) {
    const BwdScratch w = {ws_floats(a, probs), ws_floats(a, kt), ws_floats(a, vt),
                          reinterpret_cast<double*>(ws_floats(a, row)),
                          reinterpret_cast<double*>(ws_floats(a, acc))};
    const int64_t qn = d.t * d.d;
    const int64_t kn = d.s * d.d;
    for (int64_t i = 0; i < d.heads; ++i) {
      const HeadGrad g = {a.inputs[3] + i * qn,  a.inputs[4] + i * d.t, a.inputs[5] + i * qn,
                          a.outputs[0] + i * qn, a.outputs[1] + i * kn, a.outputs[2] + i * kn};
      attention_head_bwd(d, head_at(a, d, i), g, w);
    }
    return absl::OkStatus();
  });
  return k;
}

}  // namespace

KernelOr create_attention_kernel(const KernelSpec& spec, const CpuKernelContext& ctx) {
  if (spec.op == OpKind::kAttention) return make_attention_fwd(spec, ctx);
  if (spec.op == OpKind::kAttentionBwd) return make_attention_bwd(spec, ctx);
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cpu::pointwise
