// Spatial kernels of the emulated CPU device (conv, conv_bwd_data,
// conv_bwd_weights, deconv*, upsample*, max_pool*; docs/ops.md), on oneDNN 2.6.
//
//   CpuKernelContext ctx{dnnl::engine(dnnl::engine::kind::cpu, 0), ...};
//   LMS_ASSIGN_OR_RETURN(auto k, create_spatial_kernel(spec, ctx));   // once
//   void* ws = allocate(k->workspace_bytes());
//   LMS_RETURN_IF_ERROR(k->run({{x, w}, {y}, ws}));                     // every step
//
// Tensors are plain float NCHW / NCDHW buffers. Convolutions run on oneDNN's
// blocked layouts where that pays (ConvLayout::kAuto) and on Winograd where
// oneDNN picks it, or lms's own below AVX-512 (ConvAlgorithm::kAuto;
// winograd.h); the reorders from and to the plain
// buffers and every oneDNN scratchpad live in the workspace, so
// workspace_bytes() is all the device memory the kernel touches besides its
// inputs and outputs. Outputs are bit-identical across runs for a fixed
// thread count. Measured choices: bench/conv_bench.cc.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "backend/cpu/kernels/cpu_kernels.h"
#include "backend/kernel.h"
#include "lms/device.h"

namespace lms::cpu {

enum class ConvLayout {
  kAuto,     // per pass, whichever measured faster: blocked for backward
             // weights and wherever the channels fill 16-wide blocks, plain
             // otherwise (Note [Conv layouts])
  kBlocked,  // format_tag::any, reorders from/to the plain user buffers in run()
  kPlain,    // primitives on the plain buffers directly, no reorders
};

// The conv algorithm: the public CpuConvAlgorithm (lms/device.h). kAuto is
// Winograd F(4x4,3x3) where oneDNN picks it (AVX-512;
// Note [Conv algorithm]) or, where oneDNN has none, lms's (winograd.h;
// Note [lms Winograd]); kDirect always oneDNN's direct convolution;
// kWinograd lms's wherever it applies.
using ConvAlgorithm = CpuConvAlgorithm;

struct SpatialKernelOptions {
  ConvLayout conv_layout = ConvLayout::kAuto;
  ConvAlgorithm conv_algorithm = ConvAlgorithm::kAuto;
};

// As create_spatial_kernel(spec, ctx) (cpu_kernels.h), with explicit options.
// Null kernel for an op that is not spatial; InvalidArgument naming spec.name
// for shapes/attributes that contradict docs/ops.md; InternalError when oneDNN
// refuses the problem.
absl::StatusOr<std::unique_ptr<Kernel>> create_spatial_kernel(const KernelSpec& spec,
                                                              const CpuKernelContext& ctx,
                                                              const SpatialKernelOptions& options);

// The per-family factories behind it (null kernel for an op not theirs).
absl::StatusOr<std::unique_ptr<Kernel>> create_conv_kernel(const KernelSpec& spec,
                                                           const CpuKernelContext& ctx,
                                                           const SpatialKernelOptions& options);
absl::StatusOr<std::unique_ptr<Kernel>> create_upsample_kernel(const KernelSpec& spec,
                                                               const CpuKernelContext& ctx);
// max_pool, avg_pool (+ _bwd).
absl::StatusOr<std::unique_ptr<Kernel>> create_pool_kernel(const KernelSpec& spec,
                                                           const CpuKernelContext& ctx);

}  // namespace lms::cpu
