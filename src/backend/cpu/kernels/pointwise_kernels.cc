// Placeholder until the pointwise kernels land: no op is handled yet.
#include "backend/cpu/kernels/cpu_kernels.h"

namespace lms::cpu {

absl::StatusOr<std::unique_ptr<Kernel>> create_pointwise_kernel(const KernelSpec&,
                                                              const CpuKernelContext&) {
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cpu
