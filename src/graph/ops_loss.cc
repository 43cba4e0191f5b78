// Losses and reductions of docs/ops.md: each reduces to a scalar loss[].
#include <cmath>

#include "absl/strings/str_cat.h"
#include "graph/ops_internal.h"
#include "lms/status.h"

namespace lms::ops_internal {
namespace {

using Shapes = std::vector<Shape>;

absl::Status check_scalar(std::string_view op, std::string_view what, const Shape& s) {
  if (s.empty()) return absl::OkStatus();
  return op_error(op, str_cat(what, " must be a scalar (shape []), got ", shape_str(s)));
}

absl::StatusOr<Shapes> infer_mse(const Shapes& in, bool bwd) {
  const std::string_view op = bwd ? "mse_loss_bwd" : "mse_loss";
  LMS_RETURN_IF_ERROR(check_same_shapes(op, {in[0], in[1]}, {"pred", "target"}));
  if (!bwd) return Shapes{Shape{}};
  LMS_RETURN_IF_ERROR(check_scalar(op, "dloss", in[2]));
  return Shapes{in[0]};
}

absl::StatusOr<Shapes> infer_dice(const Attrs& a, const Shapes& in, bool bwd) {
  const std::string_view op = bwd ? "soft_dice_loss_bwd" : "soft_dice_loss";
  if (in[0].size() < 3) {
    return op_error(op, str_cat("probs must have at least 3 dims [N,C,S], got ", shape_str(in[0])));
  }
  LMS_RETURN_IF_ERROR(check_same_shapes(op, {in[0], in[1]}, {"probs", "target"}));
  LMS_RETURN_IF_ERROR(real_attr_in(op, a, "eps", 0, HUGE_VAL, false, true).status());
  if (!bwd) return Shapes{Shape{}};
  LMS_RETURN_IF_ERROR(check_scalar(op, "dloss", in[2]));
  return Shapes{in[0]};
}

absl::StatusOr<Shapes> infer_reduce_mean_bwd(const Attrs& a, const Shapes& in) {
  LMS_RETURN_IF_ERROR(check_scalar("reduce_mean_bwd", "dy", in[0]));
  LMS_ASSIGN_OR_RETURN(Shape shape, shape_attr("reduce_mean_bwd", a, "input_shape"));
  return Shapes{shape};
}

absl::Status mse_grad(GradContext& ctx) {
  const TensorId dloss = ctx.output_grads[0];
  if (dloss != kNoTensor && (wants(ctx, 0) || wants(ctx, 1))) {
    const Node fwd = ctx.graph.node(ctx.node);
    LMS_ASSIGN_OR_RETURN(TensorId dpred, add_grad_node1(ctx, OpKind::kMseLossBwd, "pred",
                                                        {fwd.inputs[0], fwd.inputs[1], dloss}, {}));
    // The loss is symmetric in (pred - target): dtarget = -dpred.
    if (wants(ctx, 1)) {
      LMS_ASSIGN_OR_RETURN(ctx.input_grads[1], add_grad_node1(ctx, OpKind::kScale, "target",
                                                              {dpred}, {{"factor", -1.0}}));
    }
    if (wants(ctx, 0)) ctx.input_grads[0] = dpred;
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

absl::Status dice_grad(GradContext& ctx) {
  if (wants(ctx, 1)) {
    return op_error("soft_dice_loss",
                    "no gradient rule for the target (input 1); the target must not depend on "
                    "parameters");
  }
  const TensorId dloss = ctx.output_grads[0];
  if (dloss != kNoTensor && wants(ctx, 0)) {
    const Node fwd = ctx.graph.node(ctx.node);
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0],
                         add_grad_node1(ctx, OpKind::kSoftDiceLossBwd, "probs",
                                        {fwd.inputs[0], fwd.inputs[1], dloss}, fwd.attrs));
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

absl::Status reduce_mean_grad(GradContext& ctx) {
  const TensorId dy = ctx.output_grads[0];
  if (dy != kNoTensor && wants(ctx, 0)) {
    Attrs a = {{"input_shape", input_shape(ctx, 0)}};
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0],
                         add_grad_node1(ctx, OpKind::kReduceMeanBwd, "data", {dy}, a));
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// FLOPs proportional to the elements of the first input (or output for
// reduce_mean_bwd).
decltype(OpDef::flops) per_input_element(double factor) {
  return [factor](const Attrs&, const Shapes& in, const Shapes&) { return factor * numel(in[0]); };
}

}  // namespace

void register_loss_ops(std::vector<OpSpec>& specs) {
  specs.push_back(make_spec(
      OpKind::kMseLoss, 2, 2, {},
      [](const Attrs&, const Shapes& in) { return infer_mse(in, false); }, per_input_element(3),
      mse_grad));
  specs.push_back(make_spec(
      OpKind::kMseLossBwd, 3, 3, {},
      [](const Attrs&, const Shapes& in) { return infer_mse(in, true); }, per_input_element(3)));
  specs.push_back(make_spec(
      OpKind::kSoftDiceLoss, 2, 2, {"eps"},
      [](const Attrs& a, const Shapes& in) { return infer_dice(a, in, false); },
      per_input_element(4), dice_grad));
  specs.push_back(make_spec(
      OpKind::kSoftDiceLossBwd, 3, 3, {"eps"},
      [](const Attrs& a, const Shapes& in) { return infer_dice(a, in, true); },
      per_input_element(4)));
  specs.push_back(make_spec(
      OpKind::kReduceMean, 1, 1, {},
      [](const Attrs&, const Shapes&) -> absl::StatusOr<Shapes> { return Shapes{Shape{}}; },
      per_input_element(1), reduce_mean_grad));
  specs.push_back(
      make_spec(OpKind::kReduceMeanBwd, 1, 1, {"input_shape"}, infer_reduce_mean_bwd,
                [](const Attrs&, const Shapes&, const Shapes& out) { return numel(out[0]); }));
  set_flag(specs, &OpDef::backward,
           {OpKind::kMseLossBwd, OpKind::kSoftDiceLossBwd, OpKind::kReduceMeanBwd});
}

}  // namespace lms::ops_internal
