// Reductions of the CUDA backend (cuda_launch.h): whole-tensor sums, per-
// channel sums, soft Dice sums and normalisation statistics. Each block sums
// a fixed set of elements with a fixed per-thread stride and a fixed tree
// (detail::block_sum), in double; partials are combined in index order. No
// atomics, so every result is bit-identical run to run.
#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"

namespace lms::cuda::launch {
namespace {

using detail::block_sum;
using detail::grid_for;
using detail::kThreads;

constexpr int64_t kElementsPerBlock = int64_t{kThreads} * 16;
constexpr int kMaxReduceBlocks = 1024;

__device__ double reduce_term(Reduce op, const float* a, const float* b, int64_t i) {
  switch (op) {
    case Reduce::kSum:
      return a[i];
    case Reduce::kSumSquares:
      return static_cast<double>(a[i]) * a[i];
    case Reduce::kSumSquaredDiff: {
      const double d = static_cast<double>(a[i]) - b[i];
      return d * d;
    }
  }
  return 0.0;
}

// Block j sums elements j*chunk .. (j+1)*chunk - 1.
__global__ void partials_kernel(Reduce op, const float* a, const float* b, int64_t n, int64_t chunk,
                                double* partials) {
  const int64_t begin = blockIdx.x * chunk;
  const int64_t end = begin + chunk < n ? begin + chunk : n;
  double acc = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) acc += reduce_term(op, a, b, i);
  const double total = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void finish_kernel(const double* partials, int64_t count, double scale, bool sqrt_result,
                              float* out) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) acc += partials[i];
  const double total = block_sum(acc);
  if (threadIdx.x == 0) out[0] = static_cast<float>(sqrt_result ? sqrt(total) : total * scale);
}

// Block g sums x[(n*Cv + g)*S + s] over n < nv, s < S (a strided group).
__device__ double group_sum_x(const float* x, int64_t nv, int64_t cv, int64_t s, int64_t g,
                              double shift) {
  double acc = 0.0;
  const int64_t m = nv * s;
  for (int64_t k = threadIdx.x; k < m; k += kThreads) {
    const int64_t n = k / s, i = k % s;
    acc += static_cast<double>(x[(n * cv + g) * s + i]) - shift;
  }
  return block_sum(acc);
}

__global__ void channel_sum_kernel(const float* x, int64_t nv, int64_t cv, int64_t s, float* out) {
  const double total = group_sum_x(x, nv, cv, s, blockIdx.x, 0.0);
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<float>(total);
}

__global__ void dice_sums_kernel(const float* p, const float* t, int64_t s, double* sums) {
  const float* pj = p + blockIdx.x * s;
  const float* tj = t + blockIdx.x * s;
  double inter = 0.0, sp = 0.0, st = 0.0;
  for (int64_t i = threadIdx.x; i < s; i += kThreads) {
    inter += static_cast<double>(pj[i]) * tj[i];
    sp += pj[i];
    st += tj[i];
  }
  inter = block_sum(inter);
  sp = block_sum(sp);
  st = block_sum(st);
  if (threadIdx.x == 0) {
    sums[3 * blockIdx.x] = inter;
    sums[3 * blockIdx.x + 1] = sp;
    sums[3 * blockIdx.x + 2] = st;
  }
}

__global__ void dice_loss_kernel(const double* sums, int64_t slices, double eps, float* loss) {
  double acc = 0.0;
  for (int64_t j = threadIdx.x; j < slices; j += kThreads) {
    acc += (2.0 * sums[3 * j] + eps) / (sums[3 * j + 1] + sums[3 * j + 2] + eps);
  }
  const double total = block_sum(acc);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(1.0 - total / static_cast<double>(slices));
}

// d loss / d p_i = -(dloss/M) (2 t_i (P+T+eps) - (2I+eps)) / (P+T+eps)^2.
__global__ void dice_bwd_kernel(const float* t, const double* sums, const float* dloss,
                                int64_t slices, int64_t s, double eps, float* g) {
  const double scale = -static_cast<double>(dloss[0]) / static_cast<double>(slices);
  const int64_t n = slices * s;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    const int64_t j = i / s;
    const double den = sums[3 * j + 1] + sums[3 * j + 2] + eps;
    const double num = 2.0 * sums[3 * j] + eps;
    g[i] = static_cast<float>(scale * 2.0 / den * t[i] - scale * num / (den * den));
  }
}

