// Kernels of the emulated CPU device, on oneDNN primitives (plain loops only
// where oneDNN has nothing). Each op of docs/ops.md maps to one Kernel; the
// primitives are created once in the factory and executed every step.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "backend/kernel.h"
#include "dnnl.hpp"
#include "lms/device.h"
#include "lms/op_kind.h"

namespace lms::cpu {

// Shared by every kernel of one device. Kernels run only on the device's
// compute-stream thread, so one oneDNN stream is enough.
struct CpuKernelContext {
  dnnl::engine engine;
  dnnl::stream stream;
  CpuConvAlgorithm conv_algorithm = CpuConvAlgorithm::kAuto;
};

// Which factory builds an op's kernel: the CPU backend's dispatch table,
// keyed by OpKind (kNone: swap and collective ops, which have no kernel).
enum class CpuKernelFamily : uint8_t { kNone, kSpatial, kElementwise, kNorm, kLoss, kOptimizer };
CpuKernelFamily cpu_kernel_family(OpKind op);

// Compiles the kernel for spec.op. Unimplemented for an op no kernel covers;
// InvalidArgument (naming spec.name) for shapes or attributes it rejects.
// dnnl::error is caught here and turned into a Status.
absl::StatusOr<std::unique_ptr<Kernel>> create_cpu_kernel(const KernelSpec& spec,
                                                          const CpuKernelContext& ctx);

// The two halves behind create_cpu_kernel, by cpu_kernel_family. Each
// returns a null kernel (not an error) for an op that is not its own.
// conv, conv_bwd_data, conv_bwd_weights, deconv*, upsample*, max_pool*.
absl::StatusOr<std::unique_ptr<Kernel>> create_spatial_kernel(const KernelSpec& spec,
                                                              const CpuKernelContext& ctx);
// Element-wise, activations, concat/slice/fill, normalisation, losses,
// reductions, optimizer updates.
absl::StatusOr<std::unique_ptr<Kernel>> create_pointwise_kernel(const KernelSpec& spec,
                                                                const CpuKernelContext& ctx);

}  // namespace lms::cpu
