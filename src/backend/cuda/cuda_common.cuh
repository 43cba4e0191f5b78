// Shared device-side helpers of the .cu files: grid-stride launch shapes and
// a fixed-shape block tree reduction in double (Note [CUDA kernel
// determinism]).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lms::cuda::detail {

inline constexpr int kThreads = 256;  // threads per block of every kernel here

// Blocks for a grid-stride loop over n elements (capped; each thread loops).
inline int grid_for(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 65535) blocks = 65535;
  return blocks < 1 ? 1 : static_cast<int>(blocks);
}

// Sum of `v` over the block's kThreads threads, valid in thread 0. The tree
// is fixed by kThreads, so the result is deterministic.
__device__ inline double block_sum(double v) {
  __shared__ double buf[kThreads];
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) buf[threadIdx.x] += buf[threadIdx.x + stride];
    __syncthreads();
  }
  double r = buf[0];
  __syncthreads();  // buf may be reused by a following call
  return r;
}

}  // namespace lms::cuda::detail
