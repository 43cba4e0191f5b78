// Max pooling and upsampling of the CUDA backend (cuda_launch.h), written as
// gathers: every output element (and, backward, every input element) is
// computed by one thread that reads what it needs, so backward passes need no
// atomics and are deterministic. 2-D problems run as 3-D with depth 1.
#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"

namespace lms::cuda::launch {
namespace {

using detail::grid_for;
using detail::kThreads;

__device__ int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// Linear index within the window (d, h, w order) of its first maximum,
// ignoring padded positions, for output position (od, oh, ow).
__device__ int64_t window_argmax(const float* x, const Geom3& g, int64_t od, int64_t oh,
                                 int64_t ow) {
  int64_t best_idx = -1;
  float best = 0.0f;
  for (int64_t kd = 0; kd < g.k[0]; ++kd) {
    const int64_t id = od * g.s[0] - g.p[0] + kd;
    if (id < 0 || id >= g.in[0]) continue;
    for (int64_t kh = 0; kh < g.k[1]; ++kh) {
      const int64_t ih = oh * g.s[1] - g.p[1] + kh;
      if (ih < 0 || ih >= g.in[1]) continue;
      for (int64_t kw = 0; kw < g.k[2]; ++kw) {
        const int64_t iw = ow * g.s[2] - g.p[2] + kw;
        if (iw < 0 || iw >= g.in[2]) continue;
        const int64_t idx = (id * g.in[1] + ih) * g.in[2] + iw;
        if (best_idx < 0 || x[idx] > best) {
          best = x[idx];
          best_idx = idx;
        }
      }
    }
  }
  return best_idx;
}

__global__ void max_pool_fwd_kernel(const float* x, Geom3 g, float* y) {
  const int64_t plane_out = g.out[0] * g.out[1] * g.out[2];
  const int64_t plane_in = g.in[0] * g.in[1] * g.in[2];
  const int64_t n = g.nc * plane_out;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    const int64_t plane = i / plane_out, r = i % plane_out;
    const int64_t ow = r % g.out[2], oh = (r / g.out[2]) % g.out[1], od = r / (g.out[2] * g.out[1]);
    const float* xp = x + plane * plane_in;
    y[i] = xp[window_argmax(xp, g, od, oh, ow)];
  }
}

// First and last output index whose window covers input index i in one dim.
__device__ void covering(int64_t i, int64_t k, int64_t s, int64_t p, int64_t out, int64_t* lo,
                         int64_t* hi) {
  const int64_t a = i + p - k + 1;  // o*s >= a
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  *hi = clamp64((i + p) / s, -1, out - 1);
}

__global__ void max_pool_bwd_kernel(const float* x, const float* dy, Geom3 g, float* dx) {
  const int64_t plane_out = g.out[0] * g.out[1] * g.out[2];
  const int64_t plane_in = g.in[0] * g.in[1] * g.in[2];
  const int64_t n = g.nc * plane_in;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    const int64_t plane = i / plane_in, r = i % plane_in;
    const int64_t iw = r % g.in[2], ih = (r / g.in[2]) % g.in[1], id = r / (g.in[2] * g.in[1]);
    const float* xp = x + plane * plane_in;
    const float* dyp = dy + plane * plane_out;
    int64_t lo[3], hi[3];
    covering(id, g.k[0], g.s[0], g.p[0], g.out[0], &lo[0], &hi[0]);
    covering(ih, g.k[1], g.s[1], g.p[1], g.out[1], &lo[1], &hi[1]);
    covering(iw, g.k[2], g.s[2], g.p[2], g.out[2], &lo[2], &hi[2]);
    float acc = 0.0f;
    for (int64_t od = lo[0]; od <= hi[0]; ++od)
      for (int64_t oh = lo[1]; oh <= hi[1]; ++oh)
        for (int64_t ow = lo[2]; ow <= hi[2]; ++ow)
          if (window_argmax(xp, g, od, oh, ow) == r)
            acc += dyp[(od * g.out[1] + oh) * g.out[2] + ow];
    dx[i] = acc;
  }
}

// Elements of the window of output (od, oh, ow) that lie in the input
// (count_include_pad = 0), or the whole window (= 1).
__device__ float window_count(Geom3 g, int64_t od, int64_t oh, int64_t ow, bool include_pad) {
  if (include_pad) return static_cast<float>(g.k[0] * g.k[1] * g.k[2]);
  const int64_t o[3] = {od, oh, ow};
  int64_t count = 1;
  for (int d = 0; d < 3; ++d) {
    const int64_t lo = o[d] * g.s[d] - g.p[d];
    const int64_t first = lo < 0 ? 0 : lo;
    const int64_t last = lo + g.k[d] < g.in[d] ? lo + g.k[d] : g.in[d];
    count *= last - first;
  }
  return static_cast<float>(count);
}

