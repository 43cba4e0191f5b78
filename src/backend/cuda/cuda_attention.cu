// attention and attention_bwd of docs/ops.md for the CUDA device
// (cuda_launch.h). Forward: one block per (head, query) row; the row's
// scores go to the block's slice of the workspace, the max and the sum of
// exponentials are detail::block_* trees, and each output element is a sum
// over the keys in index order by one thread. Backward: the heads run one
// after another; for each, one block per query row recomputes
// P = exp(scale q·kᵀ - lse) and dS = P∘(dO·Vᵀ - rowsum(dO∘O)) into the
// workspace, then one thread per output element sums dV = Pᵀ·dO,
// dK = scale dSᵀ·Q and dQ = scale dS·K in index order. No atomics, so every
// result is the same on every run (Note [CUDA kernel determinism]).
#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"

namespace lms::cuda::launch {
namespace {

using detail::block_sum;
using detail::grid_for;
using detail::kThreads;

// Blocks of the forward (each owns one score row of the workspace).
constexpr int64_t kMaxRowBlocks = 1024;

int64_t row_blocks(int64_t rows) { return rows < kMaxRowBlocks ? rows : kMaxRowBlocks; }

__device__ int64_t keys_of(const AttentionShape& a, int64_t t) { return a.causal ? t + 1 : a.s; }

__device__ double dot(const float* x, const float* y, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * y[i];
  return acc;
}

// Max of `v` over the block, in every thread (a fixed tree, like block_sum).
__device__ double block_max(double v) {
  __shared__ double buf[kThreads];
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) buf[threadIdx.x] = fmax(buf[threadIdx.x], buf[threadIdx.x + stride]);
    __syncthreads();
  }
  double r = buf[0];
  __syncthreads();
  return r;
}

__global__ void attention_fwd_kernel(AttentionShape a, const float* q, const float* k,
                                     const float* v, double* workspace, float* out, float* lse) {
  double* row = workspace + blockIdx.x * a.s;
  for (int64_t r = blockIdx.x; r < a.heads * a.t; r += gridDim.x) {
    const int64_t h = r / a.t, t = r % a.t, n = keys_of(a, t);
    const float* qt = q + r * a.d;
    const float* kh = k + h * a.s * a.d;
    const float* vh = v + h * a.s * a.d;
    double m = -INFINITY;
    for (int64_t s = threadIdx.x; s < n; s += kThreads) {
      row[s] = a.scale * dot(qt, kh + s * a.d, a.d);
      m = fmax(m, row[s]);
    }
    m = block_max(m);
    double sum = 0.0;
    for (int64_t s = threadIdx.x; s < n; s += kThreads) sum += exp(row[s] - m);
    const double l = m + log(block_sum(sum));
    for (int64_t s = threadIdx.x; s < n; s += kThreads) row[s] = exp(row[s] - l);
    __syncthreads();
    for (int64_t j = threadIdx.x; j < a.d; j += kThreads) {
      double acc = 0.0;
      for (int64_t s = 0; s < n; ++s) acc += row[s] * vh[s * a.d + j];
      out[r * a.d + j] = static_cast<float>(acc);
    }
    if (threadIdx.x == 0) lse[r] = static_cast<float>(l);
    __syncthreads();  // the row is rewritten by the next r
  }
}

// One head: p[t,s] = P, ds[t,s] = dS (0 where masked).
__global__ void attention_probs_kernel(AttentionShape a, const float* q, const float* k,
                                       const float* v, const float* out, const float* lse,
                                       const float* dout, float* p, float* ds) {
  for (int64_t t = blockIdx.x; t < a.t; t += gridDim.x) {
    const float* dout_t = dout + t * a.d;
    double part = 0.0;
    for (int64_t j = threadIdx.x; j < a.d; j += kThreads) {
      part += static_cast<double>(dout_t[j]) * out[t * a.d + j];
    }
    const double di = block_sum(part);
    for (int64_t s = threadIdx.x; s < a.s; s += kThreads) {
      float pv = 0.0f, dsv = 0.0f;
      if (s < keys_of(a, t)) {
        pv = static_cast<float>(
            exp(a.scale * dot(q + t * a.d, k + s * a.d, a.d) - static_cast<double>(lse[t])));
        dsv = static_cast<float>(pv * (dot(dout_t, v + s * a.d, a.d) - di));
      }
      p[t * a.s + s] = pv;
      ds[t * a.s + s] = dsv;
    }
  }
}

// One head: dv[s,j] = Σ_t p[t,s] dout[t,j]; dk[s,j] = scale Σ_t ds[t,s] q[t,j].
__global__ void attention_dkv_kernel(AttentionShape a, const float* q, const float* dout,
                                     const float* p, const float* ds, float* dk, float* dv) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < a.s * a.d;
       e += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t s = e / a.d, j = e % a.d;
    double acc_v = 0.0, acc_k = 0.0;
    for (int64_t t = 0; t < a.t; ++t) {
      acc_v += static_cast<double>(p[t * a.s + s]) * dout[t * a.d + j];
      acc_k += static_cast<double>(ds[t * a.s + s]) * q[t * a.d + j];
    }
    dv[e] = static_cast<float>(acc_v);
    dk[e] = static_cast<float>(a.scale * acc_k);
  }
}

// One head: dq[t,j] = scale Σ_s ds[t,s] k[s,j].
__global__ void attention_dq_kernel(AttentionShape a, const float* k, const float* ds, float* dq) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < a.t * a.d;
       e += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t t = e / a.d, j = e % a.d;
    double acc = 0.0;
    for (int64_t s = 0; s < a.s; ++s) acc += static_cast<double>(ds[t * a.s + s]) * k[s * a.d + j];
    dq[e] = static_cast<float>(a.scale * acc);
  }
}

}  // namespace

int64_t attention_fwd_workspace_doubles(const AttentionShape& a) {
  return row_blocks(a.heads * a.t) * a.s;
}

cudaError_t attention_fwd(cudaStream_t stream, const AttentionShape& a, const float* q,
                          const float* k, const float* v, double* workspace, float* out,
                          float* lse) {
  const int blocks = static_cast<int>(row_blocks(a.heads * a.t));
  attention_fwd_kernel<<<blocks, kThreads, 0, stream>>>(a, q, k, v, workspace, out, lse);
  return cudaGetLastError();
}

int64_t attention_bwd_workspace_floats(const AttentionShape& a) { return 2 * a.t * a.s; }

cudaError_t attention_bwd(cudaStream_t stream, const AttentionShape& a, const float* q,
                          const float* k, const float* v, const float* out, const float* lse,
                          const float* dout, float* workspace, float* dq, float* dk, float* dv) {
  float* p = workspace;
  float* ds = workspace + a.t * a.s;
  const int probs_blocks = static_cast<int>(a.t < 65535 ? a.t : 65535);
  for (int64_t h = 0; h < a.heads; ++h) {
    const int64_t qo = h * a.t * a.d, ko = h * a.s * a.d;
    attention_probs_kernel<<<probs_blocks, kThreads, 0, stream>>>(
        a, q + qo, k + ko, v + ko, out + qo, lse + h * a.t, dout + qo, p, ds);
    attention_dkv_kernel<<<grid_for(a.s * a.d), kThreads, 0, stream>>>(a, q + qo, dout + qo, p, ds,
                                                                       dk + ko, dv + ko);
    attention_dq_kernel<<<grid_for(a.t * a.d), kThreads, 0, stream>>>(a, k + ko, ds, dq + qo);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaGetLastError();
}

}  // namespace lms::cuda::launch
