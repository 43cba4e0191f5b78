// layer_norm and layer_norm_bwd of docs/ops.md for the CUDA device
// (cuda_launch.h). x is [rows, cols], normalised over each row. One block
// per row for the row statistics and dx: every thread sums its strided
// elements in double in index order, then detail::block_sum adds the
// kThreads partials in a fixed tree. dgamma / dbeta are column sums over
// the rows in two passes over fixed chunks of rows. No atomics, so every
// result is the same on every run (Note [CUDA kernel determinism]).
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"

namespace lms::cuda::launch {
namespace {

using detail::block_sum;
using detail::grid_for;
using detail::kThreads;

// Rows per chunk of the parameter-gradient column sums (a fixed number, so
// the summation order depends on the shape only).
constexpr int64_t kRowsPerChunk = 64;

int row_blocks(int64_t rows) { return static_cast<int>(rows < 65535 ? rows : 65535); }

struct RowStats {
  double mean, rstd;
};

// The row's mean and 1/sqrt(biased variance + eps), the same in every
// thread of the block; every thread must call it.
__device__ RowStats row_stats(const float* x, int64_t cols, double eps) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) sum += x[i];
  const double mean = block_sum(sum) / static_cast<double>(cols);
  double sq = 0.0;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const double d = x[i] - mean;
    sq += d * d;
  }
  const double var = block_sum(sq) / static_cast<double>(cols);
  return {mean, 1.0 / sqrt(var + eps)};
}

__global__ void layer_norm_fwd_kernel(const float* x, const float* gamma, const float* beta,
                                      int64_t rows, int64_t cols, double eps, float* y) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    const RowStats st = row_stats(xr, cols, eps);
    float* yr = y + r * cols;
    for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
      yr[i] = static_cast<float>((xr[i] - st.mean) * st.rstd * gamma[i] + beta[i]);
    }
  }
}

// dx = rstd * (g*dy - mean(g*dy) - xhat * mean(g*dy*xhat)) per row; the
// row's mean and rstd go to stats[2r], stats[2r + 1] for the column sums.
__global__ void layer_norm_dx_kernel(const float* x, const float* gamma, const float* dy,
                                     int64_t rows, int64_t cols, double eps, double* stats,
                                     float* dx) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    const RowStats st = row_stats(xr, cols, eps);
    double s1 = 0.0, s2 = 0.0;
    for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
      const double gdy = static_cast<double>(gamma[i]) * dyr[i];
      s1 += gdy;
      s2 += gdy * (xr[i] - st.mean) * st.rstd;
    }
    const double mean_gdy = block_sum(s1) / static_cast<double>(cols);
    const double mean_gdy_xhat = block_sum(s2) / static_cast<double>(cols);
    float* dxr = dx + r * cols;
    for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
      const double xhat = (xr[i] - st.mean) * st.rstd;
      const double gdy = static_cast<double>(gamma[i]) * dyr[i];
      dxr[i] = static_cast<float>(st.rstd * (gdy - mean_gdy - xhat * mean_gdy_xhat));
    }
    if (threadIdx.x == 0) {
      stats[2 * r] = st.mean;
      stats[2 * r + 1] = st.rstd;
    }
  }
}

// Pass 1: partial[k, c] = sums over the rows of chunk k, in row order, of
// dy*xhat (dgamma) and dy (dbeta); one thread per (chunk, column).
__global__ void layer_norm_param_partials_kernel(const float* x, const float* dy,
                                                 const double* stats, int64_t rows, int64_t cols,
                                                 int64_t chunks, double* pg, double* pb) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < chunks * cols;
       j += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t k = j / cols, c = j % cols;
    const int64_t end = (k + 1) * kRowsPerChunk < rows ? (k + 1) * kRowsPerChunk : rows;
    double g = 0.0, b = 0.0;
    for (int64_t r = k * kRowsPerChunk; r < end; ++r) {
      const double d = dy[r * cols + c];
      g += d * (x[r * cols + c] - stats[2 * r]) * stats[2 * r + 1];
      b += d;
    }
    pg[j] = g;
    pb[j] = b;
  }
}

// Pass 2: dgamma[c], dbeta[c] = the chunk partials summed in chunk order.
__global__ void layer_norm_param_finish_kernel(const double* pg, const double* pb, int64_t cols,
                                               int64_t chunks, float* dgamma, float* dbeta) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < cols;
       c += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    double g = 0.0, b = 0.0;
    for (int64_t k = 0; k < chunks; ++k) {
      g += pg[k * cols + c];
      b += pb[k * cols + c];
    }
    dgamma[c] = static_cast<float>(g);
    dbeta[c] = static_cast<float>(b);
  }
}

}  // namespace

int64_t layer_norm_bwd_workspace_doubles(int64_t rows, int64_t cols) {
  const int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  return 2 * rows + 2 * chunks * cols;
}

cudaError_t layer_norm_fwd(cudaStream_t stream, const float* x, const float* gamma,
                           const float* beta, int64_t rows, int64_t cols, double eps, float* y) {
  layer_norm_fwd_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(x, gamma, beta, rows, cols, eps,
                                                                   y);
  return cudaGetLastError();
}

cudaError_t layer_norm_bwd(cudaStream_t stream, const float* x, const float* gamma, const float* dy,
                           int64_t rows, int64_t cols, double eps, double* workspace, float* dx,
                           float* dgamma, float* dbeta) {
  const int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  double* stats = workspace;
  double* pg = stats + 2 * rows;
  double* pb = pg + chunks * cols;
  layer_norm_dx_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(x, gamma, dy, rows, cols, eps,
                                                                  stats, dx);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  layer_norm_param_partials_kernel<<<grid_for(chunks * cols), kThreads, 0, stream>>>(
      x, dy, stats, rows, cols, chunks, pg, pb);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  layer_norm_param_finish_kernel<<<grid_for(cols), kThreads, 0, stream>>>(pg, pb, cols, chunks,
                                                                          dgamma, dbeta);
  return cudaGetLastError();
}

}  // namespace lms::cuda::launch
