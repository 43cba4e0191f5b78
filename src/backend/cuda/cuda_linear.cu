// The bias steps of linear and linear_bwd_weights for the CUDA device
// (cuda_launch.h); the matrix products are cuBLAS (cuda_linear_kernels.cc).
// Each output element is written by one thread that reads its inputs in a
// fixed order (Note [CUDA kernel determinism]).
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"

namespace lms::cuda::launch {
namespace {

using detail::grid_for;
using detail::kThreads;

// y[r, k] = b[k] for r < rows.
__global__ void broadcast_rows_kernel(const float* b, int64_t rows, int64_t cols, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * cols;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    y[i] = b[i % cols];
  }
}

// s[k] = float(sum over r, in order, of double(x[r, k])).
__global__ void column_sum_kernel(const float* x, int64_t rows, int64_t cols, float* s) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < cols;
       k += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    double acc = 0.0;
    for (int64_t r = 0; r < rows; ++r) acc += x[r * cols + k];
    s[k] = static_cast<float>(acc);
  }
}

}  // namespace

cudaError_t broadcast_rows(cudaStream_t stream, const float* b, int64_t rows, int64_t cols,
                           float* y) {
  broadcast_rows_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(b, rows, cols, y);
  return cudaGetLastError();
}

cudaError_t column_sum(cudaStream_t stream, const float* x, int64_t rows, int64_t cols, float* s) {
  column_sum_kernel<<<grid_for(cols), kThreads, 0, stream>>>(x, rows, cols, s);
  return cudaGetLastError();
}

}  // namespace lms::cuda::launch
