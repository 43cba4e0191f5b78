// Losses and reductions of docs/ops.md: each reduces to a scalar loss[]
// (reduce_mean with an axis to that axis of size 1). softmax_cross_entropy
// reads int64 class labels, as embedding reads its ids.
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

// logits[N,C] and labels[N] (int64) (+ dloss[] for the backward); the
// ignore_index attribute is any int (absent: -100, PyTorch's default).
absl::StatusOr<Shapes> infer_xent(const Attrs& a, const Shapes& in, bool bwd) {
  const std::string_view op = bwd ? "softmax_cross_entropy_bwd" : "softmax_cross_entropy";
  if (a.contains("ignore_index")) {
    if (absl::Status s = attr_int(a, "ignore_index").status(); !s.ok()) {
      return op_error(op, s.message());
    }
  }
  const Shape& logits = in[0];
  if (logits.size() < 2) {
    return op_error(op, str_cat("logits must be [..., C] of rank 2 or more (classes on the last "
                                "axis), got ",
                                shape_str(logits)));
  }
  if (logits.size() > 2 && logits.back() == 1) {
    return op_error(op, str_cat("logits ", shape_str(logits),
                                " have one class on the last axis, where the classes go; "
                                "flatten an [N,C,1,...] output first (lms::flatten)"));
  }
  const Shape rows(logits.begin(), logits.end() - 1);
  if (in[1] != rows) {
    return op_error(op, str_cat("labels ", shape_str(in[1]), " must be ", shape_str(rows),
                                ", one class index per row of logits ", shape_str(logits)));
  }
  if (!bwd) return Shapes{Shape{}};
  LMS_RETURN_IF_ERROR(check_scalar(op, "dloss", in[2]));
  return Shapes{logits};
}

// The labels are integers: only the logits get a gradient.
absl::Status xent_grad(GradContext& ctx) {
  const TensorId dloss = ctx.output_grads[0];
  if (dloss != kNoTensor && wants(ctx, 0)) {
    const Node fwd = ctx.graph.node(ctx.node);
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0],
                         add_grad_node1(ctx, OpKind::kSoftmaxCrossEntropyBwd, "logits",
                                        {fwd.inputs[0], fwd.inputs[1], dloss}, fwd.attrs));
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// Bytes read and written: the logits (and the gradient) in float32, the
// labels in int64, the scalars.
double xent_bytes(const Attrs&, const Shapes& in, const Shapes& out) {
  double bytes = numel(in[0]) * static_cast<double>(dtype_bytes(DType::kFloat32)) +
                 numel(in[1]) * static_cast<double>(dtype_bytes(DType::kInt64));
  for (size_t i = 2; i < in.size(); ++i) bytes += numel(in[i]) * 4.0;
  return bytes + numel(out[0]) * 4.0;
}

// Without an axis: the scalar mean of all elements. With one: x with that
// axis reduced to size 1 (ONNX ReduceMean, keepdims=1).
absl::StatusOr<Shapes> infer_reduce_mean(const Attrs& a, const Shapes& in) {
  if (!a.contains(kAxisAttr)) return Shapes{Shape{}};
  LMS_ASSIGN_OR_RETURN(const size_t axis, axis_attr("reduce_mean", a, in[0], "x"));
  Shape y = in[0];
  y[axis] = 1;
  return Shapes{y};
}

absl::StatusOr<Shapes> infer_reduce_mean_bwd(const Attrs& a, const Shapes& in) {
  constexpr std::string_view kOp = "reduce_mean_bwd";
  LMS_ASSIGN_OR_RETURN(Shape shape, shape_attr(kOp, a, "input_shape"));
  if (!a.contains(kAxisAttr)) {
    LMS_RETURN_IF_ERROR(check_scalar(kOp, "dy", in[0]));
    return Shapes{shape};
  }
  LMS_ASSIGN_OR_RETURN(const size_t axis, axis_attr(kOp, a, shape, "input_shape"));
  Shape dy = shape;
  dy[axis] = 1;
  if (in[0] != dy) {
    return op_error(kOp, str_cat("dy ", shape_str(in[0]), " must be input_shape ", shape_str(shape),
                                 " with axis ", axis, " reduced to 1, ", shape_str(dy)));
  }
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
    const Attrs& fwd = ctx.graph.node(ctx.node).attrs;
    if (auto it = fwd.find(kAxisAttr); it != fwd.end()) a.emplace(it->first, it->second);
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
  // Per logit: a max, an exp, a sum (forward); the exp again, a subtract
  // and a multiply (backward).
  specs.push_back(make_spec(
      OpKind::kSoftmaxCrossEntropy, 2, 2, {},
      [](const Attrs& a, const Shapes& in) { return infer_xent(a, in, false); },
      per_input_element(4), xent_grad));
  specs.push_back(make_spec(
      OpKind::kSoftmaxCrossEntropyBwd, 3, 3, {},
      [](const Attrs& a, const Shapes& in) { return infer_xent(a, in, true); },
      per_input_element(6)));
  for (size_t i = specs.size() - 2; i < specs.size(); ++i) {
    specs[i].optional_attrs = {"ignore_index"};
    specs[i].def.bytes = xent_bytes;
  }
  specs.push_back(make_spec(OpKind::kReduceMean, 1, 1, {}, infer_reduce_mean, per_input_element(1),
                            reduce_mean_grad));
  specs.back().optional_attrs = {std::string(kAxisAttr)};
  specs.push_back(
      make_spec(OpKind::kReduceMeanBwd, 1, 1, {"input_shape"}, infer_reduce_mean_bwd,
                [](const Attrs&, const Shapes&, const Shapes& out) { return numel(out[0]); }));
  specs.back().optional_attrs = {std::string(kAxisAttr)};
  set_flag(specs, &OpDef::backward,
           {OpKind::kMseLossBwd, OpKind::kSoftDiceLossBwd, OpKind::kSoftmaxCrossEntropyBwd,
            OpKind::kReduceMeanBwd});
}

}  // namespace lms::ops_internal
