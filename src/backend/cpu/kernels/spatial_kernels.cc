// The spatial kernel factory, and the upsample, max_pool and avg_pool kernels (oneDNN
// resampling and pooling on the plain layouts: both are memory-bound, so a
// reorder to a blocked layout would cost more than it saves).
#include "backend/cpu/kernels/spatial_kernels.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/kernels/spatial_plan.h"
#include "op_schema/spatial_spec.h"
#include "lms/status.h"

namespace lms::cpu {
namespace {

using dnnl::memory;

// ---- upsample / upsample_bwd ----

struct UpsampleProblem {
  Shape x, y;
  dnnl::algorithm alg;
};

absl::StatusOr<dnnl::algorithm> upsample_algorithm(const KernelSpec& spec) {
  LMS_ASSIGN_OR_RETURN(std::string mode, required_str(spec, "mode"));
  if (mode == "nearest") return dnnl::algorithm::resampling_nearest;
  if (mode == "linear") return dnnl::algorithm::resampling_linear;
  return spec_error(spec,
                    absl::StrCat("mode '", mode, "' is not allowed (\"nearest\" or \"linear\")"));
}

absl::StatusOr<UpsampleProblem> upsample_problem(const KernelSpec& spec) {
  LMS_RETURN_IF_ERROR(check_arity(spec, 1, 1, 1, 1));
  bool backward = spec.op == OpKind::kUpsampleBwd;
  UpsampleProblem p;
  if (backward) {
    LMS_ASSIGN_OR_RETURN(p.x, required_shape(spec, "input_shape"));
  } else {
    p.x = spec.input_shapes[0];
  }
  LMS_ASSIGN_OR_RETURN(int rank, spatial_rank(spec, p.x, "x"));
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> scale, required_ints(spec, "scale", rank, 1));
  LMS_ASSIGN_OR_RETURN(p.alg, upsample_algorithm(spec));
  p.y = p.x;
  for (int i = 0; i < rank; ++i) p.y[2 + i] *= scale[i];
  if (backward) {
    LMS_RETURN_IF_ERROR(check_shape(spec, "input dy", spec.input_shapes[0], p.y));
    LMS_RETURN_IF_ERROR(check_shape(spec, "output dx", spec.output_shapes[0], p.x));
  } else {
    LMS_RETURN_IF_ERROR(check_shape(spec, "output y", spec.output_shapes[0], p.y));
  }
  return p;
}

std::unique_ptr<Kernel> make_upsample(const KernelSpec& spec, const CpuKernelContext& ctx,
                                      const UpsampleProblem& p) {
  memory::desc x_md = plain_desc(p.x), y_md = plain_desc(p.y);
  dnnl::resampling_forward::desc fwd_desc(dnnl::prop_kind::forward_training, p.alg, x_md, y_md);
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
  dnnl::resampling_backward::desc desc(p.alg, x_md, y_md);
  dnnl::resampling_backward::primitive_desc pd(desc, user_scratchpad_attr(), ctx.engine, hint);
  b.add_step(dnnl::resampling_backward(pd),
             {{DNNL_ARG_DIFF_DST, b.bind_input(0, y_md, pd.diff_dst_desc()), pd.diff_dst_desc()},
              {DNNL_ARG_DIFF_SRC, b.bind_output(0, x_md, pd.diff_src_desc()), pd.diff_src_desc()}},
             pd.scratchpad_desc());
  return b.finish();
}

// ---- max_pool / max_pool_bwd ----

struct PoolProblem {
  Shape x, y;
  memory::dims kernel, stride, pad;
};

absl::Status read_pool_geometry(const KernelSpec& spec, int rank, PoolProblem* p) {
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, required_ints(spec, "kernel", rank, 1));
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> stride, required_ints(spec, "stride", rank, 1));
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> pad, optional_ints(spec, "pad", rank, 0, 0));
  p->y = p->x;
  for (int i = 0; i < rank; ++i) {
    if (pad[i] >= kernel[i]) {
      return spec_error(spec, absl::StrCat("pad ", pad[i], " in spatial dim ", i,
                                           " must be smaller than the kernel ", kernel[i]));
    }
    int64_t span = p->x[2 + i] + 2 * pad[i] - kernel[i];
    if (span < 0) {
      return spec_error(spec, absl::StrCat("kernel ", kernel[i], " exceeds the padded extent ",
                                           p->x[2 + i] + 2 * pad[i], " of spatial dim ", i));
    }
    p->y[2 + i] = span / stride[i] + 1;
  }
  p->kernel.assign(kernel.begin(), kernel.end());
  p->stride.assign(stride.begin(), stride.end());
  p->pad.assign(pad.begin(), pad.end());
  return absl::OkStatus();
}

// max_pool (x), max_pool_bwd (x, dy), avg_pool (x), avg_pool_bwd (dy, with
// input_shape).
absl::StatusOr<PoolProblem> pool_problem(const KernelSpec& spec) {
  const bool avg_bwd = spec.op == OpKind::kAvgPoolBwd;
  const size_t inputs = spec.op == OpKind::kMaxPoolBwd ? 2 : 1;
  LMS_RETURN_IF_ERROR(check_arity(spec, inputs, inputs, 1, 1));
  PoolProblem p;
  if (avg_bwd) {
    LMS_ASSIGN_OR_RETURN(p.x, required_shape(spec, "input_shape"));
  } else {
    p.x = spec.input_shapes[0];
  }
  LMS_ASSIGN_OR_RETURN(int rank, spatial_rank(spec, p.x, "x"));
  LMS_RETURN_IF_ERROR(read_pool_geometry(spec, rank, &p));
  if (spec.op == OpKind::kMaxPoolBwd || avg_bwd) {
    LMS_RETURN_IF_ERROR(check_shape(spec, "input dy", spec.input_shapes[inputs - 1], p.y));
    LMS_RETURN_IF_ERROR(check_shape(spec, "output dx", spec.output_shapes[0], p.x));
  } else {
    LMS_RETURN_IF_ERROR(check_shape(spec, "output y", spec.output_shapes[0], p.y));
  }
  return p;
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
                                       p.kernel, p.pad, p.pad);
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
                                    p.pad, p.pad);
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
  LMS_ASSIGN_OR_RETURN(bool include_pad, count_include_pad_attr(spec));
  const dnnl::algorithm alg = include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                          : dnnl::algorithm::pooling_avg_exclude_padding;
  memory::desc x_md = plain_desc(p.x), y_md = plain_desc(p.y);
  const bool backward = spec.op == OpKind::kAvgPoolBwd;
  auto prop = backward ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  dnnl::pooling_forward::desc fwd_desc(prop, alg, x_md, y_md, p.stride, p.kernel, p.pad, p.pad);
  dnnl::pooling_forward::primitive_desc fwd(fwd_desc, user_scratchpad_attr(), ctx.engine);
  PlanBuilder b(spec.name, ctx);
  if (!backward) {
    b.add_step(dnnl::pooling_forward(fwd),
               {{DNNL_ARG_SRC, b.bind_input(0, x_md, fwd.src_desc()), fwd.src_desc()},
                {DNNL_ARG_DST, b.bind_output(0, y_md, fwd.dst_desc()), fwd.dst_desc()}},
               fwd.scratchpad_desc());
    return b.finish();
  }
  dnnl::pooling_backward::desc desc(alg, x_md, y_md, p.stride, p.kernel, p.pad, p.pad);
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
  LMS_ASSIGN_OR_RETURN(UpsampleProblem p, upsample_problem(spec));
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
