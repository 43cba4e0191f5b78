// Softmax cross-entropy with int64 class labels (cuda_launch.h): one block
// per row of logits[N,C] for its log-sum-exp (a block maximum, then the
// exponentials summed in double by the fixed tree of detail::block_sum),
// one block for the mean over the rows, and one thread per logit for the
// gradient. No atomics in any result (Note [CUDA kernel determinism]); the
// label check's atomicMin only finds the first bad position.
#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"

namespace lms::cuda::launch {
namespace {

using detail::block_sum;
using detail::grid_for;
using detail::kThreads;

constexpr int kMaxRowBlocks = 65535;

__device__ bool counted(int64_t label, const CrossEntropyView& v) {
  return label != v.ignore_index && label >= 0 && label < v.c;
}

// The largest of `v` over the block, in every thread (a maximum does not
// depend on the order it is taken in).
__device__ float block_max(float v) {
  __shared__ float buf[kThreads];
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) buf[threadIdx.x] = fmaxf(buf[threadIdx.x], buf[threadIdx.x + stride]);
    __syncthreads();
  }
  const float r = buf[0];
  __syncthreads();  // buf may be reused by a following call
  return r;
}

// *bad = the smallest position whose label is outside [0, C) and not
// ignore_index (*bad starts at N).
__global__ void check_labels_kernel(const int64_t* labels, CrossEntropyView v,
                                    unsigned long long* bad) {
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < v.n;
       p += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    if (labels[p] != v.ignore_index && (labels[p] < 0 || labels[p] >= v.c)) {
      atomicMin(bad, static_cast<unsigned long long>(p));
    }
  }
}

__global__ void set_kernel(unsigned long long* bad, int64_t n) {
  *bad = static_cast<unsigned long long>(n);
}

// lse[n] = log Σ_c exp(x[n,c]) around the row's maximum; row_loss[n] =
// lse[n] - x[n, label] for a counted row, 0 otherwise.
__global__ void rows_kernel(const float* x, const int64_t* labels, CrossEntropyView v, double* lse,
                            double* row_loss) {
  for (int64_t row = blockIdx.x; row < v.n; row += gridDim.x) {
    const float* xr = x + row * v.c;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < v.c; j += kThreads) m = fmaxf(m, xr[j]);
    m = block_max(m);
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < v.c; j += kThreads) {
      s += exp(static_cast<double>(xr[j]) - m);
    }
    s = block_sum(s);
    if (threadIdx.x == 0) {
      const double l = static_cast<double>(m) + log(s);
      const int64_t label = labels[row];
      lse[row] = l;
      row_loss[row] = counted(label, v) ? l - static_cast<double>(xr[label]) : 0.0;
    }
  }
}

// *count = M, the counted rows; loss (when not null) = Σ row_loss / M, NaN
// for M = 0. One block, rows in a fixed per-thread order and tree.
__global__ void mean_kernel(const double* row_loss, const int64_t* labels, CrossEntropyView v,
                            double* count, float* loss) {
  double acc = 0.0, rows = 0.0;
  for (int64_t i = threadIdx.x; i < v.n; i += kThreads) {
    if (counted(labels[i], v)) {
      acc += row_loss[i];
      rows += 1.0;
    }
  }
  acc = block_sum(acc);
  rows = block_sum(rows);
  if (threadIdx.x == 0) {
    *count = rows;
    if (loss != nullptr) loss[0] = rows == 0.0 ? NAN : static_cast<float>(acc / rows);
  }
}

// g[n,c] = (exp(x[n,c] - lse[n]) - [c == label]) · dloss / M on counted
// rows, 0 elsewhere.
__global__ void grad_kernel(const float* x, const int64_t* labels, CrossEntropyView v,
                            const double* lse, const double* count, const float* dloss, float* g) {
  const double rows = *count;
  const double scale = rows == 0.0 ? 0.0 : static_cast<double>(*dloss) / rows;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < v.n * v.c;
       k += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t row = k / v.c, j = k % v.c;
    const int64_t label = labels[row];
    if (!counted(label, v)) {
      g[k] = 0.0f;
      continue;
    }
    const double p = exp(static_cast<double>(x[k]) - lse[row]);
    g[k] = static_cast<float>((p - (j == label ? 1.0 : 0.0)) * scale);
  }
}

}  // namespace

cudaError_t cross_entropy_rows(cudaStream_t stream, const float* logits, const int64_t* labels,
                               CrossEntropyView v, double* lse, double* row_loss, double* count,
                               float* loss, unsigned long long* bad) {
  set_kernel<<<1, 1, 0, stream>>>(bad, v.n);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  check_labels_kernel<<<grid_for(v.n), kThreads, 0, stream>>>(labels, v, bad);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int blocks = static_cast<int>(v.n < kMaxRowBlocks ? v.n : kMaxRowBlocks);
  rows_kernel<<<blocks, kThreads, 0, stream>>>(logits, labels, v, lse, row_loss);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  mean_kernel<<<1, kThreads, 0, stream>>>(row_loss, labels, v, count, loss);
  return cudaGetLastError();
}

cudaError_t cross_entropy_bwd(cudaStream_t stream, const float* logits, const int64_t* labels,
                              CrossEntropyView v, const double* lse, const double* count,
                              const float* dloss, float* dlogits) {
  grad_kernel<<<grid_for(v.n * v.c), kThreads, 0, stream>>>(logits, labels, v, lse, count, dloss,
                                                            dlogits);
  return cudaGetLastError();
}

}  // namespace lms::cuda::launch
