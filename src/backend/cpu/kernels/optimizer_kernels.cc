// global_norm, increment, sgd_update, adam_update, amp_update_scale of
// docs/ops.md as plain
// loops (oneDNN has no optimizer primitives). The updates mutate their
// inputs in place and have no outputs. Per-step scalars (clip factor, bias
// corrections) are computed in double; the per-element update is float.
#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/cpu/kernels/pointwise_common.h"
#include "backend/lr_schedule.h"
#include "lms/status.h"

namespace lms::cpu::pointwise {
namespace {

using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

constexpr double kClipNormEps = 1e-6;  // docs/ops.md: clip_norm / (norm + 1e-6)

// norm[] = sqrt(sum over all inputs, in input order, of g^2), in double.
KernelOr make_global_norm(const KernelSpec& spec, const CpuKernelContext& ctx) {
  std::vector<int64_t> sizes;
  for (const Shape& s : spec.input_shapes) sizes.push_back(num_elements(s));
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([sizes](const KernelArgs& a) {
    double acc = 0.0;
    for (size_t j = 0; j < sizes.size(); ++j) {
      const float* g = a.inputs[j];
      for (int64_t i = 0; i < sizes[j]; ++i) acc += static_cast<double>(g[i]) * g[i];
    }
    a.outputs[0][0] = static_cast<float>(std::sqrt(acc));
    return absl::OkStatus();
  });
  return k;
}

// step += 1, unless the optional norm input is not finite (a step loss
// scaling skips).
KernelOr make_increment(const KernelSpec& spec, const CpuKernelContext& ctx) {
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([](const KernelArgs& a) {
    if (a.inputs.size() > 1 && !std::isfinite(a.inputs[1][0])) return absl::OkStatus();
    a.inputs[0][0] += 1.0f;
    return absl::OkStatus();
  });
  return k;
}

// The gradient scale of one update (docs/ops.md): with loss scaling, inputs
// `first` and first + 1 are scale[] and norm[]; a norm that is not finite
// skips the update, and otherwise the gradient is multiplied by
// float(1 / double(scale)) (PyTorch's GradScaler.unscale_) and clipping
// reads the norm times that. Without, the optional norm is input `first`.
struct GradScale {
  bool skip = false;
  float inv_scale = 1.0f;
  double clip = 1.0;  // min(1, clip_norm / (norm + 1e-6)), or 1
};

GradScale grad_scale(const KernelArgs& a, const UpdateAttrs& h, size_t first) {
  GradScale s;
  const size_t norm_index = h.loss_scaling ? first + 1 : first;
  const bool has_norm = a.inputs.size() > norm_index;
  double norm = has_norm ? static_cast<double>(a.inputs[norm_index][0]) : 0.0;
  if (h.loss_scaling) {
    if (!std::isfinite(norm)) {
      s.skip = true;
      return s;
    }
    s.inv_scale = static_cast<float>(1.0 / static_cast<double>(a.inputs[first][0]));
    norm *= static_cast<double>(s.inv_scale);
  }
  if (h.clip_norm > 0 && has_norm) s.clip = std::min(1.0, h.clip_norm / (norm + kClipNormEps));
  return s;
}

// GradScaler.update (torch._amp_update_scale_): on a step whose norm is
// not finite scale *= backoff and the tracker is zeroed; else the tracker
// counts the step, and at growth_interval scale *= growth (kept if finite)
// and the tracker is zeroed. Products in double, stored as float.
KernelOr make_amp_update_scale(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const AmpScaleAttrs h, amp_scale_attrs(spec));
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([h](const KernelArgs& a) {
    float& scale = a.inputs[0][0];
    float& tracker = a.inputs[1][0];
    if (!std::isfinite(a.inputs[2][0])) {
      scale = static_cast<float>(static_cast<double>(scale) * h.backoff_factor);
      tracker = 0.0f;
      return absl::OkStatus();
    }
    const float successful = tracker + 1.0f;
    if (successful >= static_cast<float>(h.growth_interval)) {
      const auto grown = static_cast<float>(static_cast<double>(scale) * h.growth_factor);
      if (std::isfinite(grown)) scale = grown;
      tracker = 0.0f;
    } else {
      tracker = successful;
    }
    return absl::OkStatus();
  });
  return k;
}

// g' = g + wd*p; v = momentum*v + g'; p -= lr*v.
KernelOr make_sgd(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const UpdateAttrs c, update_attrs(spec));
  const double momentum = c.momentum;
  const int64_t n = num_elements(spec.input_shapes[0]);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    float* p = a.inputs[0];
    const float* g = a.inputs[1];
    float* v = a.inputs[2];
    const GradScale s = grad_scale(a, c, 3);
    if (s.skip) return absl::OkStatus();
    const float inv = s.inv_scale;
    const auto clip = static_cast<float>(s.clip);
    const float wd = static_cast<float>(c.weight_decay);
    const float mom = static_cast<float>(momentum);
    const float lr = static_cast<float>(c.lr);
    for (int64_t i = 0; i < n; ++i) {
      const float gi = clip * (g[i] * inv) + wd * p[i];
      v[i] = mom * v[i] + gi;
      p[i] -= lr * v[i];
    }
    return absl::OkStatus();
  });
  return k;
}

// g' = g + wd*p; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
// p -= lr_t * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps), t = step,
// lr_t = poly_lr(lr, t, decay_steps, decay_power).
KernelOr make_adam(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const UpdateAttrs h, update_attrs(spec));
  const int64_t n = num_elements(spec.input_shapes[0]);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    float* p = a.inputs[0];
    const float* g = a.inputs[1];
    float* m = a.inputs[2];
    float* v = a.inputs[3];
    const GradScale s = grad_scale(a, h, 5);
    if (s.skip) return absl::OkStatus();
    const float inv = s.inv_scale;
    // t = 0 (the increment did not run first) would divide by zero.
    const double t = a.inputs[4][0];
    if (!(t >= 1.0)) {
      return absl::FailedPreconditionError(
          absl::StrCat("node '", spec.name, "' (op adam_update): step is ", t,
                       "; it must be >= 1 (increment runs before the first update)"));
    }
    const auto clip = static_cast<float>(s.clip);
    const float wd = static_cast<float>(h.weight_decay);
    const float b1 = static_cast<float>(h.beta1);
    const float b2 = static_cast<float>(h.beta2);
    const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(h.beta1, t)));
    const float inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(h.beta2, t)));
    const float lr =
        static_cast<float>(poly_lr(h.lr, t, static_cast<double>(h.decay_steps), h.decay_power));
    const float eps = static_cast<float>(h.eps);
    for (int64_t i = 0; i < n; ++i) {
      const float gi = clip * (g[i] * inv) + wd * p[i];
      m[i] = b1 * m[i] + (1.0f - b1) * gi;
      v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
      p[i] -= lr * (m[i] * inv_bc1) / (std::sqrt(v[i] * inv_bc2) + eps);
    }
    return absl::OkStatus();
  });
  return k;
}

}  // namespace

KernelOr create_optimizer_kernel(const KernelSpec& spec, const CpuKernelContext& ctx) {
  if (spec.op == OpKind::kGlobalNorm) return make_global_norm(spec, ctx);
  if (spec.op == OpKind::kIncrement) return make_increment(spec, ctx);
  if (spec.op == OpKind::kSgdUpdate) return make_sgd(spec, ctx);
  if (spec.op == OpKind::kAdamUpdate) return make_adam(spec, ctx);
  if (spec.op == OpKind::kAmpUpdateScale) return make_amp_update_scale(spec, ctx);
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cpu::pointwise
