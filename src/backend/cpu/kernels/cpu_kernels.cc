#include "backend/cpu/kernels/cpu_kernels.h"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "backend/cpu/blocked_layout.h"
#include "lms/op_kind.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/types.h"
#include "op_schema/op_schema.h"

namespace lms::cpu {

// The CPU backend's dispatch table (docs/ops.md, "Adding an op"). No
// default: a new OpKind does not compile (-Wswitch) until it has a row here.
CpuKernelFamily cpu_kernel_family(OpKind op) {
  switch (op) {
    case OpKind::kConv:
    case OpKind::kConvBwdData:
    case OpKind::kConvBwdWeights:
    case OpKind::kDeconv:
    case OpKind::kDeconvBwdData:
    case OpKind::kDeconvBwdWeights:
    case OpKind::kUpsample:
    case OpKind::kUpsampleBwd:
    case OpKind::kMaxPool:
    case OpKind::kMaxPoolBwd:
    case OpKind::kAvgPool:
    case OpKind::kAvgPoolBwd:
      return CpuKernelFamily::kSpatial;
    case OpKind::kRelu:
    case OpKind::kReluBwd:
    case OpKind::kLeakyRelu:
    case OpKind::kLeakyReluBwd:
    case OpKind::kSigmoid:
    case OpKind::kSigmoidBwd:
    case OpKind::kTanh:
    case OpKind::kTanhBwd:
    case OpKind::kClip:
    case OpKind::kClipBwd:
    case OpKind::kGelu:
    case OpKind::kGeluBwd:
    case OpKind::kHardSigmoid:
    case OpKind::kHardSigmoidBwd:
    case OpKind::kHardSwish:
    case OpKind::kHardSwishBwd:
    case OpKind::kSoftmax:
    case OpKind::kSoftmaxBwd:
    case OpKind::kAttention:
    case OpKind::kAttentionBwd:
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kScale:
    case OpKind::kConcat:
    case OpKind::kSlice:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kFill:
    case OpKind::kCast:
    case OpKind::kDropout:
    case OpKind::kDropoutBwd:
    case OpKind::kEmbedding:
    case OpKind::kEmbeddingBwd:
    case OpKind::kLinear:
    case OpKind::kLinearBwdWeights:
    case OpKind::kMatMul:
      return CpuKernelFamily::kElementwise;
    case OpKind::kInstanceNorm:
    case OpKind::kInstanceNormBwd:
    case OpKind::kBatchNorm:
    case OpKind::kBatchNormBwd:
    case OpKind::kBnStatsUpdate:
    case OpKind::kLayerNorm:
    case OpKind::kLayerNormBwd:
      return CpuKernelFamily::kNorm;
    case OpKind::kMseLoss:
    case OpKind::kMseLossBwd:
    case OpKind::kSoftDiceLoss:
    case OpKind::kSoftDiceLossBwd:
    case OpKind::kSoftmaxCrossEntropy:
    case OpKind::kSoftmaxCrossEntropyBwd:
    case OpKind::kLinearCrossEntropy:
    case OpKind::kLinearCrossEntropyBwd:
    case OpKind::kReduceMean:
    case OpKind::kReduceMeanBwd:
    case OpKind::kSumTo:
      return CpuKernelFamily::kLoss;
    case OpKind::kGlobalNorm:
    case OpKind::kIncrement:
    case OpKind::kSgdUpdate:
    case OpKind::kAdamUpdate:
    case OpKind::kAmpUpdateScale:
      return CpuKernelFamily::kOptimizer;
    case OpKind::kSwapOut:  // copies and collectives run on their own streams
    case OpKind::kSwapIn:
    case OpKind::kAllReduce:
      return CpuKernelFamily::kNone;
  }
  return CpuKernelFamily::kNone;
}

absl::StatusOr<std::unique_ptr<Kernel>> create_cpu_kernel(const KernelSpec& spec,
                                                          const CpuKernelContext& ctx) {
  // The op's one rule, which the graph ran too (op schema); what follows is
  // only what this backend cannot run.
  LMS_RETURN_IF_ERROR(check_spec(spec));
  LMS_RETURN_IF_ERROR(check_float32_kernel(spec, "CPU"));
  LMS_RETURN_IF_ERROR(check_blocked_layout(spec));
  std::unique_ptr<Kernel> kernel;
  try {
    if (cpu_kernel_family(spec.op) == CpuKernelFamily::kSpatial) {
      LMS_ASSIGN_OR_RETURN(kernel, create_spatial_kernel(spec, ctx));
    } else {
      LMS_ASSIGN_OR_RETURN(kernel, create_pointwise_kernel(spec, ctx));
    }
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN failed to create the kernel of node '",
                                            spec.name, "' (op ", op_name(spec.op),
                                            "): ", e.what()));
  }
  if (kernel) return kernel;
  return absl::UnimplementedError(absl::StrCat("the CPU backend has no kernel for op '",
                                               op_name(spec.op), "' (node '", spec.name, "')"));
}

}  // namespace lms::cpu
