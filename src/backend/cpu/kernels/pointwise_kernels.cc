// create_pointwise_kernel: every op of docs/ops.md that is not spatial
// (conv*, deconv*, upsample*, max_pool*) nor a swap. The ops live in four
// families (pointwise_common.h); cpu_kernel_family picks the one.
#include "absl/strings/str_cat.h"
#include "backend/cpu/kernels/cpu_kernels.h"
#include "backend/cpu/kernels/pointwise_common.h"
#include "lms/op_kind.h"
#include "lms/status.h"
#include "lms/strings.h"

namespace lms::cpu {

absl::StatusOr<std::unique_ptr<Kernel>> create_pointwise_kernel(const KernelSpec& spec,
                                                                const CpuKernelContext& ctx) {
  try {
    switch (cpu_kernel_family(spec.op)) {
      case CpuKernelFamily::kElementwise:
        return pointwise::create_elementwise_kernel(spec, ctx);
      case CpuKernelFamily::kNorm:
        return pointwise::create_norm_kernel(spec, ctx);
      case CpuKernelFamily::kLoss:
        return pointwise::create_loss_kernel(spec, ctx);
      case CpuKernelFamily::kOptimizer:
        return pointwise::create_optimizer_kernel(spec, ctx);
      case CpuKernelFamily::kSpatial:
      case CpuKernelFamily::kNone:
        break;
    }
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN failed to create the kernel of node '",
                                            spec.name, "' (op ", op_name(spec.op),
                                            "): ", e.what()));
  }
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cpu
