#include "backend/cpu/kernels/cpu_kernels.h"

#include "absl/strings/str_cat.h"
#include "lms/status.h"

namespace lms::cpu {

absl::StatusOr<std::unique_ptr<Kernel>> create_cpu_kernel(const KernelSpec& spec,
                                                          const CpuKernelContext& ctx) {
  try {
    LMS_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> spatial, create_spatial_kernel(spec, ctx));
    if (spatial) return spatial;
    LMS_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> pointwise, create_pointwise_kernel(spec, ctx));
    if (pointwise) return pointwise;
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN failed to create the kernel of node '",
                                            spec.name, "' (op ", spec.op, "): ", e.what()));
  }
  return absl::UnimplementedError(absl::StrCat("the CPU backend has no kernel for op '", spec.op,
                                               "' (node '", spec.name, "')"));
}

}  // namespace lms::cpu
