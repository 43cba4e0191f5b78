// The rules of instance, batch and layer normalisation and bn_stats_update
// of docs/ops.md.
#include <optional>

#include "absl/strings/str_cat.h"
#include "lms/status.h"
#include "op_schema/op_dims.h"
#include "op_schema/op_rules.h"
#include "op_schema/spec_checks.h"

namespace lms {
namespace {

using Shapes = std::vector<Shape>;

// x[N,C,S] of rank >= min_rank, gamma[C] and eps in (0, 1]; instance norm
// needs a spatial part (statistics over S), batch norm at least [N,C].
absl::StatusOr<double> check_norm(const OpInstance& spec, size_t min_rank) {
  const Shape& x = spec.input_shapes[0];
  if (x.size() < min_rank) {
    return invalid(spec, absl::StrCat("input x must have at least ", min_rank,
                                      " dims [N,C,...], got ", shape_str(x)));
  }
  const Shape& gamma = spec.input_shapes[1];
  if (gamma != Shape{x[1]}) {
    return invalid(spec, absl::StrCat("gamma must have shape [", x[1], "] (channels of x), got ",
                                      shape_str(gamma)));
  }
  return real_attr_in(spec, "eps", 0, 1, /*open_lo=*/true);
}

bool is_norm_backward(OpKind op) {
  return op == OpKind::kInstanceNormBwd || op == OpKind::kBatchNormBwd ||
         op == OpKind::kLayerNormBwd;
}

// instance_norm (x, gamma, beta -> y) and the backward ops of instance and
// batch norm (x, gamma, dy -> dx, dgamma, dbeta).
absl::StatusOr<Shapes> norm(const OpInstance& spec) {
  LMS_RETURN_IF_ERROR(norm_eps(spec).status());
  const Shape &x = spec.input_shapes[0], &c = spec.input_shapes[1];
  return is_norm_backward(spec.op) ? Shapes{x, c, c} : Shapes{x};
}

absl::StatusOr<Shapes> batch_norm(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(const BatchNormDims d, batch_norm_dims(spec));
  const Shape &x = spec.input_shapes[0], &c = spec.input_shapes[1];
  if (d.mode == BatchNormMode::kTrainingSavingStats) return Shapes{x, c, c};
  return Shapes{x};
}

absl::StatusOr<Shapes> layer_norm(const OpInstance& spec) {
  LMS_RETURN_IF_ERROR(layer_norm_dims(spec).status());
  const Shape &x = spec.input_shapes[0], &c = spec.input_shapes[1];
  return is_norm_backward(spec.op) ? Shapes{x, c, c} : Shapes{x};
}

absl::StatusOr<Shapes> bn_stats_update(const OpInstance& spec) {
  LMS_RETURN_IF_ERROR(bn_stats_update_dims(spec).status());
  return Shapes{};
}

// batch_norm's training attribute: 1 (absent) or 0 (eval mode).
absl::StatusOr<bool> training_attr(const OpInstance& spec) {
  if (!spec.attrs.contains("training")) return true;
  LMS_ASSIGN_OR_RETURN(int64_t v, int_attr(spec, "training"));
  if (v != 0 && v != 1) {
    return invalid(spec, absl::StrCat("training must be 0 (eval) or 1 (training), got ", v));
  }
  return v == 1;
}

}  // namespace

absl::StatusOr<double> norm_eps(const OpInstance& spec) {
  const bool batch = spec.op == OpKind::kBatchNorm || spec.op == OpKind::kBatchNormBwd;
  const size_t min_rank = batch ? 2 : 3;
  LMS_ASSIGN_OR_RETURN(double eps, check_norm(spec, min_rank));
  const Shape &x = spec.input_shapes[0], &c = spec.input_shapes[1];
  if (is_norm_backward(spec.op)) {
    LMS_RETURN_IF_ERROR(check_same_shapes(spec, {x, spec.input_shapes[2]}, {"x", "dy"}));
  } else if (spec.input_shapes[2] != c) {
    return invalid(spec, absl::StrCat("beta must have shape ", shape_str(c), ", got ",
                                      shape_str(spec.input_shapes[2])));
  }
  return eps;
}

// x, gamma, beta, running_mean?[C], running_var?[C] (both or neither). With
// the running statistics, training mode also outputs the batch mean and
// biased variance [C] that bn_stats_update folds into them; eval mode
// normalises with them and outputs y only.
absl::StatusOr<BatchNormDims> batch_norm_dims(const OpInstance& spec) {
  const Shapes& in = spec.input_shapes;
  BatchNormDims d;
  LMS_ASSIGN_OR_RETURN(d.eps, check_norm(spec, 2));
  if (in[2] != in[1]) {
    return invalid(
        spec, absl::StrCat("beta must have shape ", shape_str(in[1]), ", got ", shape_str(in[2])));
  }
  LMS_ASSIGN_OR_RETURN(const bool training, training_attr(spec));
  if (in.size() == 4) {
    return invalid(spec, "running_mean and running_var come together (5 inputs) or not at all");
  }
  const bool running = in.size() == 5;
  for (size_t i = 3; i < in.size(); ++i) {
    if (in[i] == in[1]) continue;
    return invalid(spec, absl::StrCat(i == 3 ? "running_mean" : "running_var", " must have shape ",
                                      shape_str(in[1]), ", got ", shape_str(in[i])));
  }
  if (spec.attrs.contains("momentum")) {
    if (!running) return invalid(spec, "momentum needs running_mean and running_var inputs");
    LMS_RETURN_IF_ERROR(real_attr_in(spec, "momentum", 0, 1).status());
  }
  if (!training && !running) {
    return invalid(spec, "training = 0 (eval mode) needs running_mean and running_var inputs");
  }
  d.mode = !training ? BatchNormMode::kEval
           : running ? BatchNormMode::kTrainingSavingStats
                     : BatchNormMode::kTraining;
  return d;
}

// layer_norm: x[..., C] of rank 2 to 4, gamma[C], beta[C] (the backward op:
// dy like x) and eps in (0, 1]; statistics per row over C.
absl::StatusOr<LayerNormDims> layer_norm_dims(const OpInstance& spec) {
  const bool backward = spec.op == OpKind::kLayerNormBwd;
  const Shape& x = spec.input_shapes[0];
  if (x.size() < 2 || x.size() > 4) {
    return invalid(spec,
                   absl::StrCat("input x must have 2 to 4 dims [..., C], got ", shape_str(x)));
  }
  const Shape c = {x.back()};
  if (spec.input_shapes[1] != c) {
    return invalid(
        spec, absl::StrCat("gamma must have shape ", shape_str(c), " (the last dim of x), got ",
                           shape_str(spec.input_shapes[1])));
  }
  const Shape& want = backward ? x : c;
  if (spec.input_shapes[2] != want) {
    return invalid(spec, absl::StrCat(backward ? "dy" : "beta", " must have shape ",
                                      shape_str(want), ", got ", shape_str(spec.input_shapes[2])));
  }
  LayerNormDims d;
  LMS_ASSIGN_OR_RETURN(d.eps, real_attr_in(spec, "eps", 0, 1, /*open_lo=*/true));
  d.cols = x.back();
  d.rows = num_elements(x) / d.cols;
  return d;
}

// running_mean, running_var, mean, var, all [C]; count >= 2 elements per
// channel (the unbiased variance divides by count - 1).
absl::StatusOr<BnStatsUpdateDims> bn_stats_update_dims(const OpInstance& spec) {
  const Shapes& in = spec.input_shapes;
  if (in[0].size() != 1) {
    return invalid(spec, absl::StrCat("running_mean must be 1-D [C], got ", shape_str(in[0])));
  }
  LMS_RETURN_IF_ERROR(check_same_shapes(spec, in, {"running_mean", "running_var", "mean", "var"}));
  BnStatsUpdateDims d;
  d.channels = in[0][0];
  LMS_ASSIGN_OR_RETURN(d.momentum, real_attr_in(spec, "momentum", 0, 1));
  LMS_ASSIGN_OR_RETURN(d.count, int_attr(spec, "count"));
  if (d.count < 2) {
    return invalid(spec, absl::StrCat("count (elements per channel) must be >= 2, got ", d.count));
  }
  return d;
}

namespace op_rules {

std::optional<RuleEntry> norm_rule(OpKind op) {
  switch (op) {
    case OpKind::kInstanceNorm:
    case OpKind::kInstanceNormBwd:
    case OpKind::kBatchNormBwd:
      return RuleEntry{{3, 3}, norm, {{"eps"}, {}}};
    case OpKind::kBatchNorm:
      return RuleEntry{{3, 5}, batch_norm, {{"eps"}, {"momentum", "training"}}};
    case OpKind::kLayerNorm:
    case OpKind::kLayerNormBwd:
      return RuleEntry{{3, 3}, layer_norm, {{"eps"}, {}}};
    case OpKind::kBnStatsUpdate:
      return RuleEntry{{4, 4}, bn_stats_update, {{"count", "momentum"}, {}}};
    default:
      return std::nullopt;
  }
}

}  // namespace op_rules
}  // namespace lms
