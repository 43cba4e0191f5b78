// Optimizer ops of docs/ops.md. The update ops have no outputs: they write
// their mutated inputs (parameter and state) in place.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "graph/ops_internal.h"
#include "lms/status.h"

namespace lms::ops_internal {
namespace {

using Shapes = std::vector<Shape>;

absl::Status check_scalar_input(std::string_view op, std::string_view what, const Shape& s) {
  if (s.empty()) return absl::OkStatus();
  return op_error(op, str_cat(what, " must be a scalar (shape []), got ", shape_str(s)));
}

absl::Status check_non_negative(std::string_view op, const Attrs& a,
                                std::initializer_list<std::string_view> keys) {
  for (std::string_view key : keys) {
    LMS_RETURN_IF_ERROR(real_attr_in(op, a, key, 0, HUGE_VAL, false, true).status());
  }
  return absl::OkStatus();
}

// param, grad, velocity, norm?[]
absl::StatusOr<Shapes> infer_sgd(const Attrs& a, const Shapes& in) {
  constexpr std::string_view kOp = "sgd_update";
  LMS_RETURN_IF_ERROR(check_same_shapes(kOp, {in[0], in[1], in[2]}, {"param", "grad", "velocity"}));
  if (in.size() > 3) LMS_RETURN_IF_ERROR(check_scalar_input(kOp, "norm", in[3]));
  LMS_RETURN_IF_ERROR(check_non_negative(kOp, a, {"lr", "weight_decay", "clip_norm"}));
  LMS_RETURN_IF_ERROR(real_attr_in(kOp, a, "momentum", 0, 1, false, true).status());
  return Shapes{};
}

// param, grad, m, v, step[], norm?[]
absl::StatusOr<Shapes> infer_adam(const Attrs& a, const Shapes& in) {
  constexpr std::string_view kOp = "adam_update";
  LMS_RETURN_IF_ERROR(
      check_same_shapes(kOp, {in[0], in[1], in[2], in[3]}, {"param", "grad", "m", "v"}));
  LMS_RETURN_IF_ERROR(check_scalar_input(kOp, "step", in[4]));
  if (in.size() > 5) LMS_RETURN_IF_ERROR(check_scalar_input(kOp, "norm", in[5]));
  LMS_RETURN_IF_ERROR(check_non_negative(kOp, a, {"lr", "weight_decay", "clip_norm"}));
  LMS_RETURN_IF_ERROR(real_attr_in(kOp, a, "beta1", 0, 1, false, true).status());
  LMS_RETURN_IF_ERROR(real_attr_in(kOp, a, "beta2", 0, 1, false, true).status());
  LMS_RETURN_IF_ERROR(real_attr_in(kOp, a, "eps", 0, HUGE_VAL, true, true).status());
  // The optional poly schedule: both attributes or neither.
  const bool steps = a.contains("decay_steps"), power = a.contains("decay_power");
  if (steps != power) {
    return op_error(kOp,
                    "decay_steps and decay_power come together (the poly schedule) or not at all");
  }
  if (steps) {
    auto decay_steps = attr_int(a, "decay_steps");
    if (!decay_steps.ok()) return op_error(kOp, decay_steps.status().message());
    if (*decay_steps < 1) {
      return op_error(kOp, str_cat("decay_steps must be an integer >= 1, got ", *decay_steps));
    }
    LMS_RETURN_IF_ERROR(real_attr_in(kOp, a, "decay_power", 0, HUGE_VAL, true, true).status());
  }
  return Shapes{};
}

decltype(OpDef::flops) per_param_element(double factor) {
  return [factor](const Attrs&, const Shapes& in, const Shapes&) { return factor * numel(in[0]); };
}

}  // namespace

void register_optimizer_ops(std::vector<OpSpec>& specs) {
  specs.push_back(make_spec(
      OpKind::kGlobalNorm, 1, -1, {},
      [](const Attrs&, const Shapes&) -> absl::StatusOr<Shapes> { return Shapes{Shape{}}; },
      [](const Attrs&, const Shapes& in, const Shapes&) {
        double n = 0;
        for (const Shape& s : in) n += 2 * numel(s);
        return n;
      }));
  specs.push_back(make_spec(
      OpKind::kIncrement, 1, 1, {},
      [](const Attrs&, const Shapes& in) -> absl::StatusOr<Shapes> {
        LMS_RETURN_IF_ERROR(check_scalar_input("increment", "step", in[0]));
        return Shapes{};
      },
      [](const Attrs&, const Shapes&, const Shapes&) { return 1.0; }, nullptr, {0}));
  // SGD: weight decay, momentum, update (+ clipping scale) per element.
  specs.push_back(make_spec(OpKind::kSgdUpdate, 3, 4,
                            {"clip_norm", "lr", "momentum", "weight_decay"}, infer_sgd,
                            per_param_element(6), nullptr, {0, 2}));
  // Adam: two moment updates, bias corrections, sqrt and divide per element.
  specs.push_back(make_spec(OpKind::kAdamUpdate, 5, 6,
                            {"beta1", "beta2", "clip_norm", "eps", "lr", "weight_decay"},
                            infer_adam, per_param_element(14), nullptr, {0, 2, 3}));
  specs.back().optional_attrs = {"decay_power", "decay_steps"};  // the poly schedule
}

}  // namespace lms::ops_internal