__global__ void norm_stats_kernel(const float* x, NormView v, double* mean, double* var) {
  const int64_t g = blockIdx.x;
  const double m = static_cast<double>(v.nv * v.s);
  const double mu = group_sum_x(x, v.nv, v.cv, v.s, g, 0.0) / m;
  double acc = 0.0;
  for (int64_t k = threadIdx.x; k < v.nv * v.s; k += kThreads) {
    const int64_t n = k / v.s, i = k % v.s;
    const double d = static_cast<double>(x[(n * v.cv + g) * v.s + i]) - mu;
    acc += d * d;
  }
  const double total = block_sum(acc);
  if (threadIdx.x == 0) {
    mean[g] = mu;
    var[g] = total / m;
  }
}

__global__ void norm_forward_kernel(const float* x, const float* gamma, const float* beta,
                                    const double* mean, const double* var, NormView v, float* y) {
  const int64_t n = v.nv * v.cv * v.s;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    const int64_t g = (i / v.s) % v.cv, c = g % v.c;
    const double inv = 1.0 / sqrt(var[g] + v.eps);
    y[i] = static_cast<float>(gamma[c] * ((x[i] - mean[g]) * inv) + beta[c]);
  }
}

__global__ void norm_bwd_sums_kernel(const float* x, const float* dy, const double* mean,
                                     NormView v, double* sum_dy, double* sum_dyxmu) {
  const int64_t g = blockIdx.x;
  double a = 0.0, b = 0.0;
  for (int64_t k = threadIdx.x; k < v.nv * v.s; k += kThreads) {
    const int64_t n = k / v.s, i = k % v.s;
    const int64_t idx = (n * v.cv + g) * v.s + i;
    a += dy[idx];
    b += static_cast<double>(dy[idx]) * (static_cast<double>(x[idx]) - mean[g]);
  }
  a = block_sum(a);
  b = block_sum(b);
  if (threadIdx.x == 0) {
    sum_dy[g] = a;
    sum_dyxmu[g] = b;
  }
}

// dx = gamma * inv * (dy - sum_dy/M - xhat * sum(dy*xhat)/M), xhat = (x-mean)*inv.
__global__ void norm_bwd_dx_kernel(const float* x, const float* dy, const float* gamma,
                                   const double* mean, const double* var, const double* sum_dy,
                                   const double* sum_dyxmu, NormView v, float* dx) {
  const int64_t n = v.nv * v.cv * v.s;
  const double m = static_cast<double>(v.nv * v.s);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    const int64_t g = (i / v.s) % v.cv, c = g % v.c;
    const double inv = 1.0 / sqrt(var[g] + v.eps);
    const double xhat = (x[i] - mean[g]) * inv;
    const double sum_dyxhat = sum_dyxmu[g] * inv;
    dx[i] = static_cast<float>(gamma[c] * inv * (dy[i] - sum_dy[g] / m - xhat * sum_dyxhat / m));
  }
}

// One thread per channel c, summing its groups g = c, c + C, ... in order.
__global__ void norm_param_grads_kernel(const double* var, const double* sum_dy,
                                        const double* sum_dyxmu, NormView v, float* dgamma,
                                        float* dbeta) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (c >= v.c) return;
  double dg = 0.0, db = 0.0;
  for (int64_t g = c; g < v.cv; g += v.c) {
    db += sum_dy[g];
    dg += sum_dyxmu[g] / sqrt(var[g] + v.eps);
  }
  dgamma[c] = static_cast<float>(dg);
  dbeta[c] = static_cast<float>(db);
}

int blocks_of(int64_t n) { return static_cast<int>(n < 1 ? 1 : n); }

}  // namespace

