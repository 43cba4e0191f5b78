// Kernels of the CUDA device: one Kernel per op of docs/ops.md. Each is
// created once (descriptors, algorithm choice) and its run() enqueues work on
// the compute stream of the context it was created with; run() returns only
// enqueue-time errors (execution errors surface at Device::synchronize()).
//
//   CudaKernelContext ctx = device.kernel_context();
//   LMS_ASSIGN_OR_RETURN(auto k, create_cuda_kernel(spec, ctx));   // once
//   LMS_RETURN_IF_ERROR(k->run({{x, w}, {y}, workspace}));          // every step
//
// Note [CUDA kernel determinism]: every kernel gives bit-identical results
// for identical inputs: convolutions use fixed deterministic cuDNN algorithms
// (Note [Convolution algorithm choice]), and every reduction is a fixed-shape tree in double
// precision with no atomics: how many blocks share a sum, which elements each block and thread adds
// and in what order are functions of the shape alone, never of the GPU model, its SM count, pointer
// alignment or timing (Note [Grouped reduction plan] for the per-channel and per-group sums).
// Results differ from the CPU device's within float rounding (different summation order), not bit
// for bit.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "backend/kernel.h"

namespace lms::cuda {

struct CudaKernelContext {
  cudaStream_t stream = nullptr;  // the device's compute stream
  cudnnHandle_t cudnn = nullptr;  // bound to `stream`
  // The cuDNN workspace (bytes) a convolution's algorithm should stay within;
  // exceeded only where no deterministic algorithm is within it (Note
  // [Convolution algorithm choice]).
  uint64_t max_conv_workspace_bytes = uint64_t{256} << 20;
};

// Compiles the kernel for spec.op. Unimplemented naming the op when the CUDA
// backend lacks it; InvalidArgument (naming spec.name) for shapes or
// attributes that contradict docs/ops.md; Internal/Unimplemented when cuDNN
// refuses the problem.
absl::StatusOr<std::unique_ptr<Kernel>> create_cuda_kernel(const KernelSpec& spec,
                                                           const CudaKernelContext& ctx);

// The families behind create_cuda_kernel (its dispatch table picks one by
// OpKind); each returns a null kernel for an op that is not its own.
// conv, conv_bwd_data, conv_bwd_weights, deconv, deconv_bwd_data, deconv_bwd_weights.
absl::StatusOr<std::unique_ptr<Kernel>> create_cuda_conv_kernel(const KernelSpec& spec,
                                                                const CudaKernelContext& ctx);
// linear, linear_bwd_weights, matmul (cuBLAS).
absl::StatusOr<std::unique_ptr<Kernel>> create_cuda_linear_kernel(const KernelSpec& spec,
                                                                  const CudaKernelContext& ctx);
// relu, leaky_relu, sigmoid, softmax (+ _bwd), add, mul, scale, concat, slice, fill.
absl::StatusOr<std::unique_ptr<Kernel>> create_cuda_elementwise_kernel(
    const KernelSpec& spec, const CudaKernelContext& ctx);
// mse_loss, soft_dice_loss, softmax_cross_entropy, reduce_mean (+ _bwd),
// global_norm, increment, sgd_update, adam_update.
absl::StatusOr<std::unique_ptr<Kernel>> create_cuda_reduction_kernel(const KernelSpec& spec,
                                                                     const CudaKernelContext& ctx);
// layer_norm (+ _bwd) (cuda_layer_norm_kernels.cc).
absl::StatusOr<std::unique_ptr<Kernel>> create_cuda_layer_norm_kernel(const KernelSpec& spec,
                                                                      const CudaKernelContext& ctx);
// attention (+ _bwd) (cuda_attention_kernels.cc).
absl::StatusOr<std::unique_ptr<Kernel>> create_cuda_attention_kernel(const KernelSpec& spec,
                                                                     const CudaKernelContext& ctx);
// instance_norm, batch_norm (+ _bwd), max_pool, avg_pool, upsample (+ _bwd).
absl::StatusOr<std::unique_ptr<Kernel>> create_cuda_spatial_kernel(const KernelSpec& spec,
                                                                   const CudaKernelContext& ctx);

}  // namespace lms::cuda
