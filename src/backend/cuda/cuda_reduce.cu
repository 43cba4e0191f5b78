// Reductions of the CUDA backend (cuda_launch.h): whole-tensor sums, per-
// channel sums, soft Dice sums and normalisation statistics. Each block sums
// a fixed set of elements with a fixed per-thread stride and a fixed tree
// (detail::block_sum), in double; partials are combined in a fixed order. No
// atomics, so every result is bit-identical run to run. The grouped sums
// split each group over several blocks as Note [Grouped reduction plan] lays
// out.
#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/reduce_plan.h"

namespace lms::cuda::launch {
namespace {

using detail::block_sum;
using detail::grid_for;
using detail::kThreads;

constexpr int64_t kElementsPerBlock = int64_t{kThreads} * 16;
constexpr int kMaxReduceBlocks = 1024;
static_assert(kReduceThreads == kThreads, "reduce_plan.h describes the blocks of this file");

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

// ---- Grouped sums (Note [Grouped reduction plan]) ----

// The W floats of the unit at element offset e, in order: one float4 load
// when the pointer is 16-byte aligned, else W scalar loads. The values and
// their order are the same either way, so alignment never changes a result.
template <int W, bool kVector>
__device__ void load_unit(const float* base, int64_t e, float (&v)[W]) {
  if constexpr (kVector && W == 4) {
    const float4 q = *reinterpret_cast<const float4*>(base + e);
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  } else {
    for (int k = 0; k < W; ++k) v[k] = base[e + k];
  }
}

// The ops of the grouped sums. Each sums kValues terms of a (and b, when
// kTwoInputs) over a group, relative to a per-group centre, and finish()
// stores the group's totals.

// out[g] = sum a.
struct ChannelSumOp {
  static constexpr int kValues = 1;
  static constexpr bool kTwoInputs = false;
  const float* a;
  const float* b;
  float* out;
  __device__ double center(const GroupReducePlan&, int64_t) const { return 0.0; }
  __device__ void add(double (&acc)[kValues], float x, float, double) const { acc[0] += x; }
  __device__ void finish(const GroupReducePlan&, int64_t g, const double (&t)[kValues],
                         double) const {
    out[g] = static_cast<float>(t[0]);
  }
};

// sums[3g + {0,1,2}] = (sum a*b, sum a, sum b).
struct DiceSumsOp {
  static constexpr int kValues = 3;
  static constexpr bool kTwoInputs = true;
  const float* a;
  const float* b;
  double* sums;
  __device__ double center(const GroupReducePlan&, int64_t) const { return 0.0; }
  __device__ void add(double (&acc)[kValues], float p, float t, double) const {
    acc[0] += static_cast<double>(p) * t;
    acc[1] += p;
    acc[2] += t;
  }
  __device__ void finish(const GroupReducePlan&, int64_t g, const double (&t)[kValues],
                         double) const {
    for (int v = 0; v < kValues; ++v) sums[3 * g + v] = t[v];
  }
};

// Mean and biased variance from one read: sums of x - c and (x - c)^2 with
// c the group's first element (shifted_moments).
struct NormStatsOp {
  static constexpr int kValues = 2;
  static constexpr bool kTwoInputs = false;
  const float* a;
  const float* b;
  double* mean;
  double* var;
  __device__ double center(const GroupReducePlan& p, int64_t g) const {
    return p.runs * p.run_elements > 0 ? static_cast<double>(a[g * p.run_elements]) : 0.0;
  }
  __device__ void add(double (&acc)[kValues], float x, float, double c) const {
    const double d = static_cast<double>(x) - c;
    acc[0] += d;
    acc[1] += d * d;
  }
  __device__ void finish(const GroupReducePlan& p, int64_t g, const double (&t)[kValues],
                         double c) const {
    const Moments s = shifted_moments(c, t[0], t[1], static_cast<double>(p.runs * p.run_elements));
    mean[g] = s.mean;
    var[g] = s.var;
  }
};

// sum_dy[g] = sum b, sum_dyxmu[g] = sum b*(a - mean[g]); a = x, b = dy.
struct NormBwdSumsOp {
  static constexpr int kValues = 2;
  static constexpr bool kTwoInputs = true;
  const float* a;
  const float* b;
  const double* mean;
  double* sum_dy;
  double* sum_dyxmu;
  __device__ double center(const GroupReducePlan&, int64_t g) const { return mean[g]; }
  __device__ void add(double (&acc)[kValues], float x, float dy, double mu) const {
    acc[0] += dy;
    acc[1] += static_cast<double>(dy) * (static_cast<double>(x) - mu);
  }
  __device__ void finish(const GroupReducePlan&, int64_t g, const double (&t)[kValues],
                         double) const {
    sum_dy[g] = t[0];
    sum_dyxmu[g] = t[1];
  }
};

// First pass: block b = g*chunks + j sums chunk j of group g into
// partials[b*kValues ..]; thread t adds units begin + t, begin + t +
// kThreads, ... of the chunk.
template <class Op, int W, bool kVector>
__global__ void group_partials_kernel(Op op, GroupReducePlan p, double* partials) {
  const int64_t g = blockIdx.x / p.chunks, j = blockIdx.x % p.chunks;
  const UnitRange r = chunk_range(p, j);
  const double c = op.center(p, g);
  double acc[Op::kValues] = {};
  const int64_t first = r.begin + threadIdx.x;
  if (first < r.end) {
    UnitCursor at(p, g, first);
    for (int64_t u = first; u < r.end; u += kThreads, at.advance(kThreads)) {
      float va[W], vb[W] = {};
      load_unit<W, kVector>(op.a, at.element(), va);
      if constexpr (Op::kTwoInputs) load_unit<W, kVector>(op.b, at.element(), vb);
      for (int k = 0; k < W; ++k) op.add(acc, va[k], vb[k], c);
    }
  }
  for (int v = 0; v < Op::kValues; ++v) {
    const double total = block_sum(acc[v]);
    if (threadIdx.x == 0) partials[blockIdx.x * int64_t{Op::kValues} + v] = total;
  }
}

// Second pass: one warp per group; lane l sums partials l, l + 32, ... in
// index order, then a fixed shuffle tree joins the lanes.
template <class Op>
__global__ void group_finish_kernel(Op op, GroupReducePlan p, const double* partials) {
  const int64_t g = (blockIdx.x * int64_t{kThreads} + threadIdx.x) / kFinishLanes;
  const int lane = static_cast<int>(threadIdx.x % kFinishLanes);
  if (g >= p.groups) return;  // whole warps: g is the same across a warp
  const double* mine = partials + g * p.chunks * Op::kValues;
  double t[Op::kValues];
  for (int v = 0; v < Op::kValues; ++v) {
    double acc = 0.0;
    for (int64_t j = lane; j < p.chunks; j += kFinishLanes) acc += mine[j * Op::kValues + v];
    for (int offset = kFinishLanes / 2; offset > 0; offset /= 2) {
      acc += __shfl_down_sync(0xffffffffu, acc, offset);
    }
    t[v] = acc;
  }
  if (lane == 0) op.finish(p, g, t, op.center(p, g));
}

bool aligned16(const float* x) { return reinterpret_cast<uintptr_t>(x) % 16 == 0; }

// Both passes of `op` over the groups of `p`, partials in `scratch`
// (partial_count(p, Op::kValues) doubles).
template <class Op>
cudaError_t reduce_groups(cudaStream_t stream, const Op& op, const GroupReducePlan& p,
                          double* scratch) {
  if (p.groups == 0) return cudaSuccess;
  const bool vector = aligned16(op.a) && (!Op::kTwoInputs || aligned16(op.b));
  const int blocks = static_cast<int>(p.blocks());
  if (p.width == 4 && vector) {
    group_partials_kernel<Op, 4, true><<<blocks, kThreads, 0, stream>>>(op, p, scratch);
  } else if (p.width == 4) {
    group_partials_kernel<Op, 4, false><<<blocks, kThreads, 0, stream>>>(op, p, scratch);
  } else {
    group_partials_kernel<Op, 1, false><<<blocks, kThreads, 0, stream>>>(op, p, scratch);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int64_t warps_per_block = kThreads / kFinishLanes;
  const int finish_blocks = static_cast<int>((p.groups + warps_per_block - 1) / warps_per_block);
  group_finish_kernel<Op><<<finish_blocks, kThreads, 0, stream>>>(op, p, scratch);
  return cudaGetLastError();
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

// One thread per channel: the statistics converted between float and double.
__global__ void stats_to_float_kernel(const double* mean, const double* var, int64_t c,
                                      float* mean_out, float* var_out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i >= c) return;
  mean_out[i] = static_cast<float>(mean[i]);
  var_out[i] = static_cast<float>(var[i]);
}

__global__ void stats_to_double_kernel(const float* mean, const float* var, int64_t c,
                                       double* mean_out, double* var_out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i >= c) return;
  mean_out[i] = mean[i];
  var_out[i] = var[i];
}

__global__ void bn_stats_update_kernel(float* running_mean, float* running_var, const float* mean,
                                       const float* var, int64_t c, double momentum,
                                       double unbias) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i >= c) return;
  running_mean[i] = static_cast<float>((1 - momentum) * running_mean[i] +
                                       momentum * static_cast<double>(mean[i]));
  running_var[i] = static_cast<float>((1 - momentum) * running_var[i] +
                                      momentum * unbias * static_cast<double>(var[i]));
}

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
                        double* scratch, float* out) {
  return reduce_groups(stream, ChannelSumOp{x, nullptr, out}, plan_group_reduce(N, C, S), scratch);
}

