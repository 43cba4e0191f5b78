// Element-wise kernels, the MSE gradient and the optimizer updates of the
// CUDA backend (cuda_launch.h). Formulas are those of docs/ops.md and match
// the CPU device's loops (per-step scalars in double, per-element in float).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"
#include "backend/dropout_hash.h"
#include "backend/lr_schedule.h"

namespace lms::cuda::launch {
namespace {

using detail::grid_for;
using detail::kThreads;

#define LMS_GRID_STRIDE(i, n)                                                            \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

__global__ void unary_kernel(Unary op, const float* x, float* y, int64_t n, float alpha) {
  LMS_GRID_STRIDE(i, n) {
    const float v = x[i];
    switch (op) {
      case Unary::kRelu:
        y[i] = v > 0.0f ? v : 0.0f;
        break;
      case Unary::kLeakyRelu:
        y[i] = v > 0.0f ? v : alpha * v;
        break;
      case Unary::kSigmoid:
        y[i] = 1.0f / (1.0f + expf(-v));
        break;
      case Unary::kTanh:
        y[i] = tanhf(v);
        break;
      case Unary::kScale:
        y[i] = alpha * v;
        break;
    }
  }
}

__global__ void binary_kernel(Binary op, const float* a, const float* b, float* y, int64_t n,
                              float alpha) {
  LMS_GRID_STRIDE(i, n) {
    const float u = a[i], w = b[i];
    switch (op) {
      case Binary::kAdd:
        y[i] = u + w;
        break;
      case Binary::kMul:
        y[i] = u * w;
        break;
      case Binary::kReluBwd:
        y[i] = u > 0.0f ? w : 0.0f;
        break;
      case Binary::kLeakyReluBwd:
        y[i] = u > 0.0f ? w : alpha * w;
        break;
      case Binary::kSigmoidBwd:
        y[i] = w * u * (1.0f - u);
        break;
      case Binary::kTanhBwd:
        y[i] = w * (1.0f - u * u);
        break;
    }
  }
}

__global__ void broadcast_binary_kernel(Binary op, const float* full, const float* small, float* y,
                                        int64_t n, BroadcastIndex b) {
  LMS_GRID_STRIDE(i, n) {
    const float u = full[i], w = small[b.index(i)];
    y[i] = op == Binary::kMul ? u * w : u + w;
  }
}

__global__ void sum_to_kernel(const float* x, float* y, SumToPlan p) {
  LMS_GRID_STRIDE(j, p.outputs) {
    const float* xj = x + p.base(j);
    double acc = 0.0;
    for (int64_t r = 0; r < p.per_output; ++r) acc += xj[p.term(r)];
    y[j] = static_cast<float>(acc);
  }
}

__global__ void dropout_kernel(const float* x, float* y, int64_t n, uint64_t key,
                               uint32_t threshold, float scale) {
  LMS_GRID_STRIDE(i, n) y[i] = lms::dropout_hash::bits24(key, i) >= threshold ? x[i] * scale : 0.0f;
}

__global__ void fill_kernel(float* y, int64_t n, float value) {
  LMS_GRID_STRIDE(i, n) y[i] = value;
}

__device__ float load_as_float(const void* x, FloatType type, int64_t i) {
  switch (type) {
    case FloatType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]);
    case FloatType::kF16:
      return __half2float(static_cast<const __half*>(x)[i]);
    case FloatType::kF32:
      break;
  }
  return static_cast<const float*>(x)[i];
}

__global__ void cast_kernel(const void* x, FloatType from, void* y, FloatType to, int64_t n) {
  LMS_GRID_STRIDE(i, n) {
    const float v = load_as_float(x, from, i);
    switch (to) {
      case FloatType::kBF16:
        static_cast<__nv_bfloat16*>(y)[i] = __float2bfloat16_rn(v);
        break;
      case FloatType::kF16:
        static_cast<__half*>(y)[i] = __float2half_rn(v);
        break;
      case FloatType::kF32:
        static_cast<float*>(y)[i] = v;
        break;
    }
  }
}

__global__ void fill_from_scalar_kernel(const float* scalar, double divisor, float* y, int64_t n) {
  const float v = static_cast<float>(static_cast<double>(scalar[0]) / divisor);
  LMS_GRID_STRIDE(i, n) y[i] = v;
}

__global__ void mse_bwd_kernel(const float* p, const float* t, const float* dloss, float* g,
                               int64_t n) {
  const float c = static_cast<float>(2.0 * static_cast<double>(dloss[0]) / static_cast<double>(n));
  LMS_GRID_STRIDE(i, n) g[i] = c * (p[i] - t[i]);
}

__global__ void increment_kernel(float* step, const float* norm) {
  if (norm != nullptr && !isfinite(norm[0])) return;
  step[0] += 1.0f;
}

