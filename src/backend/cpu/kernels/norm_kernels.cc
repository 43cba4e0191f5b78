// instance_norm, batch_norm (+ _bwd) and bn_stats_update of docs/ops.md.
// batch_norm runs on oneDNN batch_normalization (training mode: biased
// variance, use_scale | use_shift; eval mode: use_global_stats);
// instance_norm runs as loops (Note [Instance norm as loops]).
// make_norm_fwd / make_norm_bwd can still build instance norm on the
// [1, N*C, S] view described next (kept for a faster oneDNN, unused now).
//
// Note [Instance norm as batch norm]: instance norm of x[N,C,S] normalises
// each (n, c) over S, which is batch norm of the same bytes viewed as
// [1, N*C, S]. gamma and beta are per C, so they are tiled to N*C entries in
// the workspace before the primitive runs, and the per-(n, c) dscale / dshift
// of the backward primitive are summed over n (in order n = 0..N-1, so the
// result is deterministic) into dgamma[C] / dbeta[C].
//
// The _bwd ops get x, gamma, dy but not the forward statistics, so the
// backward kernels first run a forward-training primitive to recompute mean
// and variance (its y goes to the dx buffer, overwritten by the backward).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/kernels/pointwise_common.h"
#include "lms/status.h"

namespace lms::cpu::pointwise {
namespace {

using dnnl::normalization_flags;
using dnnl::prop_kind;
using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

const normalization_flags kScaleShift =
    normalization_flags::use_scale | normalization_flags::use_shift;

// eps of a spec check_spec has accepted (op_dims.h), and what is this
// backend's own: oneDNN's batch normalisation takes x of rank 5 at most.
absl::StatusOr<double> check_norm(const KernelSpec& spec) {
  LMS_RETURN_IF_ERROR(check_rank(spec, spec.input_shapes[0], 2, 5, "input x"));
  return norm_eps(spec);
}

// The batch-norm view of x: itself, or [1, N*C, S] for instance norm.
Shape norm_view(const Shape& x, bool instance) {
  if (!instance) return x;
  Shape v = x;
  v[0] = 1;
  v[1] = x[0] * x[1];
  return v;
}

dnnl::memory::desc channel_desc(int64_t c) { return flat_desc(c); }

// Where the steps find scale/shift (and write dscale/dshift) plus the
// workspace offsets of the statistics.
struct NormSlots {
  Slot scale, shift, dscale, dshift;
  uint64_t mean = 0, variance = 0;
};

// Adds the loop that tiles src[C] N times into the workspace at `dst`.
void add_tile_loop(StepKernel& k, Slot src, uint64_t dst, int64_t n, int64_t c) {
  k.add_loop([=](const KernelArgs& a) {
    const float* s = a.inputs[src.index];
    float* d = ws_floats(a, dst);
    for (int64_t i = 0; i < n; ++i) std::copy(s, s + c, d + i * c);
    return absl::OkStatus();
  });
}

KernelOr make_norm_fwd(const KernelSpec& spec, const CpuKernelContext& ctx, bool instance) {
  LMS_ASSIGN_OR_RETURN(double eps, check_norm(spec));
  const Shape& x = spec.input_shapes[0];
  const Shape view = norm_view(x, instance);
  const int64_t channels = view[1];
  auto k = std::make_unique<StepKernel>(spec, ctx);
  NormSlots s{in(1), in(2), {}, {}};
  if (instance) {
    s.scale = ws(k->layout().add_floats(channels));
    s.shift = ws(k->layout().add_floats(channels));
    add_tile_loop(*k, in(1), s.scale.index, x[0], x[1]);
    add_tile_loop(*k, in(2), s.shift.index, x[0], x[1]);
  }
  s.mean = k->layout().add_floats(channels);
  s.variance = k->layout().add_floats(channels);

  const dnnl::memory::desc md = plain_desc(view);
  dnnl::batch_normalization_forward::desc d(prop_kind::forward_training, md,
                                            static_cast<float>(eps), kScaleShift);
  dnnl::batch_normalization_forward::primitive_desc pd(d, user_scratchpad_attr(), ctx.engine);
  k->add_primitive(pd, dnnl::batch_normalization_forward(pd),
                   {{DNNL_ARG_SRC, in(0), md},
                    {DNNL_ARG_DST, out(0), md},
                    {DNNL_ARG_SCALE, s.scale, channel_desc(channels)},
                    {DNNL_ARG_SHIFT, s.shift, channel_desc(channels)},
                    {DNNL_ARG_MEAN, ws(s.mean), pd.mean_desc()},
                    {DNNL_ARG_VARIANCE, ws(s.variance), pd.variance_desc()}});
  return k;
}

// batch_norm in its three modes (BatchNormMode): training computes the
// batch statistics into the workspace, or into outputs 1 and 2 when the
// node saves them for bn_stats_update; eval reads the running statistics
// (inputs 3 and 4) through oneDNN's use_global_stats.
KernelOr make_batch_norm_fwd(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(BatchNormDims d, batch_norm_dims(spec));
  if (d.mode == BatchNormMode::kTraining) return make_norm_fwd(spec, ctx, false);
  LMS_RETURN_IF_ERROR(check_rank(spec, spec.input_shapes[0], 2, 5, "input x"));
  const Shape& x = spec.input_shapes[0];
  const bool eval = d.mode == BatchNormMode::kEval;
  auto k = std::make_unique<StepKernel>(spec, ctx);
  const dnnl::memory::desc md = plain_desc(x);
  const normalization_flags flags =
      eval ? kScaleShift | normalization_flags::use_global_stats : kScaleShift;
  dnnl::batch_normalization_forward::desc desc(
      eval ? prop_kind::forward_inference : prop_kind::forward_training, md,
      static_cast<float>(d.eps), flags);
  dnnl::batch_normalization_forward::primitive_desc pd(desc, user_scratchpad_attr(), ctx.engine);
  k->add_primitive(pd, dnnl::batch_normalization_forward(pd),
                   {{DNNL_ARG_SRC, in(0), md},
                    {DNNL_ARG_DST, out(0), md},
                    {DNNL_ARG_SCALE, in(1), channel_desc(x[1])},
                    {DNNL_ARG_SHIFT, in(2), channel_desc(x[1])},
                    {DNNL_ARG_MEAN, eval ? in(3) : out(1), pd.mean_desc()},
                    {DNNL_ARG_VARIANCE, eval ? in(4) : out(2), pd.variance_desc()}});
  return k;
}

// bn_stats_update: PyTorch's running-statistics rule, in double, in channel
// order (deterministic): r = (1 - m) r + m batch, the variance unbiased.
KernelOr make_bn_stats_update(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(BnStatsUpdateDims d, bn_stats_update_dims(spec));
  auto k = std::make_unique<StepKernel>(spec, ctx);
  const double unbias = static_cast<double>(d.count) / static_cast<double>(d.count - 1);
  k->add_loop([=](const KernelArgs& a) {
    float* running_mean = a.inputs[0];  // mutated in place (docs/ops.md)
    float* running_var = a.inputs[1];
    for (int64_t c = 0; c < d.channels; ++c) {
      running_mean[c] = static_cast<float>((1 - d.momentum) * running_mean[c] +
                                           d.momentum * static_cast<double>(a.inputs[2][c]));
      running_var[c] =
          static_cast<float>((1 - d.momentum) * running_var[c] +
                             d.momentum * unbias * static_cast<double>(a.inputs[3][c]));
    }
    return absl::OkStatus();
  });
  return k;
}

// Recomputes the statistics (y into dx), then runs the backward primitive.
void add_norm_bwd_steps(StepKernel& k, const CpuKernelContext& ctx, const Shape& view, float eps,
                        const NormSlots& s) {
  const dnnl::memory::desc md = plain_desc(view);
  const dnnl::memory::desc cmd = channel_desc(view[1]);
  const dnnl::primitive_attr attr = user_scratchpad_attr();
  dnnl::batch_normalization_forward::desc stats_d(prop_kind::forward_training, md, eps,
                                                  normalization_flags::none);
  dnnl::batch_normalization_forward::primitive_desc stats_pd(stats_d, attr, ctx.engine);
  k.add_primitive(stats_pd, dnnl::batch_normalization_forward(stats_pd),
                  {{DNNL_ARG_SRC, in(0), md},
                   {DNNL_ARG_DST, out(0), md},
                   {DNNL_ARG_MEAN, ws(s.mean), stats_pd.mean_desc()},
                   {DNNL_ARG_VARIANCE, ws(s.variance), stats_pd.variance_desc()}});

  dnnl::batch_normalization_forward::desc hint_d(prop_kind::forward_training, md, eps, kScaleShift);
  dnnl::batch_normalization_forward::primitive_desc hint_pd(hint_d, attr, ctx.engine);
  dnnl::batch_normalization_backward::desc d(prop_kind::backward, md, md, eps, kScaleShift);
  dnnl::batch_normalization_backward::primitive_desc pd(d, attr, ctx.engine, hint_pd);
  k.add_primitive(pd, dnnl::batch_normalization_backward(pd),
                  {{DNNL_ARG_SRC, in(0), md},
                   {DNNL_ARG_DIFF_DST, in(2), md},
                   {DNNL_ARG_SCALE, s.scale, cmd},
                   // oneDNN 2.6 wants a shift argument whenever use_shift is
                   // set, though no gradient depends on it: bind gamma.
                   {DNNL_ARG_SHIFT, s.scale, cmd},
                   {DNNL_ARG_MEAN, ws(s.mean), pd.mean_desc()},
                   {DNNL_ARG_VARIANCE, ws(s.variance), pd.variance_desc()},
                   {DNNL_ARG_DIFF_SRC, out(0), md},
                   {DNNL_ARG_DIFF_SCALE, s.dscale, cmd},
                   {DNNL_ARG_DIFF_SHIFT, s.dshift, cmd}});
}

// out[c] = sum over i = 0..n-1 of ws[i*c_count + c] (fixed order).
void add_sum_over_n_loop(StepKernel& k, uint64_t src, size_t out_index, int64_t n, int64_t c) {
  k.add_loop([=](const KernelArgs& a) {
    const float* s = ws_floats(a, src);
    float* o = a.outputs[out_index];
    for (int64_t j = 0; j < c; ++j) {
      double acc = 0.0;
      for (int64_t i = 0; i < n; ++i) acc += s[i * c + j];
      o[j] = static_cast<float>(acc);
    }
    return absl::OkStatus();
  });
}

KernelOr make_norm_bwd(const KernelSpec& spec, const CpuKernelContext& ctx, bool instance) {
  LMS_ASSIGN_OR_RETURN(double eps, check_norm(spec));
  const Shape& x = spec.input_shapes[0];
  const Shape view = norm_view(x, instance);
  const int64_t channels = view[1];
  auto k = std::make_unique<StepKernel>(spec, ctx);
  NormSlots s{in(1), {}, out(1), out(2)};
  if (instance) {
    s.scale = ws(k->layout().add_floats(channels));
    s.dscale = ws(k->layout().add_floats(channels));
    s.dshift = ws(k->layout().add_floats(channels));
    add_tile_loop(*k, in(1), s.scale.index, x[0], x[1]);
  }
  s.mean = k->layout().add_floats(channels);
  s.variance = k->layout().add_floats(channels);
  add_norm_bwd_steps(*k, ctx, view, static_cast<float>(eps), s);
  if (instance) {
    add_sum_over_n_loop(*k, s.dscale.index, 1, x[0], x[1]);
    add_sum_over_n_loop(*k, s.dshift.index, 2, x[0], x[1]);
  }
  return k;
}

// Note [Instance norm as loops]: oneDNN 2.6 only has its generic ncsp
// batch-norm for the [1, N*C, S] view, which measured 1.2 s forward on
// [1,32,64,64,64]; these loops (double sums in element order) are
// deterministic and far faster. Per (n, c) slice of S elements.
struct SliceStats {
  double mean = 0, inv_std = 0;
};

SliceStats slice_stats(const float* x, int64_t s, double eps) {
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < s; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(s);
  for (int64_t i = 0; i < s; ++i) sq += (x[i] - mean) * (x[i] - mean);
  return {mean, 1.0 / std::sqrt(sq / static_cast<double>(s) + eps)};
}

KernelOr make_instance_fwd(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(double eps, check_norm(spec));
  const Shape& x = spec.input_shapes[0];
  const int64_t n = x[0], c = x[1], s = num_elements(x) / (n * c);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    for (int64_t j = 0; j < n * c; ++j) {
      const float* xs = a.inputs[0] + j * s;
      const SliceStats st = slice_stats(xs, s, eps);
      const double g = a.inputs[1][j % c], b = a.inputs[2][j % c];
      const float scale = static_cast<float>(g * st.inv_std);
      const float shift = static_cast<float>(b - g * st.mean * st.inv_std);
      float* y = a.outputs[0] + j * s;
      for (int64_t i = 0; i < s; ++i) y[i] = scale * xs[i] + shift;
    }
    return absl::OkStatus();
  });
  return k;
}

