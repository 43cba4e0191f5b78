// mse_loss, soft_dice_loss, reduce_mean (+ _bwd), sum_to of docs/ops.md as plain
// loops: they reduce a whole tensor to a scalar, which oneDNN has no
// primitive for in double precision. Every sum accumulates in double in
// element order on one thread, so the result is deterministic and does not
// lose the small per-element terms of a large tensor.
#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/cpu/kernels/pointwise_common.h"
#include "common/broadcast.h"
#include "lms/status.h"

namespace lms::cpu::pointwise {
namespace {

using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

// loss = mean((pred - target)^2).
KernelOr make_mse(const KernelSpec& spec, const CpuKernelContext& ctx) {
  const int64_t n = num_elements(spec.input_shapes[0]);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    const float* p = a.inputs[0];
    const float* t = a.inputs[1];
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(p[i]) - t[i];
      acc += d * d;
    }
    a.outputs[0][0] = static_cast<float>(acc / static_cast<double>(n));
    return absl::OkStatus();
  });
  return k;
}

// dpred = dloss * 2 * (pred - target) / numel.
KernelOr make_mse_bwd(const KernelSpec& spec, const CpuKernelContext& ctx) {
  const int64_t n = num_elements(spec.input_shapes[0]);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    const float* p = a.inputs[0];
    const float* t = a.inputs[1];
    const float c = static_cast<float>(2.0 * a.inputs[2][0] / static_cast<double>(n));
    float* g = a.outputs[0];
    for (int64_t i = 0; i < n; ++i) g[i] = c * (p[i] - t[i]);
    return absl::OkStatus();
  });
  return k;
}

// Sums of one (n, c) slice of S elements: I = sum p*t, P = sum p, T = sum t.
struct DiceSums {
  double inter = 0, p = 0, t = 0;
};

DiceSums dice_sums(const float* p, const float* t, int64_t s) {
  DiceSums r;
  for (int64_t i = 0; i < s; ++i) {
    r.inter += static_cast<double>(p[i]) * t[i];
    r.p += p[i];
    r.t += t[i];
  }
  return r;
}

// loss = 1 - mean over (n, c) of (2 I + eps) / (P + T + eps).
KernelOr make_dice(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(double eps, real_attr(spec, "eps"));
  const Shape& x = spec.input_shapes[0];
  const int64_t slices = x[0] * x[1];
  const int64_t s = num_elements(x) / slices;
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    double acc = 0.0;
    for (int64_t j = 0; j < slices; ++j) {
      const DiceSums d = dice_sums(a.inputs[0] + j * s, a.inputs[1] + j * s, s);
      acc += (2.0 * d.inter + eps) / (d.p + d.t + eps);
    }
    a.outputs[0][0] = static_cast<float>(1.0 - acc / static_cast<double>(slices));
    return absl::OkStatus();
  });
  return k;
}

// d loss / d p_i = -(1/M) (2 t_i (P + T + eps) - (2 I + eps)) / (P + T + eps)^2,
// M = N*C, times dloss.
KernelOr make_dice_bwd(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(double eps, real_attr(spec, "eps"));
  const Shape& x = spec.input_shapes[0];
  const int64_t slices = x[0] * x[1];
  const int64_t s = num_elements(x) / slices;
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    const double scale = -static_cast<double>(a.inputs[2][0]) / static_cast<double>(slices);
    for (int64_t j = 0; j < slices; ++j) {
      const float* t = a.inputs[1] + j * s;
      const DiceSums d = dice_sums(a.inputs[0] + j * s, t, s);
      const double den = d.p + d.t + eps;
      const double num = 2.0 * d.inter + eps;
      const double c1 = scale * 2.0 / den;
      const double c0 = -scale * num / (den * den);
      float* g = a.outputs[0] + j * s;
      for (int64_t i = 0; i < s; ++i) g[i] = static_cast<float>(c1 * t[i] + c0);
    }
    return absl::OkStatus();
  });
  return k;
}

// y[] = mean of all elements of x.
KernelOr make_reduce_mean_all(const KernelSpec& spec, const CpuKernelContext& ctx) {
  const int64_t n = num_elements(spec.input_shapes[0]);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) acc += a.inputs[0][i];
    a.outputs[0][0] = static_cast<float>(acc / static_cast<double>(n));
    return absl::OkStatus();
  });
  return k;
}

// y[o, 0, i] = mean over a of x[o, a, i], x seen as [outer, A, inner] around
// the axis; each sum in double, in order of a.
KernelOr make_reduce_mean(const KernelSpec& spec, const CpuKernelContext& ctx) {
  if (!has_axis_attr(spec)) return make_reduce_mean_all(spec, ctx);
  const Shape& x = spec.input_shapes[0];
  LMS_ASSIGN_OR_RETURN(const size_t axis, axis_attr(spec, x, "x"));
  const AxisView v = axis_view(x, axis);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    for (int64_t o = 0; o < v.outer; ++o) {
      for (int64_t i = 0; i < v.inner; ++i) {
        const float* x0 = a.inputs[0] + o * v.axis * v.inner + i;
        double acc = 0.0;
        for (int64_t j = 0; j < v.axis; ++j) acc += x0[j * v.inner];
        a.outputs[0][o * v.inner + i] = static_cast<float>(acc / static_cast<double>(v.axis));
      }
    }
    return absl::OkStatus();
  });
  return k;
}

