// The spatial kernel factory, and the upsample, max_pool and avg_pool kernels (oneDNN
// resampling and pooling on the plain layouts: both are memory-bound, so a
// reorder to a blocked layout would cost more than it saves).
#include "backend/cpu/kernels/spatial_kernels.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/kernels/spatial_plan.h"
#include "lms/status.h"
#include "op_schema/op_dims.h"
#include "op_schema/spec_checks.h"

namespace lms::cpu {
namespace {

using dnnl::memory;

// ---- upsample / upsample_bwd ----

using UpsampleProblem = UpsampleDims;

dnnl::algorithm upsample_algorithm(const UpsampleDims& d) {
  return d.linear ? dnnl::algorithm::resampling_linear : dnnl::algorithm::resampling_nearest;
}

std::unique_ptr<Kernel> make_upsample(const KernelSpec& spec, const CpuKernelContext& ctx,
                                      const UpsampleProblem& p) {
  memory::desc x_md = plain_desc(p.x), y_md = plain_desc(p.y);
  const dnnl::algorithm alg = upsample_algorithm(p);
  dnnl::resampling_forward::desc fwd_desc(dnnl::prop_kind::forward_training, alg, x_md, y_md);
  PlanBuilder b(spec.name, ctx);
  if (spec.op == OpKind::kUpsample) {
    dnnl::resampling_forward::primitive_desc pd(fwd_desc, user_scratchpad_attr(), ctx.engine);
    b.add_step(dnnl::resampling_forward(pd),
               {{DNNL_ARG_SRC, b.bind_input(0, x_md, pd.src_desc()), pd.src_desc()},
                {DNNL_ARG_DST, b.bind_output(0, y_md, pd.dst_desc()), pd.dst_desc()}},
               pd.scratchpad_desc());
    return b.finish();
  }
  dnnl::resampling_forward::primitive_desc hint(fwd_desc, ctx.engine);
  dnnl::resampling_backward::desc desc(alg, x_md, y_md);
  dnnl::resampling_backward::primitive_desc pd(desc, user_scratchpad_attr(), ctx.engine, hint);
  b.add_step(dnnl::resampling_backward(pd),
             {{DNNL_ARG_DIFF_DST, b.bind_input(0, y_md, pd.diff_dst_desc()), pd.diff_dst_desc()},
              {DNNL_ARG_DIFF_SRC, b.bind_output(0, x_md, pd.diff_src_desc()), pd.diff_src_desc()}},
             pd.scratchpad_desc());
  return b.finish();
}

// ---- max_pool / max_pool_bwd ----

// A pool_dims (op_dims.h) in oneDNN's dims.
struct PoolProblem {
  Shape x, y;
  memory::dims kernel, stride, pad, pad_end;
  bool count_include_pad = true;
};

absl::StatusOr<PoolProblem> pool_problem(const KernelSpec& spec) {
  LMS_ASSIGN_OR_RETURN(const PoolDims d, pool_dims(spec));
  return PoolProblem{d.x,
                     d.y,
                     memory::dims(d.kernel.begin(), d.kernel.end()),
                     memory::dims(d.stride.begin(), d.stride.end()),
                     memory::dims(d.pad.begin(), d.pad.end()),
                     memory::dims(d.pad_end.begin(), d.pad_end.end()),
                     d.count_include_pad};
}

// max_pool_bwd re-runs the forward pass (training mode) on x to get oneDNN's
// argmax workspace; y and that workspace are slices of the kernel workspace.
// Ties go to the first maximum in window order, as oneDNN's forward keeps the
// running maximum on a strict comparison.
std::unique_ptr<Kernel> make_max_pool(const KernelSpec& spec, const CpuKernelContext& ctx,
                                      const PoolProblem& p) {
  memory::desc x_md = plain_desc(p.x), y_md = plain_desc(p.y);
  bool backward = spec.op == OpKind::kMaxPoolBwd;
  auto prop = backward ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  dnnl::pooling_forward::desc fwd_desc(prop, dnnl::algorithm::pooling_max, x_md, y_md, p.stride,
                                       p.kernel, p.pad, p.pad_end);
  dnnl::pooling_forward::primitive_desc fwd(fwd_desc, user_scratchpad_attr(), ctx.engine);
  PlanBuilder b(spec.name, ctx);
  BufferRef src = b.bind_input(0, x_md, fwd.src_desc());
  if (!backward) {
    b.add_step(dnnl::pooling_forward(fwd),
               {{DNNL_ARG_SRC, src, fwd.src_desc()},
                {DNNL_ARG_DST, b.bind_output(0, y_md, fwd.dst_desc()), fwd.dst_desc()}},
               fwd.scratchpad_desc());
    return b.finish();
  }
  BufferRef y = b.reserve(fwd.dst_desc().get_size());
  BufferRef argmax = b.reserve(fwd.workspace_desc().get_size());
  b.add_step(dnnl::pooling_forward(fwd),
             {{DNNL_ARG_SRC, src, fwd.src_desc()},
              {DNNL_ARG_DST, y, fwd.dst_desc()},
              {DNNL_ARG_WORKSPACE, argmax, fwd.workspace_desc()}},
             fwd.scratchpad_desc());
  dnnl::pooling_backward::desc desc(dnnl::algorithm::pooling_max, x_md, y_md, p.stride, p.kernel,
                                    p.pad, p.pad_end);
  dnnl::pooling_backward::primitive_desc pd(desc, user_scratchpad_attr(), ctx.engine, fwd);
  b.add_step(dnnl::pooling_backward(pd),
             {{DNNL_ARG_DIFF_DST, b.bind_input(1, y_md, pd.diff_dst_desc()), pd.diff_dst_desc()},
              {DNNL_ARG_WORKSPACE, argmax, fwd.workspace_desc()},
              {DNNL_ARG_DIFF_SRC, b.bind_output(0, x_md, pd.diff_src_desc()), pd.diff_src_desc()}},
             pd.scratchpad_desc());
  return b.finish();
}

// avg_pool: oneDNN average pooling, the divisor the window's size with its
// padding (count_include_pad) or without. avg_pool_bwd needs no forward
// pass: the forward primitive_desc is only oneDNN's hint.
absl::StatusOr<std::unique_ptr<Kernel>> make_avg_pool(const KernelSpec& spec,
                                                      const CpuKernelContext& ctx,
                                                      const PoolProblem& p) {
  const bool include_pad = p.count_include_pad;
  const dnnl::algorithm alg = include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                          : dnnl::algorithm::pooling_avg_exclude_padding;
  memory::desc x_md = plain_desc(p.x), y_md = plain_desc(p.y);
  const bool backward = spec.op == OpKind::kAvgPoolBwd;
  auto prop = backward ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  dnnl::pooling_forward::desc fwd_desc(prop, alg, x_md, y_md, p.stride, p.kernel, p.pad, p.pad_end);
  dnnl::pooling_forward::primitive_desc fwd(fwd_desc, user_scratchpad_attr(), ctx.engine);
  PlanBuilder b(spec.name, ctx);
  if (!backward) {
    b.add_step(dnnl::pooling_forward(fwd),
               {{DNNL_ARG_SRC, b.bind_input(0, x_md, fwd.src_desc()), fwd.src_desc()},
                {DNNL_ARG_DST, b.bind_output(0, y_md, fwd.dst_desc()), fwd.dst_desc()}},
               fwd.scratchpad_desc());
    return b.finish();
  }
  dnnl::pooling_backward::desc desc(alg, x_md, y_md, p.stride, p.kernel, p.pad, p.pad_end);
  dnnl::pooling_backward::primitive_desc pd(desc, user_scratchpad_attr(), ctx.engine, fwd);
  b.add_step(dnnl::pooling_backward(pd),
             {{DNNL_ARG_DIFF_DST, b.bind_input(0, y_md, pd.diff_dst_desc()), pd.diff_dst_desc()},
              {DNNL_ARG_DIFF_SRC, b.bind_output(0, x_md, pd.diff_src_desc()), pd.diff_src_desc()}},
             pd.scratchpad_desc());
  return b.finish();
}

absl::StatusOr<std::unique_ptr<Kernel>> dispatch(const KernelSpec& spec,
                                                 const CpuKernelContext& ctx,
                                                 const SpatialKernelOptions& options) {
  LMS_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> conv, create_conv_kernel(spec, ctx, options));
  if (conv) return conv;
  LMS_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> upsample, create_upsample_kernel(spec, ctx));
  if (upsample) return upsample;
  return create_pool_kernel(spec, ctx);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> create_upsample_kernel(const KernelSpec& spec,
                                                               const CpuKernelContext& ctx) {
  if (spec.op != OpKind::kUpsample && spec.op != OpKind::kUpsampleBwd)
    return std::unique_ptr<Kernel>();
  LMS_ASSIGN_OR_RETURN(UpsampleProblem p, upsample_dims(spec));
  return make_upsample(spec, ctx, p);
}

absl::StatusOr<std::unique_ptr<Kernel>> create_pool_kernel(const KernelSpec& spec,
                                                           const CpuKernelContext& ctx) {
  const bool avg = spec.op == OpKind::kAvgPool || spec.op == OpKind::kAvgPoolBwd;
  if (spec.op != OpKind::kMaxPool && spec.op != OpKind::kMaxPoolBwd && !avg)
    return std::unique_ptr<Kernel>();
  LMS_ASSIGN_OR_RETURN(PoolProblem p, pool_problem(spec));
  if (avg) return make_avg_pool(spec, ctx, p);
  return make_max_pool(spec, ctx, p);
}

absl::StatusOr<std::unique_ptr<Kernel>> create_spatial_kernel(const KernelSpec& spec,
                                                              const CpuKernelContext& ctx,
                                                              const SpatialKernelOptions& options) {
  try {
    return dispatch(spec, ctx, options);
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN refused node '", spec.name, "' (op ",
                                            op_name(spec.op), "): ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Kernel>> create_spatial_kernel(const KernelSpec& spec,
                                                              const CpuKernelContext& ctx) {
  SpatialKernelOptions options;
  options.conv_algorithm = ctx.conv_algorithm;
  return create_spatial_kernel(spec, ctx, options);
}

}  // namespace lms::cpu
