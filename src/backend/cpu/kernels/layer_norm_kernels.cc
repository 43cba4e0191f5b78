// layer_norm and layer_norm_bwd of docs/ops.md on oneDNN
// layer_normalization (statistics over the last axis, biased variance,
// use_scale | use_shift). x[..., C] is passed with its own dims: oneDNN
// normalises over the innermost one and keeps one mean / variance per row.
//
// layer_norm_bwd gets x, gamma, dy but not the forward statistics (the graph
// saves none, docs/ops.md), so it first runs a forward-training primitive
// into the workspace to recompute mean and variance (its y goes to the dx
// buffer, overwritten by the backward). prop_kind::backward gives dscale and
// dshift straight into dgamma and dbeta.
#include <memory>

#include "backend/cpu/kernels/pointwise_common.h"
#include "lms/status.h"

namespace lms::cpu::pointwise {
namespace {

using dnnl::normalization_flags;
using dnnl::prop_kind;
using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;
using LnormFwd = dnnl::layer_normalization_forward;
using LnormBwd = dnnl::layer_normalization_backward;

const normalization_flags kLayerNormScaleShift =
    normalization_flags::use_scale | normalization_flags::use_shift;

KernelOr make_layer_norm_fwd(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(LayerNormDims d, layer_norm_dims(spec));
  const Shape& x = spec.input_shapes[0];
  auto k = std::make_unique<StepKernel>(spec, ctx);
  const uint64_t mean = k->layout().add_floats(d.rows);
  const uint64_t variance = k->layout().add_floats(d.rows);
  const dnnl::memory::desc md = plain_desc(x);
  const dnnl::memory::desc cmd = flat_desc(d.cols);
  LnormFwd::desc desc(prop_kind::forward_training, md, static_cast<float>(d.eps),
                      kLayerNormScaleShift);
  LnormFwd::primitive_desc pd(desc, user_scratchpad_attr(), ctx.engine);
  k->add_primitive(pd, LnormFwd(pd),
                   {{DNNL_ARG_SRC, in(0), md},
                    {DNNL_ARG_DST, out(0), md},
                    {DNNL_ARG_SCALE, in(1), cmd},
                    {DNNL_ARG_SHIFT, in(2), cmd},
                    {DNNL_ARG_MEAN, ws(mean), pd.mean_desc()},
                    {DNNL_ARG_VARIANCE, ws(variance), pd.variance_desc()}});
  return k;
}

KernelOr make_layer_norm_bwd(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(LayerNormDims d, layer_norm_dims(spec));
  const Shape& x = spec.input_shapes[0];
  const float eps = static_cast<float>(d.eps);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  const uint64_t mean = k->layout().add_floats(d.rows);
  const uint64_t variance = k->layout().add_floats(d.rows);
  const dnnl::memory::desc md = plain_desc(x);
  const dnnl::memory::desc cmd = flat_desc(d.cols);
  const dnnl::primitive_attr attr = user_scratchpad_attr();

  // Step 1: the row statistics, as the forward computed them.
  LnormFwd::desc stats_d(prop_kind::forward_training, md, eps, normalization_flags::none);
  LnormFwd::primitive_desc stats_pd(stats_d, attr, ctx.engine);
  k->add_primitive(stats_pd, LnormFwd(stats_pd),
                   {{DNNL_ARG_SRC, in(0), md},
                    {DNNL_ARG_DST, out(0), md},
                    {DNNL_ARG_MEAN, ws(mean), stats_pd.mean_desc()},
                    {DNNL_ARG_VARIANCE, ws(variance), stats_pd.variance_desc()}});

  // Step 2: dx, dgamma, dbeta.
  LnormFwd::desc hint_d(prop_kind::forward_training, md, eps, kLayerNormScaleShift);
  LnormFwd::primitive_desc hint_pd(hint_d, attr, ctx.engine);
  LnormBwd::desc desc(prop_kind::backward, md, md, eps, kLayerNormScaleShift);
  LnormBwd::primitive_desc pd(desc, attr, ctx.engine, hint_pd);
  k->add_primitive(pd, LnormBwd(pd),
                   {{DNNL_ARG_SRC, in(0), md},
                    {DNNL_ARG_DIFF_DST, in(2), md},
                    {DNNL_ARG_SCALE, in(1), cmd},
                    // As for batch norm (norm_kernels.cc): oneDNN 2.6 may want
                    // a shift argument whenever use_shift is set, though no
                    // gradient depends on it; bind gamma.
                    {DNNL_ARG_SHIFT, in(1), cmd},
                    {DNNL_ARG_MEAN, ws(mean), pd.mean_desc()},
                    {DNNL_ARG_VARIANCE, ws(variance), pd.variance_desc()},
                    {DNNL_ARG_DIFF_SRC, out(0), md},
                    {DNNL_ARG_DIFF_SCALE, out(1), cmd},
                    {DNNL_ARG_DIFF_SHIFT, out(2), cmd}});
  return k;
}

}  // namespace

KernelOr create_layer_norm_kernel(const KernelSpec& spec, const CpuKernelContext& ctx) {
  if (spec.op == OpKind::kLayerNorm) return make_layer_norm_fwd(spec, ctx);
  if (spec.op == OpKind::kLayerNormBwd) return make_layer_norm_bwd(spec, ctx);
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cpu::pointwise