int reduce_blocks(int64_t n) {
  int64_t blocks = (n + kElementsPerBlock - 1) / kElementsPerBlock;
  if (blocks > kMaxReduceBlocks) blocks = kMaxReduceBlocks;
  return blocks < 1 ? 1 : static_cast<int>(blocks);
}

cudaError_t reduce_partials(cudaStream_t stream, Reduce op, const float* a, const float* b,
                            int64_t n, double* partials) {
  const int blocks = reduce_blocks(n);
  const int64_t chunk = (n + blocks - 1) / blocks;
  partials_kernel<<<blocks, kThreads, 0, stream>>>(op, a, b, n, chunk, partials);
  return cudaGetLastError();
}

cudaError_t finish_sum(cudaStream_t stream, const double* partials, int64_t count, double scale,
                       bool sqrt_result, float* out) {
  finish_kernel<<<1, kThreads, 0, stream>>>(partials, count, scale, sqrt_result, out);
  return cudaGetLastError();
}

cudaError_t channel_sum(cudaStream_t stream, const float* x, int64_t N, int64_t C, int64_t S,
                        float* out) {
  channel_sum_kernel<<<blocks_of(C), kThreads, 0, stream>>>(x, N, C, S, out);
  return cudaGetLastError();
}

cudaError_t dice_sums(cudaStream_t stream, const float* p, const float* t, int64_t slices,
                      int64_t S, double* sums) {
  dice_sums_kernel<<<blocks_of(slices), kThreads, 0, stream>>>(p, t, S, sums);
  return cudaGetLastError();
}

cudaError_t dice_loss(cudaStream_t stream, const double* sums, int64_t slices, double eps,
                      float* loss) {
  dice_loss_kernel<<<1, kThreads, 0, stream>>>(sums, slices, eps, loss);
  return cudaGetLastError();
}

cudaError_t dice_bwd(cudaStream_t stream, const float* t, const double* sums, const float* dloss,
                     int64_t slices, int64_t S, double eps, float* g) {
  dice_bwd_kernel<<<grid_for(slices * S), kThreads, 0, stream>>>(t, sums, dloss, slices, S, eps, g);
  return cudaGetLastError();
}

cudaError_t norm_stats(cudaStream_t stream, const float* x, NormView v, double* mean, double* var) {
  norm_stats_kernel<<<blocks_of(v.cv), kThreads, 0, stream>>>(x, v, mean, var);
  return cudaGetLastError();
}

cudaError_t norm_forward(cudaStream_t stream, const float* x, const float* gamma, const float* beta,
                         const double* mean, const double* var, NormView v, float* y) {
  norm_forward_kernel<<<grid_for(v.nv * v.cv * v.s), kThreads, 0, stream>>>(x, gamma, beta, mean,
                                                                            var, v, y);
  return cudaGetLastError();
}

cudaError_t norm_bwd_sums(cudaStream_t stream, const float* x, const float* dy, const double* mean,
                          NormView v, double* sum_dy, double* sum_dyxmu) {
  norm_bwd_sums_kernel<<<blocks_of(v.cv), kThreads, 0, stream>>>(x, dy, mean, v, sum_dy, sum_dyxmu);
  return cudaGetLastError();
}

cudaError_t norm_bwd_dx(cudaStream_t stream, const float* x, const float* dy, const float* gamma,
                        const double* mean, const double* var, const double* sum_dy,
                        const double* sum_dyxmu, NormView v, float* dx) {
  norm_bwd_dx_kernel<<<grid_for(v.nv * v.cv * v.s), kThreads, 0, stream>>>(
      x, dy, gamma, mean, var, sum_dy, sum_dyxmu, v, dx);
  return cudaGetLastError();
}

cudaError_t norm_param_grads(cudaStream_t stream, const double* var, const double* sum_dy,
                             const double* sum_dyxmu, NormView v, float* dgamma, float* dbeta) {
  norm_param_grads_kernel<<<grid_for(v.c), kThreads, 0, stream>>>(var, sum_dy, sum_dyxmu, v, dgamma,
                                                                  dbeta);
  return cudaGetLastError();
}

}  // namespace lms::cuda::launch