cudaError_t dice_sums(cudaStream_t stream, const float* p, const float* t, int64_t slices,
                      int64_t S, double* scratch, double* sums) {
  return reduce_groups(stream, DiceSumsOp{p, t, sums}, plan_group_reduce(1, slices, S), scratch);
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

cudaError_t norm_stats(cudaStream_t stream, const float* x, NormView v, double* scratch,
                       double* mean, double* var) {
  return reduce_groups(stream, NormStatsOp{x, nullptr, mean, var},
                       plan_group_reduce(v.nv, v.cv, v.s), scratch);
}

cudaError_t norm_forward(cudaStream_t stream, const float* x, const float* gamma, const float* beta,
                         const double* mean, const double* var, NormView v, float* y) {
  norm_forward_kernel<<<grid_for(v.nv * v.cv * v.s), kThreads, 0, stream>>>(x, gamma, beta, mean,
                                                                            var, v, y);
  return cudaGetLastError();
}

cudaError_t norm_bwd_sums(cudaStream_t stream, const float* x, const float* dy, const double* mean,
                          NormView v, double* scratch, double* sum_dy, double* sum_dyxmu) {
  return reduce_groups(stream, NormBwdSumsOp{x, dy, mean, sum_dy, sum_dyxmu},
                       plan_group_reduce(v.nv, v.cv, v.s), scratch);
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

cudaError_t stats_to_float(cudaStream_t stream, const double* mean, const double* var, int64_t c,
                           float* mean_out, float* var_out) {
  stats_to_float_kernel<<<grid_for(c), kThreads, 0, stream>>>(mean, var, c, mean_out, var_out);
  return cudaGetLastError();
}

cudaError_t stats_to_double(cudaStream_t stream, const float* mean, const float* var, int64_t c,
                            double* mean_out, double* var_out) {
  stats_to_double_kernel<<<grid_for(c), kThreads, 0, stream>>>(mean, var, c, mean_out, var_out);
  return cudaGetLastError();
}

cudaError_t bn_stats_update(cudaStream_t stream, float* running_mean, float* running_var,
                            const float* mean, const float* var, int64_t c, double momentum,
                            double unbias) {
  bn_stats_update_kernel<<<grid_for(c), kThreads, 0, stream>>>(running_mean, running_var, mean, var,
                                                               c, momentum, unbias);
  return cudaGetLastError();
}

}  // namespace lms::cuda::launch
