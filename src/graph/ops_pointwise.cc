// Element-wise ops, activations, concat/slice along an axis and reshape of
// docs/ops.md.
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/broadcast.h"
#include "graph/ops_internal.h"
#include "lms/checked.h"
#include "lms/status.h"

namespace lms::ops_internal {
namespace {

using Shapes = std::vector<Shape>;

decltype(OpDef::flops) per_element(double factor) {
  return [factor](const Attrs&, const Shapes&, const Shapes& out) {
    return out.empty() ? 0.0 : factor * numel(out[0]);
  };
}

// The rule of an activation whose backward op takes (saved, dy): `saved` is
// the forward output ("y") or input ("x").
decltype(OpDef::grad) activation_grad(OpKind bwd_op, bool uses_output) {
  return [=](GradContext& ctx) -> absl::Status {
    if (ctx.output_grads[0] != kNoTensor && wants(ctx, 0)) {
      const Node fwd = ctx.graph.node(ctx.node);
      const TensorId saved = uses_output ? fwd.outputs[0] : fwd.inputs[0];
      LMS_ASSIGN_OR_RETURN(
          ctx.input_grads[0],
          add_grad_node1(ctx, bwd_op, "data", {saved, ctx.output_grads[0]}, fwd.attrs));
    }
    decline_rest(ctx);
    return absl::OkStatus();
  };
}

// The gradient `g` (the output's shape) of operand i, summed over the
// dimensions operand i was broadcast along.
absl::StatusOr<TensorId> to_operand_shape(GradContext& ctx, size_t i, TensorId g) {
  const Shape s = input_shape(ctx, i);
  if (ctx.graph.tensor(g).shape == s) return g;
  return add_grad_node1(ctx, OpKind::kSumTo, i == 0 ? "a_sum" : "b_sum", {g}, {{"shape", s}});
}

absl::Status add_grad(GradContext& ctx) {
  for (size_t i = 0; i < 2; ++i) {
    if (!wants(ctx, i)) continue;
    if (ctx.output_grads[0] == kNoTensor) {
      ctx.input_grads[i] = kNoTensor;
      continue;
    }
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[i], to_operand_shape(ctx, i, ctx.output_grads[0]));
  }
  return absl::OkStatus();
}

absl::Status mul_grad(GradContext& ctx) {
  const TensorId dy = ctx.output_grads[0];
  const Node fwd = ctx.graph.node(ctx.node);
  for (size_t i = 0; i < 2; ++i) {
    if (!wants(ctx, i) || dy == kNoTensor) continue;
    LMS_ASSIGN_OR_RETURN(const TensorId g, add_grad_node1(ctx, OpKind::kMul, i == 0 ? "a" : "b",
                                                          {dy, fwd.inputs[1 - i]}, {}));
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[i], to_operand_shape(ctx, i, g));
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// The gradient regenerates the forward node's mask from its seed and the
// step: dx = dropout_bwd(dy) with the forward attributes, no saved mask.
absl::Status dropout_grad(GradContext& ctx) {
  if (ctx.output_grads[0] != kNoTensor && wants(ctx, 0)) {
    const Node fwd = ctx.graph.node(ctx.node);
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0], add_grad_node1(ctx, OpKind::kDropoutBwd, "data",
                                                            {ctx.output_grads[0]}, fwd.attrs));
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

absl::Status scale_grad(GradContext& ctx) {
  if (ctx.output_grads[0] != kNoTensor && wants(ctx, 0)) {
    const Node fwd = ctx.graph.node(ctx.node);
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0], add_grad_node1(ctx, OpKind::kScale, "data",
                                                            {ctx.output_grads[0]}, fwd.attrs));
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// dx = cast(dy) back to x's dtype (PyTorch's gradient of Tensor.to).
absl::Status cast_grad(GradContext& ctx) {
  if (ctx.output_grads[0] != kNoTensor && wants(ctx, 0)) {
    const DType from = ctx.graph.tensor(ctx.graph.node(ctx.node).inputs[0]).dtype;
    Attrs a = {{"to", std::string(dtype_name(from))}};
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0],
                         add_grad_node1(ctx, OpKind::kCast, "data", {ctx.output_grads[0]}, a));
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// dx = reshape(dy) back to x's shape.
absl::Status reshape_grad(GradContext& ctx) {
  if (ctx.output_grads[0] != kNoTensor && wants(ctx, 0)) {
    Attrs a = {{"shape", input_shape(ctx, 0)}};
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0],
                         add_grad_node1(ctx, OpKind::kReshape, "data", {ctx.output_grads[0]}, a));
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// dx = transpose(dy) by the inverse permutation.
absl::Status transpose_grad(GradContext& ctx) {
  if (ctx.output_grads[0] != kNoTensor && wants(ctx, 0)) {
    LMS_ASSIGN_OR_RETURN(const std::vector<int64_t> perm,
                         attr_ints(ctx.graph.node(ctx.node).attrs, "perm"));
    std::vector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
    Attrs a = {{"perm", inverse}};
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0],
                         add_grad_node1(ctx, OpKind::kTranspose, "data", {ctx.output_grads[0]}, a));
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// The node's axis attribute, if it has one, for the nodes of its gradient
// (absent stays absent, so graphs without it print as before).
Attrs with_axis_of(const Node& fwd, Attrs a) {
  auto it = fwd.attrs.find(kAxisAttr);
  if (it != fwd.attrs.end()) a.emplace(std::string(kAxisAttr), it->second);
  return a;
}

// The gradient of each concat input is the matching slice of dy along the
// axis.
absl::Status concat_grad(GradContext& ctx) {
  const TensorId dy = ctx.output_grads[0];
  const Node fwd = ctx.graph.node(ctx.node);
  const size_t axis =
      *normalize_axis(attr_int_or(fwd.attrs, kAxisAttr, kDefaultAxis), input_shape(ctx, 0).size());
  const size_t n = ctx.input_grads.size();
  int64_t begin = 0;
  for (size_t i = 0; i < n && dy != kNoTensor; ++i) {
    const int64_t size = input_shape(ctx, i)[axis];
    if (wants(ctx, i)) {
      Attrs a = with_axis_of(fwd, {{"begin", begin}, {"size", size}});
      LMS_ASSIGN_OR_RETURN(ctx.input_grads[i],
                           add_grad_node1(ctx, OpKind::kSlice, str_cat("in", i), {dy}, a));
    }
    begin += size;
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// dx = concat(zeros[begin], dy, zeros[rest]) along the axis.
absl::Status slice_grad(GradContext& ctx) {
  const TensorId dy = ctx.output_grads[0];
  if (dy == kNoTensor || !wants(ctx, 0)) {
    decline_rest(ctx);
    return absl::OkStatus();
  }
  const Node fwd = ctx.graph.node(ctx.node);
  const Shape x = input_shape(ctx, 0);
  const size_t axis = *normalize_axis(attr_int_or(fwd.attrs, kAxisAttr, kDefaultAxis), x.size());
  const int64_t begin = std::get<int64_t>(fwd.attrs.at("begin"));
  const int64_t size = std::get<int64_t>(fwd.attrs.at("size"));
  std::vector<TensorId> parts;
  auto zeros = [&](int64_t count, std::string_view suffix) -> absl::Status {
    if (count == 0) return absl::OkStatus();
    Shape s = x;
    s[axis] = count;
    Attrs a = {{"shape", s}, {"value", 0.0}};
    LMS_ASSIGN_OR_RETURN(TensorId z, add_grad_node1(ctx, OpKind::kFill, suffix, {}, a));
    if (const DType d = ctx.graph.tensor(dy).dtype; d != DType::kFloat32) {
      // fill makes float32; concat takes dy's dtype (Note [Float dtypes of ops]).
      LMS_ASSIGN_OR_RETURN(
          z, add_grad_node1(ctx, OpKind::kCast, absl::StrCat(to_absl(suffix), "/cast"), {z},
                            {{"to", std::string(dtype_name(d))}}));
    }
    parts.push_back(z);
    return absl::OkStatus();
  };
  LMS_RETURN_IF_ERROR(zeros(begin, "zeros_before"));
  parts.push_back(dy);
  LMS_RETURN_IF_ERROR(zeros(x[axis] - begin - size, "zeros_after"));
  if (parts.size() == 1) {
    ctx.input_grads[0] = dy;
  } else {
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0], add_grad_node1(ctx, OpKind::kConcat, "data", parts,
                                                            with_axis_of(fwd, {})));
  }
  return absl::OkStatus();
}

}  // namespace

void register_pointwise_ops(std::vector<OpSpec>& specs) {
  specs.push_back(
      make_schema_spec(OpKind::kRelu, per_element(1), activation_grad(OpKind::kReluBwd, true)));
  specs.push_back(make_schema_spec(OpKind::kReluBwd, per_element(1)));
  specs.push_back(make_schema_spec(OpKind::kLeakyRelu, per_element(2),
                                   activation_grad(OpKind::kLeakyReluBwd, false)));
  specs.push_back(make_schema_spec(OpKind::kLeakyReluBwd, per_element(2)));
  specs.push_back(make_schema_spec(OpKind::kSigmoid, per_element(4),
                                   activation_grad(OpKind::kSigmoidBwd, true)));
  specs.push_back(make_schema_spec(OpKind::kSigmoidBwd, per_element(3)));
  // tanh counted as sigmoid (an exp and a division); its backward
  // dy * (1 - y * y) three.
  specs.push_back(
      make_schema_spec(OpKind::kTanh, per_element(4), activation_grad(OpKind::kTanhBwd, true)));
  specs.push_back(make_schema_spec(OpKind::kTanhBwd, per_element(3)));
  specs.push_back(
      make_schema_spec(OpKind::kClip, per_element(2), activation_grad(OpKind::kClipBwd, false)));
  specs.push_back(make_schema_spec(OpKind::kClipBwd, per_element(2)));
  // GELU: erf counted like sigmoid's exp (4), plus the scale, the add and two
  // multiplies. Its backward: Phi(x) (7), phi(x) (7), x * phi(x) + Phi(x)
  // and the product with dy (3).
  specs.push_back(
      make_schema_spec(OpKind::kGelu, per_element(8), activation_grad(OpKind::kGeluBwd, false)));
  specs.push_back(make_schema_spec(OpKind::kGeluBwd, per_element(17)));
  // Hard sigmoid: a multiply-add and two comparisons; its backward a
  // multiply-add, two comparisons and the product with dy. Hard swish: those
  // and the product with x (backward: x / 3 + 1/2 and the product with dy).
  specs.push_back(make_schema_spec(OpKind::kHardSigmoid, per_element(4),
                                   activation_grad(OpKind::kHardSigmoidBwd, false)));
  specs.push_back(make_schema_spec(OpKind::kHardSigmoidBwd, per_element(4)));
  specs.push_back(make_schema_spec(OpKind::kHardSwish, per_element(5),
                                   activation_grad(OpKind::kHardSwishBwd, false)));
  specs.push_back(make_schema_spec(OpKind::kHardSwishBwd, per_element(4)));
  specs.push_back(make_schema_spec(OpKind::kSoftmax, per_element(5),
                                   activation_grad(OpKind::kSoftmaxBwd, true)));
  specs.push_back(make_schema_spec(OpKind::kSoftmaxBwd, per_element(4)));
  specs.push_back(make_schema_spec(OpKind::kAdd, per_element(1), add_grad));
  specs.push_back(make_schema_spec(OpKind::kMul, per_element(1), mul_grad));
  specs.push_back(make_schema_spec(OpKind::kScale, per_element(1), scale_grad));
  // One add per element of x.
  specs.push_back(make_schema_spec(
      OpKind::kSumTo, [](const Attrs&, const Shapes& in, const Shapes&) { return numel(in[0]); }));
  // A hash and a multiply per element.
  specs.push_back(make_schema_spec(OpKind::kDropout, per_element(2), dropout_grad));
  specs.push_back(make_schema_spec(OpKind::kDropoutBwd, per_element(2)));
  // Data movement only: no floating-point work.
  specs.push_back(make_schema_spec(OpKind::kConcat, per_element(0), concat_grad));
  specs.push_back(make_schema_spec(OpKind::kSlice, per_element(0), slice_grad));
  specs.push_back(make_schema_spec(OpKind::kReshape, per_element(0), reshape_grad));
  specs.push_back(make_schema_spec(OpKind::kTranspose, per_element(0), transpose_grad));
  // A conversion per element.
  specs.push_back(make_schema_spec(OpKind::kCast, per_element(1), cast_grad));
  specs.push_back(make_schema_spec(OpKind::kFill, per_element(0),
                                   [](GradContext&) { return absl::OkStatus(); }));
  set_flag(specs, &OpDef::backward,
           {OpKind::kReluBwd, OpKind::kLeakyReluBwd, OpKind::kSigmoidBwd, OpKind::kTanhBwd,
            OpKind::kClipBwd, OpKind::kGeluBwd, OpKind::kHardSigmoidBwd, OpKind::kHardSwishBwd,
            OpKind::kSoftmaxBwd, OpKind::kDropoutBwd});
  set_flag(specs, &OpDef::recomputable,
           {OpKind::kRelu, OpKind::kLeakyRelu, OpKind::kSigmoid, OpKind::kTanh, OpKind::kSoftmax,
            OpKind::kAdd, OpKind::kMul, OpKind::kScale, OpKind::kConcat, OpKind::kSlice,
            OpKind::kClip, OpKind::kGelu, OpKind::kHardSigmoid, OpKind::kHardSwish,
            OpKind::kReshape, OpKind::kTranspose, OpKind::kDropout, OpKind::kCast});
}

}  // namespace lms::ops_internal
