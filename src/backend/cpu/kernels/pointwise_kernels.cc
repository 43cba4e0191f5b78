// create_pointwise_kernel: every op of docs/ops.md that is not spatial
// (conv*, deconv*, upsample*, max_pool*) nor a swap. The ops live in four
// families (pointwise_common.h); the first that knows the op builds it.
#include "absl/strings/str_cat.h"
#include "backend/cpu/kernels/cpu_kernels.h"
#include "backend/cpu/kernels/pointwise_common.h"
#include "lms/status.h"

namespace lms::cpu {

absl::StatusOr<std::unique_ptr<Kernel>> create_pointwise_kernel(const KernelSpec& spec,
                                                                const CpuKernelContext& ctx) {
  using Factory =
      absl::StatusOr<std::unique_ptr<Kernel>> (*)(const KernelSpec&, const CpuKernelContext&);
  constexpr Factory kFamilies[] = {pointwise::create_elementwise_kernel,
                                   pointwise::create_norm_kernel, pointwise::create_loss_kernel,
                                   pointwise::create_optimizer_kernel};
  try {
    for (Factory family : kFamilies) {
      LMS_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, family(spec, ctx));
      if (kernel) return kernel;
    }
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN failed to create the kernel of node '",
                                            spec.name, "' (op ", spec.op, "): ", e.what()));
  }
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cpu
