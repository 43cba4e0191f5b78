#include "backend/cuda/cuda_kernels.h"

#include "absl/strings/str_cat.h"
#include "lms/status.h"

namespace lms::cuda {

absl::StatusOr<std::unique_ptr<Kernel>> create_cuda_kernel(const KernelSpec& spec,
                                                           const CudaKernelContext& ctx) {
  using Factory =
      absl::StatusOr<std::unique_ptr<Kernel>> (*)(const KernelSpec&, const CudaKernelContext&);
  for (Factory factory : {&create_cuda_conv_kernel, &create_cuda_elementwise_kernel,
                          &create_cuda_reduction_kernel, &create_cuda_spatial_kernel}) {
    LMS_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, factory(spec, ctx));
    if (kernel) return kernel;
  }
  return absl::UnimplementedError(absl::StrCat("node '", spec.name,
                                               "': the CUDA backend has no "
                                               "kernel for op '",
                                               spec.op, "'"));
}

}  // namespace lms::cuda