__global__ void amp_update_scale_kernel(float* scale, float* tracker, const float* norm,
                                        double growth_factor, double backoff_factor,
                                        float growth_interval) {
  if (!isfinite(norm[0])) {
    scale[0] = static_cast<float>(static_cast<double>(scale[0]) * backoff_factor);
    tracker[0] = 0.0f;
    return;
  }
  const float successful = tracker[0] + 1.0f;
  if (successful >= growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(scale[0]) * growth_factor);
    if (isfinite(grown)) scale[0] = grown;
    tracker[0] = 0.0f;
  } else {
    tracker[0] = successful;
  }
}

// The CPU device's GradScale (optimizer_kernels.cc): skip, the unscale
// factor and the clip factor min(1, clip_norm / (norm + 1e-6)) (norm
// unscaled), or 1 without clipping.
struct GradScale {
  bool skip;
  float inv_scale;
  float clip;
};

__device__ GradScale grad_scale(const float* scale, const float* norm, float clip_norm) {
  GradScale s{false, 1.0f, 1.0f};
  double nv = norm != nullptr ? static_cast<double>(norm[0]) : 0.0;
  if (scale != nullptr) {
    if (!isfinite(nv)) {
      s.skip = true;
      return s;
    }
    s.inv_scale = static_cast<float>(1.0 / static_cast<double>(scale[0]));
    nv *= static_cast<double>(s.inv_scale);
  }
  if (clip_norm > 0.0f && norm != nullptr) {
    const double f = static_cast<double>(clip_norm) / (nv + 1e-6);
    s.clip = static_cast<float>(f < 1.0 ? f : 1.0);
  }
  return s;
}

__global__ void sgd_kernel(float* p, const float* g, float* v, const float* scale,
                           const float* norm, int64_t n, SgdParams h) {
  const GradScale s = grad_scale(scale, norm, h.clip_norm);
  if (s.skip) return;
  const float clip = s.clip;
  LMS_GRID_STRIDE(i, n) {
    const float gi = clip * (g[i] * s.inv_scale) + h.weight_decay * p[i];
    v[i] = h.momentum * v[i] + gi;
    p[i] -= h.lr * v[i];
  }
}

__global__ void adam_kernel(float* p, const float* g, float* m, float* v, const float* step,
                            const float* scale, const float* norm, int64_t n, AdamParams h) {
  const GradScale s = grad_scale(scale, norm, h.clip_norm);
  if (s.skip) return;
  const double t = step[0];
  if (!(t >= 1.0)) return;  // see cuda_launch.h
  const float clip = s.clip;
  const float inv_bc1 = static_cast<float>(1.0 / (1.0 - pow(static_cast<double>(h.beta1), t)));
  const float inv_bc2 = static_cast<float>(1.0 / (1.0 - pow(static_cast<double>(h.beta2), t)));
  const float lr = static_cast<float>(poly_lr(h.lr, t, h.decay_steps, h.decay_power));
  LMS_GRID_STRIDE(i, n) {
    const float gi = clip * (g[i] * s.inv_scale) + h.weight_decay * p[i];
    m[i] = h.beta1 * m[i] + (1.0f - h.beta1) * gi;
    v[i] = h.beta2 * v[i] + (1.0f - h.beta2) * gi * gi;
    p[i] -= lr * (m[i] * inv_bc1) / (sqrtf(v[i] * inv_bc2) + h.eps);
  }
}

}  // namespace

namespace {

// y = min(max(x, lo), hi); dx = dy where lo < x < hi, else 0 (the CPU
// device's oneDNN clip_v2).
__global__ void clip_kernel(const float* x, float* y, int64_t n, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    y[i] = fminf(fmaxf(x[i], lo), hi);
  }
}

__global__ void clip_bwd_kernel(const float* x, const float* dy, float* dx, int64_t n, float lo,
                                float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    dx[i] = x[i] > lo && x[i] < hi ? dy[i] : 0.0f;
  }
}

__global__ void hard_sigmoid_kernel(const float* x, const float* dy, float* out, int64_t n,
                                    float alpha, float beta) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    const float v = alpha * x[i] + beta;
    if (dy == nullptr) {
      out[i] = fminf(fmaxf(v, 0.0f), 1.0f);
    } else {
      out[i] = v > 0.0f && v < 1.0f ? alpha * dy[i] : 0.0f;
    }
  }
}

__global__ void hard_swish_kernel(const float* x, const float* dy, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    const float v = x[i];
    if (dy == nullptr) {
      out[i] = v * fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) / 6.0f;
    } else {
      out[i] = v <= -3.0f ? 0.0f : v >= 3.0f ? dy[i] : dy[i] * (2.0f * v + 3.0f) / 6.0f;
    }
  }
}

// The erf form of GELU in float, the formula the CPU device's oneDNN
// eltwise_gelu_erf evaluates (and PyTorch's approximate='none').
constexpr float kSqrtHalf = 0.70710678118654752f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1 / sqrt(2 pi)