// dx = gamma*inv_std*(dy - mean(dy) - xhat*mean(dy*xhat)); dgamma, dbeta
// summed over n in order.
KernelOr make_instance_bwd(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(double eps, check_norm(spec));
  const Shape& x = spec.input_shapes[0];
  const int64_t n = x[0], c = x[1], s = num_elements(x) / (n * c);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    std::vector<double> dgamma(c, 0.0), dbeta(c, 0.0);
    for (int64_t j = 0; j < n * c; ++j) {
      const float* xs = a.inputs[0] + j * s;
      const float* dy = a.inputs[2] + j * s;
      const SliceStats st = slice_stats(xs, s, eps);
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t i = 0; i < s; ++i) {
        sum_dy += dy[i];
        sum_dy_xhat += dy[i] * (xs[i] - st.mean) * st.inv_std;
      }
      dgamma[j % c] += sum_dy_xhat;
      dbeta[j % c] += sum_dy;
      const double gs = a.inputs[1][j % c] * st.inv_std, inv_s = 1.0 / static_cast<double>(s);
      float* dx = a.outputs[0] + j * s;
      for (int64_t i = 0; i < s; ++i) {
        const double xhat = (xs[i] - st.mean) * st.inv_std;
        dx[i] = static_cast<float>(gs * (dy[i] - sum_dy * inv_s - xhat * sum_dy_xhat * inv_s));
      }
    }
    for (int64_t j = 0; j < c; ++j) {
      a.outputs[1][j] = static_cast<float>(dgamma[j]);
      a.outputs[2][j] = static_cast<float>(dbeta[j]);
    }
    return absl::OkStatus();
  });
  return k;
}

}  // namespace

KernelOr create_norm_kernel(const KernelSpec& spec, const CpuKernelContext& ctx) {
  if (spec.op == OpKind::kInstanceNorm) return make_instance_fwd(spec, ctx);
  if (spec.op == OpKind::kInstanceNormBwd) return make_instance_bwd(spec, ctx);
  if (spec.op == OpKind::kBatchNorm) return make_batch_norm_fwd(spec, ctx);
  if (spec.op == OpKind::kBnStatsUpdate) return make_bn_stats_update(spec, ctx);
  if (spec.op == OpKind::kBatchNormBwd) return make_norm_bwd(spec, ctx, false);
  if (spec.op == OpKind::kLayerNorm || spec.op == OpKind::kLayerNormBwd) {
    return create_layer_norm_kernel(spec, ctx);
  }
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cpu::pointwise