// y = the sum of the window's inputs in (d, h, w) order over window_count.
__global__ void avg_pool_fwd_kernel(const float* x, Geom3 g, bool include_pad, float* y) {
  const int64_t plane_out = g.out[0] * g.out[1] * g.out[2];
  const int64_t plane_in = g.in[0] * g.in[1] * g.in[2];
  const int64_t n = g.nc * plane_out;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    const int64_t plane = i / plane_out, r = i % plane_out;
    const int64_t ow = r % g.out[2], oh = (r / g.out[2]) % g.out[1], od = r / (g.out[2] * g.out[1]);
    const float* xp = x + plane * plane_in;
    float acc = 0.0f;
    for (int64_t kd = 0; kd < g.k[0]; ++kd) {
      const int64_t id = od * g.s[0] - g.p[0] + kd;
      if (id < 0 || id >= g.in[0]) continue;
      for (int64_t kh = 0; kh < g.k[1]; ++kh) {
        const int64_t ih = oh * g.s[1] - g.p[1] + kh;
        if (ih < 0 || ih >= g.in[1]) continue;
        for (int64_t kw = 0; kw < g.k[2]; ++kw) {
          const int64_t iw = ow * g.s[2] - g.p[2] + kw;
          if (iw >= 0 && iw < g.in[2]) acc += xp[(id * g.in[1] + ih) * g.in[2] + iw];
        }
      }
    }
    y[i] = acc / window_count(g, od, oh, ow, include_pad);
  }
}

// dx = the sum over the windows covering the element of dy / window_count.
__global__ void avg_pool_bwd_kernel(const float* dy, Geom3 g, bool include_pad, float* dx) {
  const int64_t plane_out = g.out[0] * g.out[1] * g.out[2];
  const int64_t plane_in = g.in[0] * g.in[1] * g.in[2];
  const int64_t n = g.nc * plane_in;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    const int64_t plane = i / plane_in, r = i % plane_in;
    const int64_t iw = r % g.in[2], ih = (r / g.in[2]) % g.in[1], id = r / (g.in[2] * g.in[1]);
    const float* dyp = dy + plane * plane_out;
    int64_t lo[3], hi[3];
    covering(id, g.k[0], g.s[0], g.p[0], g.out[0], &lo[0], &hi[0]);
    covering(ih, g.k[1], g.s[1], g.p[1], g.out[1], &lo[1], &hi[1]);
    covering(iw, g.k[2], g.s[2], g.p[2], g.out[2], &lo[2], &hi[2]);
    float acc = 0.0f;
    for (int64_t od = lo[0]; od <= hi[0]; ++od)
      for (int64_t oh = lo[1]; oh <= hi[1]; ++oh)
        for (int64_t ow = lo[2]; ow <= hi[2]; ++ow)
          acc +=
              dyp[(od * g.out[1] + oh) * g.out[2] + ow] / window_count(g, od, oh, ow, include_pad);
    dx[i] = acc;
  }
}

// Source taps of output index o in one dim (half-pixel centres, clamped):
// i0, i1 with weights 1 - w1, w1.
__device__ void linear_taps(int64_t o, int64_t scale, int64_t in, int64_t* i0, int64_t* i1,
                            float* w1) {
  float s = (static_cast<float>(o) + 0.5f) / static_cast<float>(scale) - 0.5f;
  s = fminf(fmaxf(s, 0.0f), static_cast<float>(in - 1));
  *i0 = static_cast<int64_t>(floorf(s));
  *i1 = *i0 + 1 < in ? *i0 + 1 : in - 1;
  *w1 = s - static_cast<float>(*i0);
}

// Weight of input index i in output index o along one dim.
__device__ float tap_weight(int64_t o, int64_t i, int64_t scale, int64_t in, bool linear) {
  if (!linear) return o / scale == i ? 1.0f : 0.0f;
  int64_t i0, i1;
  float w1;
  linear_taps(o, scale, in, &i0, &i1, &w1);
  return (i0 == i ? 1.0f - w1 : 0.0f) + (i1 == i ? w1 : 0.0f);
}

