// Instance, batch and layer normalisation of docs/ops.md: batch_norm in
// training mode (batch statistics, optionally saving them for the running
// averages) or eval mode (running statistics), bn_stats_update, the
// step-commit update of the running averages, and layer_norm over the last
// axis.
#include "absl/strings/str_cat.h"
#include "graph/ops_internal.h"
#include "lms/status.h"

namespace lms::ops_internal {
namespace {

using Shapes = std::vector<Shape>;

// Per-element work: mean, variance, normalise, scale and shift.
constexpr double kNormFlopsPerElement = 5;

// x[N,C,S], gamma[C] and a positive eps; instance norm needs a spatial part
// (statistics over S), batch norm at least [N,C].
absl::Status check_norm(std::string_view op, const Attrs& a, const Shape& x, const Shape& gamma,
                        size_t min_rank) {
  if (x.size() < min_rank) {
    return op_error(op, str_cat("input x must have at least ", min_rank, " dims [N,C,...], got ",
                                shape_str(x)));
  }
  if (gamma != Shape{x[1]}) {
    return op_error(
        op, str_cat("gamma must have shape [", x[1], "] (channels of x), got ", shape_str(gamma)));
  }
  return real_attr_in(op, a, "eps", 0, 1, /*open_lo=*/true).status();
}

decltype(OpDef::infer) infer_norm(std::string op, size_t min_rank) {
  return [=](const Attrs& a, const Shapes& in) -> absl::StatusOr<Shapes> {
    LMS_RETURN_IF_ERROR(check_norm(op, a, in[0], in[1], min_rank));
    if (in[2] != in[1]) {
      return op_error(
          op, str_cat("beta must have shape ", shape_str(in[1]), ", got ", shape_str(in[2])));
    }
    return Shapes{in[0]};
  };
}

// (x, gamma, dy) -> dx, dgamma, dbeta.
decltype(OpDef::infer) infer_norm_bwd(std::string op, size_t min_rank) {
  return [=](const Attrs& a, const Shapes& in) -> absl::StatusOr<Shapes> {
    LMS_RETURN_IF_ERROR(check_norm(op, a, in[0], in[1], min_rank));
    LMS_RETURN_IF_ERROR(check_same_shapes(op, {in[0], in[2]}, {"x", "dy"}));
    return Shapes{in[0], in[1], in[1]};
  };
}

// batch_norm's training attribute: 1 (absent) or 0 (eval mode).
absl::StatusOr<bool> training_attr(std::string_view op, const Attrs& a) {
  if (!a.contains("training")) return true;
  auto v = attr_int(a, "training");
  if (!v.ok()) return op_error(op, v.status().message());
  if (*v != 0 && *v != 1) {
    return op_error(op, str_cat("training must be 0 (eval) or 1 (training), got ", *v));
  }
  return *v == 1;
}

// x, gamma, beta, running_mean?[C], running_var?[C] (both or neither). With
// the running statistics, training mode also outputs the batch mean and
// biased variance [C] that bn_stats_update folds into them; eval mode
// normalises with them and outputs y only.
absl::StatusOr<Shapes> infer_batch_norm(const Attrs& a, const Shapes& in) {
  constexpr std::string_view kOp = "batch_norm";
  LMS_ASSIGN_OR_RETURN(Shapes y, infer_norm(std::string(kOp), 2)(a, in));
  LMS_ASSIGN_OR_RETURN(bool training, training_attr(kOp, a));
  if (in.size() == 4) {
    return op_error(kOp, "running_mean and running_var come together (5 inputs) or not at all");
  }
  const bool running = in.size() == 5;
  for (size_t i = 3; i < in.size(); ++i) {
    if (in[i] != in[1]) {
      return op_error(kOp, str_cat(i == 3 ? "running_mean" : "running_var", " must have shape ",
                                   shape_str(in[1]), ", got ", shape_str(in[i])));
    }
  }
  if (a.contains("momentum")) {
    if (!running) return op_error(kOp, "momentum needs running_mean and running_var inputs");
    LMS_RETURN_IF_ERROR(real_attr_in(kOp, a, "momentum", 0, 1, false, false).status());
  }
  if (!training && !running) {
    return op_error(kOp, "training = 0 (eval mode) needs running_mean and running_var inputs");
  }
  if (training && running) return Shapes{in[0], in[1], in[1]};
  return y;
}

// running_mean, running_var, mean, var, all [C]; count >= 2 elements per
// channel (the unbiased variance divides by count - 1).
absl::StatusOr<Shapes> infer_bn_stats_update(const Attrs& a, const Shapes& in) {
  constexpr std::string_view kOp = "bn_stats_update";
  if (in[0].size() != 1) {
    return op_error(kOp, str_cat("running_mean must be 1-D [C], got ", shape_str(in[0])));
  }
  LMS_RETURN_IF_ERROR(check_same_shapes(kOp, in, {"running_mean", "running_var", "mean", "var"}));
  LMS_RETURN_IF_ERROR(real_attr_in(kOp, a, "momentum", 0, 1, false, false).status());
  auto count = attr_int(a, "count");
  if (!count.ok()) return op_error(kOp, count.status().message());
  if (*count < 2) {
    return op_error(kOp, str_cat("count (elements per channel) must be >= 2, got ", *count));
  }
  return Shapes{};
}

decltype(OpDef::grad) norm_grad(OpKind bwd_op) {
  return [=](GradContext& ctx) -> absl::Status {
    const Node& node = ctx.graph.node(ctx.node);
    if (node.op == OpKind::kBatchNorm) {
      LMS_ASSIGN_OR_RETURN(bool training, training_attr("batch_norm", node.attrs));
      if (!training) {
        return absl::UnimplementedError(
            "batch_norm in eval mode (training = 0) has no gradient rule; train with training = 1");
      }
    }
    const TensorId dy = ctx.output_grads[0];
    if (dy != kNoTensor && (wants(ctx, 0) || wants(ctx, 1) || wants(ctx, 2))) {
      const Node fwd = ctx.graph.node(ctx.node);
      Attrs attrs = {{"eps", fwd.attrs.at("eps")}};  // not momentum / training
      LMS_ASSIGN_OR_RETURN(
          auto outs, add_grad_node(ctx, bwd_op, "bwd", {fwd.inputs[0], fwd.inputs[1], dy}, attrs));
      for (size_t i = 0; i < 3; ++i) {
        if (wants(ctx, i)) ctx.input_grads[i] = outs[i];
      }
    }
    decline_rest(ctx);
    return absl::OkStatus();
  };
}

double norm_flops(const Shapes& in) { return kNormFlopsPerElement * numel(in[0]); }

// layer_norm: x[..., C] of rank 2 to 4, gamma[C], beta[C] (the backward op:
// dy like x) and a positive eps; statistics per row over C.
absl::Status check_layer_norm(std::string_view op, const Attrs& a, const Shapes& in,
                              bool backward) {
  const Shape& x = in[0];
  if (x.size() < 2 || x.size() > 4) {
    return op_error(op, str_cat("input x must have 2 to 4 dims [..., C], got ", shape_str(x)));
  }
  const Shape c = {x.back()};
  if (in[1] != c) {
    return op_error(op, str_cat("gamma must have shape ", shape_str(c),
                                " (the last dim of x), got ", shape_str(in[1])));
  }
  const Shape& want = backward ? x : c;
  if (in[2] != want) {
    return op_error(op, str_cat(backward ? "dy" : "beta", " must have shape ", shape_str(want),
                                ", got ", shape_str(in[2])));
  }
  return real_attr_in(op, a, "eps", 0, 1, /*open_lo=*/true).status();
}

absl::StatusOr<Shapes> infer_layer_norm(const Attrs& a, const Shapes& in) {
  LMS_RETURN_IF_ERROR(check_layer_norm("layer_norm", a, in, false));
  return Shapes{in[0]};
}

// (x, gamma, dy) -> dx, dgamma, dbeta; the row statistics are recomputed
// from x, as instance_norm_bwd and batch_norm_bwd do, so the forward saves
// nothing beyond its inputs.
absl::StatusOr<Shapes> infer_layer_norm_bwd(const Attrs& a, const Shapes& in) {
  LMS_RETURN_IF_ERROR(check_layer_norm("layer_norm_bwd", a, in, true));
  return Shapes{in[0], in[1], in[1]};
}

}  // namespace

void register_norm_ops(std::vector<OpSpec>& specs) {
  auto flops = [](const Attrs&, const Shapes& in, const Shapes&) { return norm_flops(in); };
  specs.push_back(make_spec(OpKind::kInstanceNorm, 3, 3, {"eps"}, infer_norm("instance_norm", 3),
                            flops, norm_grad(OpKind::kInstanceNormBwd)));
  specs.push_back(make_spec(OpKind::kInstanceNormBwd, 3, 3, {"eps"},
                            infer_norm_bwd("instance_norm_bwd", 3), flops));
  specs.push_back(make_spec(OpKind::kBatchNorm, 3, 5, {"eps"}, infer_batch_norm, flops,
                            norm_grad(OpKind::kBatchNormBwd)));
  specs.back().optional_attrs = {"momentum", "training"};
  specs.push_back(
      make_spec(OpKind::kBatchNormBwd, 3, 3, {"eps"}, infer_norm_bwd("batch_norm_bwd", 2), flops));
  // Two multiply-adds per running statistic, one scale for the variance.
  specs.push_back(
      make_spec(OpKind::kBnStatsUpdate, 4, 4, {"count", "momentum"}, infer_bn_stats_update,
                [](const Attrs&, const Shapes& in, const Shapes&) { return 5 * numel(in[0]); },
                nullptr, {0, 1}));
  specs.push_back(make_spec(OpKind::kLayerNorm, 3, 3, {"eps"}, infer_layer_norm, flops,
                            norm_grad(OpKind::kLayerNormBwd)));
  specs.push_back(make_spec(OpKind::kLayerNormBwd, 3, 3, {"eps"}, infer_layer_norm_bwd, flops));
  set_flag(specs, &OpDef::recomputable,
           {OpKind::kInstanceNorm, OpKind::kBatchNorm, OpKind::kLayerNorm});
  set_flag(specs, &OpDef::backward,
           {OpKind::kInstanceNormBwd, OpKind::kBatchNormBwd, OpKind::kLayerNormBwd});
}

}  // namespace lms::ops_internal
