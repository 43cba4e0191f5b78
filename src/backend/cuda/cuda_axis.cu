// Kernels along one axis and the embedding lookup of the CUDA backend
// (cuda_launch.h): reduce_mean over an axis and its gradient, embedding and
// its gradient. A tensor is seen as [outer, A, inner] around the axis. Each
// output element is written by one thread that reads its inputs in a fixed
// order, so results do not depend on the launch (no atomics; Note [CUDA
// kernel determinism]) and equal the CPU device's loops.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"

namespace lms::cuda::launch {
namespace {

using detail::grid_for;
using detail::kThreads;

#define LMS_AXIS_GRID_STRIDE(i, n)                                                       \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// y[o, i] = float(sum over a, in order, of double(x[o, a, i]) / A).
__global__ void axis_mean_kernel(const float* x, int64_t outer, int64_t axis, int64_t inner,
                                 float* y) {
  LMS_AXIS_GRID_STRIDE(k, outer * inner) {
    const int64_t o = k / inner, i = k % inner;
    const float* x0 = x + o * axis * inner + i;
    double acc = 0.0;
    for (int64_t a = 0; a < axis; ++a) acc += x0[a * inner];
    y[k] = static_cast<float>(acc / static_cast<double>(axis));
  }
}

// dx[o, a, i] = float(double(dy[o, i]) / A).
__global__ void axis_mean_bwd_kernel(const float* dy, int64_t outer, int64_t axis, int64_t inner,
                                     float* dx) {
  LMS_AXIS_GRID_STRIDE(k, outer * axis * inner) {
    const int64_t i = k % inner, o = k / (axis * inner);
    dx[k] = static_cast<float>(static_cast<double>(dy[o * inner + i]) / static_cast<double>(axis));
  }
}

// y[p, d] = table[ids[p], d]; an id outside [0, rows) writes 0 here and is
// reported by check_ids_kernel.
__global__ void embedding_kernel(const int64_t* ids, const float* table, int64_t n, int64_t rows,
                                 int64_t dim, float* y) {
  LMS_AXIS_GRID_STRIDE(k, n * dim) {
    const int64_t p = k / dim, d = k % dim;
    const int64_t id = ids[p];
    y[k] = id < 0 || id >= rows ? 0.0f : table[id * dim + d];
  }
}

// dtable[v, d] = sum of dy[p, d] over p with ids[p] = v, in increasing p, in
// float (the CPU device's order). Out-of-range ids are skipped here and
// reported by check_ids_kernel.
__global__ void embedding_bwd_kernel(const int64_t* ids, const float* dy, int64_t n, int64_t rows,
                                     int64_t dim, float* dtable) {
  LMS_AXIS_GRID_STRIDE(k, rows * dim) {
    const int64_t v = k / dim, d = k % dim;
    float acc = 0.0f;
    for (int64_t p = 0; p < n; ++p) {
      if (ids[p] == v) acc += dy[p * dim + d];
    }
    dtable[k] = acc;
  }
}

// The one id-range check of both embedding kernels: the smallest position
// whose id is outside [0, rows) in *bad (initialised to n by check_ids).
__global__ void check_ids_kernel(const int64_t* ids, int64_t n, int64_t rows,
                                 unsigned long long* bad) {
  LMS_AXIS_GRID_STRIDE(p, n) {
    if (ids[p] < 0 || ids[p] >= rows) atomicMin(bad, static_cast<unsigned long long>(p));
  }
}

__global__ void set_kernel(unsigned long long* bad, int64_t n) {
  *bad = static_cast<unsigned long long>(n);
}

cudaError_t check_ids(cudaStream_t stream, const int64_t* ids, int64_t n, int64_t rows,
                      unsigned long long* bad) {
  set_kernel<<<1, 1, 0, stream>>>(bad, n);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  check_ids_kernel<<<grid_for(n), kThreads, 0, stream>>>(ids, n, rows, bad);
  return cudaGetLastError();
}

// y[i] = x[t.index(i)]: one thread per output element, a copy.
__global__ void gather_strided_kernel(const float* x, float* y, int64_t n, BroadcastIndex t) {
  LMS_AXIS_GRID_STRIDE(i, n) { y[i] = x[t.index(i)]; }
}

}  // namespace

cudaError_t axis_mean(cudaStream_t stream, const float* x, int64_t outer, int64_t axis,
                      int64_t inner, float* y) {
  axis_mean_kernel<<<grid_for(outer * inner), kThreads, 0, stream>>>(x, outer, axis, inner, y);
  return cudaGetLastError();
}

cudaError_t axis_mean_bwd(cudaStream_t stream, const float* dy, int64_t outer, int64_t axis,
                          int64_t inner, float* dx) {
  axis_mean_bwd_kernel<<<grid_for(outer * axis * inner), kThreads, 0, stream>>>(dy, outer, axis,
                                                                                inner, dx);
  return cudaGetLastError();
}

cudaError_t embedding(cudaStream_t stream, const int64_t* ids, const float* table, int64_t n,
                      int64_t rows, int64_t dim, float* y, unsigned long long* bad) {
  if (cudaError_t e = check_ids(stream, ids, n, rows, bad); e != cudaSuccess) return e;
  embedding_kernel<<<grid_for(n * dim), kThreads, 0, stream>>>(ids, table, n, rows, dim, y);
  return cudaGetLastError();
}

cudaError_t embedding_bwd(cudaStream_t stream, const int64_t* ids, const float* dy, int64_t n,
                          int64_t rows, int64_t dim, float* dtable, unsigned long long* bad) {
  if (cudaError_t e = check_ids(stream, ids, n, rows, bad); e != cudaSuccess) return e;
  embedding_bwd_kernel<<<grid_for(rows * dim), kThreads, 0, stream>>>(ids, dy, n, rows, dim,
                                                                      dtable);
  return cudaGetLastError();
}

cudaError_t gather_strided(cudaStream_t stream, const float* x, float* y, int64_t n,
                           BroadcastIndex t) {
  if (n == 0) return cudaSuccess;
  gather_strided_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n, t);
  return cudaGetLastError();
}

}  // namespace lms::cuda::launch
