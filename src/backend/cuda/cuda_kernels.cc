#include "backend/cuda/cuda_kernels.h"

#include "absl/strings/str_cat.h"
#include "lms/op_kind.h"
#include "lms/status.h"
#include "op_schema/op_schema.h"

namespace lms::cuda {

namespace {

using Factory = absl::StatusOr<std::unique_ptr<Kernel>> (*)(const KernelSpec&,
                                                            const CudaKernelContext&);

// The CUDA backend's dispatch table (docs/ops.md, "Adding an op"). No
// default: a new OpKind does not compile (-Wswitch) until it has a row here.
Factory cuda_kernel_factory(OpKind op) {
  switch (op) {
    case OpKind::kConv:
    case OpKind::kConvBwdData:
    case OpKind::kConvBwdWeights:
    case OpKind::kDeconv:
    case OpKind::kDeconvBwdData:
    case OpKind::kDeconvBwdWeights:
      return &create_cuda_conv_kernel;
    case OpKind::kLinear:
    case OpKind::kLinearBwdWeights:
    case OpKind::kMatMul:
      return &create_cuda_linear_kernel;
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
      return &create_cuda_elementwise_kernel;
    case OpKind::kMseLoss:
    case OpKind::kMseLossBwd:
    case OpKind::kSoftDiceLoss:
    case OpKind::kSoftDiceLossBwd:
    case OpKind::kSoftmaxCrossEntropy:
    case OpKind::kSoftmaxCrossEntropyBwd:
    case OpKind::kReduceMean:
    case OpKind::kReduceMeanBwd:
    case OpKind::kSumTo:
    case OpKind::kGlobalNorm:
    case OpKind::kIncrement:
    case OpKind::kSgdUpdate:
    case OpKind::kAdamUpdate:
    case OpKind::kAmpUpdateScale:
      return &create_cuda_reduction_kernel;
    case OpKind::kUpsample:
    case OpKind::kUpsampleBwd:
    case OpKind::kMaxPool:
    case OpKind::kMaxPoolBwd:
    case OpKind::kAvgPool:
    case OpKind::kAvgPoolBwd:
    case OpKind::kInstanceNorm:
    case OpKind::kInstanceNormBwd:
    case OpKind::kBatchNorm:
    case OpKind::kBatchNormBwd:
    case OpKind::kBnStatsUpdate:
      return &create_cuda_spatial_kernel;
    case OpKind::kLayerNorm:
    case OpKind::kLayerNormBwd:
      return &create_cuda_layer_norm_kernel;
    case OpKind::kAttention:
    case OpKind::kAttentionBwd:
      return &create_cuda_attention_kernel;
    case OpKind::kSwapOut:  // copies and collectives run on their own streams
    case OpKind::kSwapIn:
    case OpKind::kAllReduce:
    // No CUDA kernel yet: the CUDA lowering keeps the head and the loss
    // apart (Note [Chunked language-model head]).
    case OpKind::kLinearCrossEntropy:
    case OpKind::kLinearCrossEntropyBwd:
      return nullptr;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> create_cuda_kernel(const KernelSpec& spec,
                                                           const CudaKernelContext& ctx) {
  // The op's one rule, which the graph ran too (op schema); the kernels
  // check only what this backend cannot run.
  LMS_RETURN_IF_ERROR(check_spec(spec));
  LMS_RETURN_IF_ERROR(check_float32_kernel(spec, "CUDA"));
  if (Factory factory = cuda_kernel_factory(spec.op)) {
    LMS_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, factory(spec, ctx));
    if (kernel) return kernel;
  }
  return absl::UnimplementedError(absl::StrCat("node '", spec.name,
                                               "': the CUDA backend has no "
                                               "kernel for op '",
                                               op_name(spec.op), "'"));
}

}  // namespace lms::cuda
