// layer_norm and layer_norm_bwd of docs/ops.md for the CUDA device, over the
// launchers of cuda_layer_norm.cu (one block per row, deterministic tree
// sums in double; no cuDNN, so the semantics are exactly the CPU device's:
// biased variance over the last axis). The spec has passed the op schema's
// rule at the dispatch; layer_norm_dims reads its problem.
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

absl::StatusOr<std::unique_ptr<Kernel>> create_cuda_layer_norm_kernel(
    const KernelSpec& spec, const CudaKernelContext& ctx) {
  if (spec.op != OpKind::kLayerNorm && spec.op != OpKind::kLayerNormBwd) {
    return std::unique_ptr<Kernel>();
  }
  const bool backward = spec.op == OpKind::kLayerNormBwd;
  LMS_ASSIGN_OR_RETURN(LayerNormDims d, layer_norm_dims(spec));
  const std::string what = node_label(spec);
  cudaStream_t st = ctx.stream;
  if (!backward) {
    return make_fn_kernel([=](const KernelArgs& a) {
      return cuda_status(launch::layer_norm_fwd(st, a.inputs[0], a.inputs[1], a.inputs[2], d.rows,
                                                d.cols, d.eps, a.outputs[0]),
                         what);
    });
  }
  const uint64_t ws =
      static_cast<uint64_t>(launch::layer_norm_bwd_workspace_doubles(d.rows, d.cols)) *
      sizeof(double);
  return make_fn_kernel(
      [=](const KernelArgs& a) {
        return cuda_status(launch::layer_norm_bwd(st, a.inputs[0], a.inputs[1], a.inputs[2], d.rows,
                                                  d.cols, d.eps, static_cast<double*>(a.workspace),
                                                  a.outputs[0], a.outputs[1], a.outputs[2]),
                           what);
      },
      ws);
}

}  // namespace lms::cuda