// dx (shape input_shape) filled with dy / numel, or with an axis
// dx[o, a, i] = dy[o, 0, i] / A.
KernelOr make_reduce_mean_bwd(const KernelSpec& spec, const CpuKernelContext& ctx) {
  const Shape& shape = spec.output_shapes[0];  // input_shape (check_spec)
  AxisView v{1, num_elements(shape), 1};       // no axis: every element is one group
  if (has_axis_attr(spec)) {
    LMS_ASSIGN_OR_RETURN(const size_t axis, axis_attr(spec, shape, "input_shape"));
    v = axis_view(shape, axis);
  }
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    for (int64_t o = 0; o < v.outer; ++o) {
      for (int64_t i = 0; i < v.inner; ++i) {
        const float g = static_cast<float>(static_cast<double>(a.inputs[0][o * v.inner + i]) /
                                           static_cast<double>(v.axis));
        float* dx = a.outputs[0] + o * v.axis * v.inner + i;
        for (int64_t j = 0; j < v.axis; ++j) dx[j * v.inner] = g;
      }
    }
    return absl::OkStatus();
  });
  return k;
}

}  // namespace

// True when p sums x viewed as [per_output, outputs] over its rows: y's
// elements are x's trailing elements, contiguous (a bias gradient).
bool sums_leading_rows(const SumToPlan& p) {
  if (p.outputs == 0 || p.per_output == 0) return false;
  for (int64_t j : {int64_t{0}, int64_t{1}, p.outputs - 1}) {
    if (j < p.outputs && p.base(j) != j) return false;
  }
  for (int64_t r : {int64_t{0}, int64_t{1}, p.per_output - 1}) {
    if (r < p.per_output && p.term(r) != r * p.outputs) return false;
  }
  int64_t stride = 1;  // every stride, not only the probes above
  for (int d = p.kept - 1; d >= 0; --d) {
    if (p.kept_strides[d] != stride) return false;
    stride *= p.kept_dims[d];
  }
  for (int d = p.reduced - 1; d >= 0; --d) {
    if (p.reduced_strides[d] != stride) return false;
    stride *= p.reduced_dims[d];
  }
  return true;
}

// sum_to: y[j] = sum of the x elements that broadcast from j, in double in
// x's order (SumToPlan, shared with the CUDA kernel). Summing leading rows,
// the rows are added one after another into a row of doubles in the
// workspace (the same order per element, read contiguously).
KernelOr make_sum_to(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const SumToPlan p, check_sum_to(spec));
  auto k = std::make_unique<StepKernel>(spec, ctx);
  if (sums_leading_rows(p)) {
    const uint64_t acc = k->layout().add_floats(2 * p.outputs);  // doubles
    k->add_loop([p, acc](const KernelArgs& a) {
      double* sum = reinterpret_cast<double*>(ws_floats(a, acc));
      std::fill(sum, sum + p.outputs, 0.0);
      for (int64_t r = 0; r < p.per_output; ++r) {
        const float* x = a.inputs[0] + r * p.outputs;
        for (int64_t j = 0; j < p.outputs; ++j) sum[j] += x[j];
      }
      for (int64_t j = 0; j < p.outputs; ++j) a.outputs[0][j] = static_cast<float>(sum[j]);
      return absl::OkStatus();
    });
    return k;
  }
  k->add_loop([p](const KernelArgs& a) {
    for (int64_t j = 0; j < p.outputs; ++j) {
      const float* x = a.inputs[0] + p.base(j);
      double acc = 0.0;
      for (int64_t r = 0; r < p.per_output; ++r) acc += x[p.term(r)];
      a.outputs[0][j] = static_cast<float>(acc);
    }
    return absl::OkStatus();
  });
  return k;
}

KernelOr create_loss_kernel(const KernelSpec& spec, const CpuKernelContext& ctx) {
  if (spec.op == OpKind::kMseLoss) return make_mse(spec, ctx);
  if (spec.op == OpKind::kMseLossBwd) return make_mse_bwd(spec, ctx);
  if (spec.op == OpKind::kSoftDiceLoss) return make_dice(spec, ctx);
  if (spec.op == OpKind::kSoftDiceLossBwd) return make_dice_bwd(spec, ctx);
  if (spec.op == OpKind::kSoftmaxCrossEntropy || spec.op == OpKind::kSoftmaxCrossEntropyBwd) {
    return create_cross_entropy_kernel(spec, ctx);
  }
  if (spec.op == OpKind::kReduceMean) return make_reduce_mean(spec, ctx);
  if (spec.op == OpKind::kReduceMeanBwd) return make_reduce_mean_bwd(spec, ctx);
  if (spec.op == OpKind::kSumTo) return make_sum_to(spec, ctx);
  if (spec.op == OpKind::kLinearCrossEntropy || spec.op == OpKind::kLinearCrossEntropyBwd) {
    return create_linear_xent_kernel(spec, ctx);
  }
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cpu::pointwise
