// attention and attention_bwd of docs/ops.md for the CUDA device, over the
// launchers of cuda_attention.cu (own kernels, sums in double in a fixed
// order, no atomics: the same results on every run). The spec has passed the
// op schema's rule at the dispatch; attention_dims reads its problem.
#include <memory>
#include <string>

#include "backend/cuda/cuda_fn_kernel.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/cuda_status.h"
#include "lms/status.h"
#include "op_schema/op_dims.h"
#include "op_schema/spec_checks.h"

namespace lms::cuda {

absl::StatusOr<std::unique_ptr<Kernel>> create_cuda_attention_kernel(const KernelSpec& spec,
                                                                     const CudaKernelContext& ctx) {
  if (spec.op != OpKind::kAttention && spec.op != OpKind::kAttentionBwd) {
    return std::unique_ptr<Kernel>();
  }
  const bool backward = spec.op == OpKind::kAttentionBwd;
  LMS_ASSIGN_OR_RETURN(AttentionDims d, attention_dims(spec));
  const launch::AttentionShape shape = {d.heads, d.t, d.s, d.d, d.scale, d.causal};
  const std::string what = node_label(spec);
  cudaStream_t st = ctx.stream;
  if (!backward) {
    const uint64_t ws =
        static_cast<uint64_t>(launch::attention_fwd_workspace_doubles(shape)) * sizeof(double);
    return make_fn_kernel(
        [=](const KernelArgs& a) {
          return cuda_status(
              launch::attention_fwd(st, shape, a.inputs[0], a.inputs[1], a.inputs[2],
                                    static_cast<double*>(a.workspace), a.outputs[0], a.outputs[1]),
              what);
        },
        ws);
  }
  const uint64_t ws =
      static_cast<uint64_t>(launch::attention_bwd_workspace_floats(shape)) * sizeof(float);
  return make_fn_kernel(
      [=](const KernelArgs& a) {
        return cuda_status(
            launch::attention_bwd(st, shape, a.inputs[0], a.inputs[1], a.inputs[2], a.inputs[3],
                                  a.inputs[4], a.inputs[5], static_cast<float*>(a.workspace),
                                  a.outputs[0], a.outputs[1], a.outputs[2]),
            what);
      },
      ws);
}

}  // namespace lms::cuda
