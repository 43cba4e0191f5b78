// The rules of the optimizer ops of docs/ops.md. The updates have no
// outputs: they write their mutated inputs (parameter and state) in place.
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "op_schema/op_dims.h"
#include "op_schema/op_rules.h"
#include "op_schema/spec_checks.h"

namespace lms {
namespace {

using Shapes = std::vector<Shape>;

absl::StatusOr<Shapes> global_norm(const OpInstance&) { return Shapes{Shape{}}; }

// increment (step[], norm?[]): with a norm, a non-finite one skips it.
absl::StatusOr<Shapes> increment(const OpInstance& spec) {
  LMS_RETURN_IF_ERROR(check_scalar(spec, spec.input_shapes[0], "step"));
  if (spec.input_shapes.size() > 1) {
    LMS_RETURN_IF_ERROR(check_scalar(spec, spec.input_shapes[1], "norm"));
  }
  return Shapes{};
}

absl::StatusOr<Shapes> amp_update_scale(const OpInstance& spec) {
  LMS_RETURN_IF_ERROR(amp_scale_attrs(spec).status());
  const char* names[] = {"scale", "growth_tracker", "norm"};
  for (size_t i = 0; i < 3; ++i) {
    LMS_RETURN_IF_ERROR(check_scalar(spec, spec.input_shapes[i], names[i]));
  }
  return Shapes{};
}

absl::StatusOr<Shapes> update(const OpInstance& spec) {
  LMS_RETURN_IF_ERROR(update_attrs(spec).status());
  return Shapes{};
}

// A real attribute >= 0 (lr, weight_decay, clip_norm).
absl::StatusOr<double> non_negative(const OpInstance& spec, absl::string_view key) {
  return real_attr_in(spec, key, 0, HUGE_VAL, false, true);
}

// The inputs: param, grad and the state of param's shape, then the scalars
// (adam's step), then scale[] and norm[] with loss scaling, else the
// optional norm[].
absl::Status check_update_inputs(const OpInstance& spec, const std::vector<std::string_view>& state,
                                 std::vector<std::string_view> scalars, bool loss_scaling) {
  const Shapes& in = spec.input_shapes;
  const Shapes like_param(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(state.size()));
  LMS_RETURN_IF_ERROR(check_same_shapes(spec, like_param, state));
  if (loss_scaling) {
    scalars.push_back("scale");
    scalars.push_back("norm");
    if (in.size() != state.size() + scalars.size()) {
      return invalid(
          spec,
          absl::StrCat("with loss_scaling = 1 the update takes ", state.size() + scalars.size(),
                       " inputs (the last two scale[] and norm[]), got ", in.size()));
    }
  } else if (in.size() > state.size() + scalars.size()) {
    scalars.push_back("norm");
  }
  for (size_t i = 0; i < scalars.size(); ++i) {
    LMS_RETURN_IF_ERROR(check_scalar(spec, in[state.size() + i], to_absl(scalars[i])));
  }
  return absl::OkStatus();
}

// Adam's optional poly schedule: both attributes or neither.
absl::Status read_poly_schedule(const OpInstance& spec, UpdateAttrs& a) {
  const bool steps = spec.attrs.contains("decay_steps"), power = spec.attrs.contains("decay_power");
  if (steps != power) {
    return invalid(spec,
                   "decay_steps and decay_power come together (the poly schedule) or not at all");
  }
  if (!steps) return absl::OkStatus();
  LMS_ASSIGN_OR_RETURN(a.decay_steps, int_attr(spec, "decay_steps"));
  if (a.decay_steps < 1) {
    return invalid(spec, absl::StrCat("decay_steps must be an integer >= 1, got ", a.decay_steps));
  }
  LMS_ASSIGN_OR_RETURN(a.decay_power,
                       real_attr_in(spec, "decay_power", 0, HUGE_VAL, /*open_lo=*/true, true));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<UpdateAttrs> update_attrs(const OpInstance& spec) {
  const bool adam = spec.op == OpKind::kAdamUpdate;
  UpdateAttrs a;
  if (spec.attrs.contains("loss_scaling")) {
    LMS_ASSIGN_OR_RETURN(a.loss_scaling, flag_attr(spec, "loss_scaling"));
  }
  if (adam) {
    LMS_RETURN_IF_ERROR(
        check_update_inputs(spec, {"param", "grad", "m", "v"}, {"step"}, a.loss_scaling));
  } else {
    LMS_RETURN_IF_ERROR(
        check_update_inputs(spec, {"param", "grad", "velocity"}, {}, a.loss_scaling));
  }
  LMS_ASSIGN_OR_RETURN(a.lr, non_negative(spec, "lr"));
  LMS_ASSIGN_OR_RETURN(a.weight_decay, non_negative(spec, "weight_decay"));
  LMS_ASSIGN_OR_RETURN(a.clip_norm, non_negative(spec, "clip_norm"));
  if (!adam) {
    LMS_ASSIGN_OR_RETURN(a.momentum, real_attr_in(spec, "momentum", 0, 1, false, true));
    return a;
  }
  LMS_ASSIGN_OR_RETURN(a.beta1, real_attr_in(spec, "beta1", 0, 1, false, true));
  LMS_ASSIGN_OR_RETURN(a.beta2, real_attr_in(spec, "beta2", 0, 1, false, true));
  LMS_ASSIGN_OR_RETURN(a.eps, real_attr_in(spec, "eps", 0, HUGE_VAL, true, true));
  LMS_RETURN_IF_ERROR(read_poly_schedule(spec, a));
  return a;
}

absl::StatusOr<AmpScaleAttrs> amp_scale_attrs(const OpInstance& spec) {
  AmpScaleAttrs a;
  LMS_ASSIGN_OR_RETURN(a.growth_factor,
                       real_attr_in(spec, "growth_factor", 1, HUGE_VAL, true, true));
  LMS_ASSIGN_OR_RETURN(a.backoff_factor, real_attr_in(spec, "backoff_factor", 0, 1, true, true));
  LMS_ASSIGN_OR_RETURN(a.growth_interval, int_attr(spec, "growth_interval"));
  // The tracker is a float32 tensor: it counts exactly up to 2^24.
  if (a.growth_interval < 1 || a.growth_interval > (int64_t{1} << 24)) {
    return invalid(spec, absl::StrCat("growth_interval must be an integer in [1, 2^24], got ",
                                      a.growth_interval));
  }
  return a;
}

namespace op_rules {

std::optional<RuleEntry> optimizer_rule(OpKind op) {
  switch (op) {
    case OpKind::kGlobalNorm:
      return RuleEntry{{1, -1}, global_norm, {}};
    case OpKind::kIncrement:
      return RuleEntry{{1, 2}, increment, {}};
    case OpKind::kSgdUpdate:
      return RuleEntry{
          {3, 5}, update, {{"clip_norm", "lr", "momentum", "weight_decay"}, {"loss_scaling"}}};
    case OpKind::kAdamUpdate:
      // The optional attributes are the poly schedule and loss scaling.
      return RuleEntry{{5, 7},
                       update,
                       {{"beta1", "beta2", "clip_norm", "eps", "lr", "weight_decay"},
                        {"decay_power", "decay_steps", "loss_scaling"}}};
    case OpKind::kAmpUpdateScale:
      return RuleEntry{
          {3, 3}, amp_update_scale, {{"backoff_factor", "growth_factor", "growth_interval"}, {}}};
    default:
      return std::nullopt;
  }
}

}  // namespace op_rules
}  // namespace lms
