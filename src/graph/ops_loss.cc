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

// x and w get gradients from one backward node that recomputes the logits
// chunk by chunk; the labels are integers.
absl::Status linear_xent_grad(GradContext& ctx) {
  const TensorId dloss = ctx.output_grads[0];
  if (dloss != kNoTensor && (wants(ctx, 0) || wants(ctx, 1))) {
    const Node fwd = ctx.graph.node(ctx.node);
    LMS_ASSIGN_OR_RETURN(
        auto outs, add_grad_node(ctx, OpKind::kLinearCrossEntropyBwd, "bwd",
                                 {fwd.inputs[0], fwd.inputs[1], fwd.inputs[2], dloss}, fwd.attrs));
    for (size_t i = 0; i < 2; ++i) {
      if (wants(ctx, i)) ctx.input_grads[i] = outs[i];
    }
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// N·V·D of x[..., D] (N rows) against V classes.
double nvd(const Shapes& in) { return numel(in[1]) * (numel(in[0]) / in[0].back()); }

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
  specs.push_back(make_schema_spec(OpKind::kMseLoss, per_input_element(3), mse_grad));
  specs.push_back(make_schema_spec(OpKind::kMseLossBwd, per_input_element(3)));
  specs.push_back(make_schema_spec(OpKind::kSoftDiceLoss, per_input_element(4), dice_grad));
  specs.push_back(make_schema_spec(OpKind::kSoftDiceLossBwd, per_input_element(4)));
  // Per logit: a max, an exp, a sum (forward); the exp again, a subtract
  // and a multiply (backward).
  specs.push_back(make_schema_spec(OpKind::kSoftmaxCrossEntropy, per_input_element(4), xent_grad));
  specs.push_back(make_schema_spec(OpKind::kSoftmaxCrossEntropyBwd, per_input_element(6)));
  for (size_t i = specs.size() - 2; i < specs.size(); ++i) {
    specs[i].def.bytes = xent_bytes;
  }
  // The logits x·wᵀ (2·N·V·D) and the softmax per logit forward; the logits
  // again, dx and dw (6·N·V·D) backward.
  specs.push_back(make_schema_spec(
      OpKind::kLinearCrossEntropy,
      [](const Attrs&, const Shapes& in, const Shapes&) {
        return 2 * nvd(in) + 4 * nvd(in) / in[0].back();
      },
      linear_xent_grad));
  specs.push_back(make_schema_spec(OpKind::kLinearCrossEntropyBwd,
                                   [](const Attrs&, const Shapes& in, const Shapes&) {
                                     return 6 * nvd(in) + 8 * nvd(in) / in[0].back();
                                   }));
  specs.push_back(make_schema_spec(OpKind::kReduceMean, per_input_element(1), reduce_mean_grad));
  specs.push_back(make_schema_spec(
      OpKind::kReduceMeanBwd,
      [](const Attrs&, const Shapes&, const Shapes& out) { return numel(out[0]); }));
  set_flag(specs, &OpDef::backward,
           {OpKind::kMseLossBwd, OpKind::kSoftDiceLossBwd, OpKind::kSoftmaxCrossEntropyBwd,
            OpKind::kLinearCrossEntropyBwd, OpKind::kReduceMeanBwd});
}

}  // namespace lms::ops_internal