__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + erff(v * kSqrtHalf));
  }
}

__global__ void gelu_bwd_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    const float v = x[i];
    const float cdf = 0.5f * (1.0f + erff(v * kSqrtHalf));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}

}  // namespace

cudaError_t gelu(cudaStream_t stream, const float* x, float* y, int64_t n) {
  gelu_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t gelu_bwd(cudaStream_t stream, const float* x, const float* dy, float* dx, int64_t n) {
  gelu_bwd_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t hard_sigmoid(cudaStream_t stream, const float* x, const float* dy, float* out,
                         int64_t n, float alpha, float beta) {
  hard_sigmoid_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, dy, out, n, alpha, beta);
  return cudaGetLastError();
}

cudaError_t hard_swish(cudaStream_t stream, const float* x, const float* dy, float* out,
                       int64_t n) {
  hard_swish_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, dy, out, n);
  return cudaGetLastError();
}

cudaError_t clip(cudaStream_t stream, const float* x, float* y, int64_t n, float lo, float hi) {
  clip_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n, lo, hi);
  return cudaGetLastError();
}

cudaError_t clip_bwd(cudaStream_t stream, const float* x, const float* dy, float* dx, int64_t n,
                     float lo, float hi) {
  clip_bwd_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, dy, dx, n, lo, hi);
  return cudaGetLastError();
}

cudaError_t unary(cudaStream_t stream, Unary op, const float* x, float* y, int64_t n, float alpha) {
  unary_kernel<<<grid_for(n), kThreads, 0, stream>>>(op, x, y, n, alpha);
  return cudaGetLastError();
}

cudaError_t binary(cudaStream_t stream, Binary op, const float* a, const float* b, float* y,
                   int64_t n, float alpha) {
  binary_kernel<<<grid_for(n), kThreads, 0, stream>>>(op, a, b, y, n, alpha);
  return cudaGetLastError();
}

cudaError_t broadcast_binary(cudaStream_t stream, Binary op, const float* full, const float* small,
                             float* y, int64_t n, BroadcastIndex b) {
  broadcast_binary_kernel<<<grid_for(n), kThreads, 0, stream>>>(op, full, small, y, n, b);
  return cudaGetLastError();
}

cudaError_t sum_to(cudaStream_t stream, const float* x, float* y, SumToPlan p) {
  if (p.outputs == 0) return cudaSuccess;
  sum_to_kernel<<<grid_for(p.outputs), kThreads, 0, stream>>>(x, y, p);
  return cudaGetLastError();
}

cudaError_t fill(cudaStream_t stream, float* y, int64_t n, float value) {
  fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, n, value);
  return cudaGetLastError();
}

cudaError_t cast(cudaStream_t stream, const void* x, FloatType from, void* y, FloatType to,
                 int64_t n) {
  cast_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, from, y, to, n);
  return cudaGetLastError();
}

cudaError_t dropout(cudaStream_t stream, const float* x, float* y, int64_t n, uint64_t key,
                    uint32_t threshold, float scale) {
  dropout_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n, key, threshold, scale);
  return cudaGetLastError();
}

cudaError_t fill_from_scalar(cudaStream_t stream, const float* scalar, double divisor, float* y,
                             int64_t n) {
  fill_from_scalar_kernel<<<grid_for(n), kThreads, 0, stream>>>(scalar, divisor, y, n);
  return cudaGetLastError();
}

cudaError_t mse_bwd(cudaStream_t stream, const float* p, const float* t, const float* dloss,
                    float* g, int64_t n) {
  mse_bwd_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, t, dloss, g, n);
  return cudaGetLastError();
}

cudaError_t increment(cudaStream_t stream, float* step, const float* norm) {
  increment_kernel<<<1, 1, 0, stream>>>(step, norm);
  return cudaGetLastError();
}

cudaError_t amp_update_scale(cudaStream_t stream, float* scale, float* tracker, const float* norm,
                             double growth_factor, double backoff_factor, float growth_interval) {
  amp_update_scale_kernel<<<1, 1, 0, stream>>>(scale, tracker, norm, growth_factor, backoff_factor,
                                               growth_interval);
  return cudaGetLastError();
}

cudaError_t sgd_update(cudaStream_t stream, float* p, const float* g, float* v, const float* scale,
                       const float* norm, int64_t n, SgdParams h) {
  sgd_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, g, v, scale, norm, n, h);
  return cudaGetLastError();
}

cudaError_t adam_update(cudaStream_t stream, float* p, const float* g, float* m, float* v,
                        const float* step, const float* scale, const float* norm, int64_t n,
                        AdamParams h) {
  adam_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, g, m, v, step, scale, norm, n, h);
  return cudaGetLastError();
}

}  // namespace lms::cuda::launch