__global__ void upsample_fwd_kernel(const float* x, Geom3 g, bool linear, float* y) {
  const int64_t plane_out = g.out[0] * g.out[1] * g.out[2];
  const int64_t plane_in = g.in[0] * g.in[1] * g.in[2];
  const int64_t n = g.nc * plane_out;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    const int64_t plane = i / plane_out, r = i % plane_out;
    const int64_t o[3] = {r / (g.out[2] * g.out[1]), (r / g.out[2]) % g.out[1], r % g.out[2]};
    const float* xp = x + plane * plane_in;
    if (!linear) {
      y[i] = xp[((o[0] / g.k[0]) * g.in[1] + o[1] / g.k[1]) * g.in[2] + o[2] / g.k[2]];
      continue;
    }
    int64_t t0[3], t1[3];
    float w[3];
    for (int d = 0; d < 3; ++d) linear_taps(o[d], g.k[d], g.in[d], &t0[d], &t1[d], &w[d]);
    float acc = 0.0f;
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b)
        for (int c = 0; c < 2; ++c) {
          const float wa = a ? w[0] : 1.0f - w[0], wb = b ? w[1] : 1.0f - w[1];
          const float wc = c ? w[2] : 1.0f - w[2];
          const int64_t id = a ? t1[0] : t0[0], ih = b ? t1[1] : t0[1], iw = c ? t1[2] : t0[2];
          acc += wa * wb * wc * xp[(id * g.in[1] + ih) * g.in[2] + iw];
        }
    y[i] = acc;
  }
}

// dx[i] = sum over outputs o that read i of weight(o, i) * dy[o]; the
// candidates lie within [(i-1)*scale, (i+2)*scale) in each dim.
__global__ void upsample_bwd_kernel(const float* dy, Geom3 g, bool linear, float* dx) {
  const int64_t plane_out = g.out[0] * g.out[1] * g.out[2];
  const int64_t plane_in = g.in[0] * g.in[1] * g.in[2];
  const int64_t n = g.nc * plane_in;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kThreads) * gridDim.x) {
    const int64_t plane = i / plane_in, r = i % plane_in;
    const int64_t in[3] = {r / (g.in[2] * g.in[1]), (r / g.in[2]) % g.in[1], r % g.in[2]};
    int64_t lo[3], hi[3];
    for (int d = 0; d < 3; ++d) {
      lo[d] = clamp64((in[d] - 1) * g.k[d], 0, g.out[d]);
      hi[d] = clamp64((in[d] + 2) * g.k[d], 0, g.out[d]);
    }
    const float* dyp = dy + plane * plane_out;
    float acc = 0.0f;
    for (int64_t od = lo[0]; od < hi[0]; ++od) {
      const float wd = tap_weight(od, in[0], g.k[0], g.in[0], linear);
      if (wd == 0.0f) continue;
      for (int64_t oh = lo[1]; oh < hi[1]; ++oh) {
        const float wh = tap_weight(oh, in[1], g.k[1], g.in[1], linear);
        if (wh == 0.0f) continue;
        for (int64_t ow = lo[2]; ow < hi[2]; ++ow) {
          const float ww = tap_weight(ow, in[2], g.k[2], g.in[2], linear);
          if (ww != 0.0f) acc += wd * wh * ww * dyp[(od * g.out[1] + oh) * g.out[2] + ow];
        }
      }
    }
    dx[i] = acc;
  }
}

}  // namespace

cudaError_t max_pool_fwd(cudaStream_t stream, const float* x, Geom3 g, float* y) {
  max_pool_fwd_kernel<<<grid_for(g.nc * g.out[0] * g.out[1] * g.out[2]), kThreads, 0, stream>>>(
      x, g, y);
  return cudaGetLastError();
}

cudaError_t max_pool_bwd(cudaStream_t stream, const float* x, const float* dy, Geom3 g, float* dx) {
  max_pool_bwd_kernel<<<grid_for(g.nc * g.in[0] * g.in[1] * g.in[2]), kThreads, 0, stream>>>(x, dy,
                                                                                             g, dx);
  return cudaGetLastError();
}

cudaError_t avg_pool_fwd(cudaStream_t stream, const float* x, Geom3 g, bool include_pad, float* y) {
  avg_pool_fwd_kernel<<<grid_for(g.nc * g.out[0] * g.out[1] * g.out[2]), kThreads, 0, stream>>>(
      x, g, include_pad, y);
  return cudaGetLastError();
}

cudaError_t avg_pool_bwd(cudaStream_t stream, const float* dy, Geom3 g, bool include_pad,
                         float* dx) {
  avg_pool_bwd_kernel<<<grid_for(g.nc * g.in[0] * g.in[1] * g.in[2]), kThreads, 0, stream>>>(
      dy, g, include_pad, dx);
  return cudaGetLastError();
}

cudaError_t upsample_fwd(cudaStream_t stream, const float* x, Geom3 g, bool linear, float* y) {
  upsample_fwd_kernel<<<grid_for(g.nc * g.out[0] * g.out[1] * g.out[2]), kThreads, 0, stream>>>(
      x, g, linear, y);
  return cudaGetLastError();
}

cudaError_t upsample_bwd(cudaStream_t stream, const float* dy, Geom3 g, bool linear, float* dx) {
  upsample_bwd_kernel<<<grid_for(g.nc * g.in[0] * g.in[1] * g.in[2]), kThreads, 0, stream>>>(
      dy, g, linear, dx);
  return cudaGetLastError();
}

}  // namespace lms::cuda::launch
