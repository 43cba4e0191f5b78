// Kernels of the emulated CPU device, on oneDNN primitives (plain loops only
// where oneDNN has nothing). Each op of docs/ops.md maps to one Kernel; the
// primitives are created once in the factory and executed every step.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "backend/kernel.h"
#include "dnnl.hpp"
#include "lms/device.h"

namespace lms::cpu {

// Shared by every kernel of one device. Kernels run only on the device's
// compute-stream thread, so one oneDNN stream is enough.
struct CpuKernelContext {
  dnnl::engine engine;
  dnnl::stream stream;
  CpuConvAlgorithm conv_algorithm = CpuConvAlgorithm::kAuto;
};

// Compiles the kernel for spec.op. Unimplemented for an op no kernel covers;
// InvalidArgument (naming spec.name) for shapes or attributes it rejects.
// dnnl::error is caught here and turned into a Status.
absl::StatusOr<std::unique_ptr<Kernel>> create_cpu_kernel(const KernelSpec& spec,
                                                          const CpuKernelContext& ctx);

// The two families behind create_cpu_kernel. Each returns a null kernel (not
// an error) for an op that is not its own.
// conv, conv_bwd_data, conv_bwd_weights, deconv*, upsample*, max_pool*.
absl::StatusOr<std::unique_ptr<Kernel>> create_spatial_kernel(const KernelSpec& spec,
                                                              const CpuKernelContext& ctx);
// Element-wise, activations, concat/slice/fill, normalisation, losses,
// reductions, optimizer updates.
absl::StatusOr<std::unique_ptr<Kernel>> create_pointwise_kernel(const KernelSpec& spec,
                                                                const CpuKernelContext& ctx);

}  // namespace lms::cpu
