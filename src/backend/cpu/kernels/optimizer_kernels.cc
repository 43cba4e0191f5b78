// global_norm, increment, sgd_update, adam_update of docs/ops.md as plain
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

KernelOr make_increment(const KernelSpec& spec, const CpuKernelContext& ctx) {
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([](const KernelArgs& a) {
    a.inputs[0][0] += 1.0f;
    return absl::OkStatus();
  });
  return k;
}

// min(1, clip_norm / (norm + 1e-6)) when clipping is on and the norm input
// (index norm_index, if present) exists; else 1.
double clip_factor(const KernelArgs& a, double clip_norm, size_t norm_index) {
  if (clip_norm <= 0 || a.inputs.size() <= norm_index) return 1.0;
  return std::min(1.0, clip_norm / (static_cast<double>(a.inputs[norm_index][0]) + kClipNormEps));
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
    const float clip = static_cast<float>(clip_factor(a, c.clip_norm, 3));
    const float wd = static_cast<float>(c.weight_decay);
    const float mom = static_cast<float>(momentum);
    const float lr = static_cast<float>(c.lr);
    for (int64_t i = 0; i < n; ++i) {
      const float gi = clip * g[i] + wd * p[i];
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
    // t = 0 (the increment did not run first) would divide by zero.
    const double t = a.inputs[4][0];
    if (!(t >= 1.0)) {
      return absl::FailedPreconditionError(
          absl::StrCat("node '", spec.name, "' (op adam_update): step is ", t,
                       "; it must be >= 1 (increment runs before the first update)"));
    }
    const float clip = static_cast<float>(clip_factor(a, h.clip_norm, 5));
    const float wd = static_cast<float>(h.weight_decay);
    const float b1 = static_cast<float>(h.beta1);
    const float b2 = static_cast<float>(h.beta2);
    const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(h.beta1, t)));
    const float inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(h.beta2, t)));
    const float lr =
        static_cast<float>(poly_lr(h.lr, t, static_cast<double>(h.decay_steps), h.decay_power));
    const float eps = static_cast<float>(h.eps);
    for (int64_t i = 0; i < n; ++i) {
      const float gi = clip * g[i] + wd * p[i];
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
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cpu::pointwise
