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

absl::StatusOr<double> finite_real(std::string_view op, const Attrs& a, std::string_view key) {
  auto v = attr_real(a, key);
  if (!v.ok()) return op_error(op, v.status().message());
  if (!std::isfinite(*v)) return op_error(op, str_cat(key, " must be finite, got ", *v));
  return *v;
}

// Unary ops: the output has the input's shape.
decltype(OpDef::infer) same_shape(std::string op, std::string real_attr = "") {
  return [op, real_attr](const Attrs& a, const Shapes& in) -> absl::StatusOr<Shapes> {
    if (!real_attr.empty()) LMS_RETURN_IF_ERROR(finite_real(op, a, real_attr).status());
    return Shapes{in[0]};
  };
}

// (y or x, dy) -> dx, both of one shape.
decltype(OpDef::infer) bwd_shape(std::string op, std::string first, std::string real_attr = "") {
  return [=](const Attrs& a, const Shapes& in) -> absl::StatusOr<Shapes> {
    if (!real_attr.empty()) LMS_RETURN_IF_ERROR(finite_real(op, a, real_attr).status());
    LMS_RETURN_IF_ERROR(check_same_shapes(op, in, {first, "dy"}));
    return Shapes{in[0]};
  };
}

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

absl::StatusOr<Shapes> infer_softmax(std::string_view op, const Attrs& a, const Shapes& in) {
  LMS_RETURN_IF_ERROR(axis_attr(op, a, in[0], in.size() > 1 ? "y" : "x").status());
  if (in.size() > 1) LMS_RETURN_IF_ERROR(check_same_shapes(op, in, {"y", "dy"}));
  return Shapes{in[0]};
}

// add / mul broadcast (src/common/broadcast.h); at most one operand is
// broadcast, so the output has the other's shape.
absl::StatusOr<Shapes> infer_binary(std::string_view op, const Shapes& in) {
  const std::optional<Shape> y = broadcast_shape(in[0], in[1]);
  if (!y) {
    return op_error(op, str_cat("a ", shape_str(in[0]), " and b ", shape_str(in[1]),
                                " do not broadcast: aligned at the last dimension, each pair "
                                "must be equal or one of them 1"));
  }
  if (*y != in[0] && *y != in[1]) {
    return op_error(
        op, str_cat("a ", shape_str(in[0]), " and b ", shape_str(in[1]), " both broadcast to ",
                    shape_str(*y), "; one operand must have the output's shape"));
  }
  return Shapes{*y};
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

// sum_to(x; shape): `shape` broadcasts to x's shape; the output has it.
absl::StatusOr<Shapes> infer_sum_to(const Attrs& a, const Shapes& in) {
  constexpr std::string_view kOp = "sum_to";
  LMS_ASSIGN_OR_RETURN(Shape y, shape_attr(kOp, a, "shape"));
  if (in[0].size() > SumToPlan::kMaxRank) {
    return op_error(kOp, str_cat("x ", shape_str(in[0]), " has rank ", in[0].size(), "; at most ",
                                 SumToPlan::kMaxRank, " is supported"));
  }
  if (!sum_to_plan(in[0], y)) {
    return op_error(kOp, str_cat("shape ", shape_str(y), " must broadcast to x ", shape_str(in[0]),
                                 ": of no higher rank, and each dimension (aligned at the "
                                 "last) equal to x's or 1"));
  }
  return Shapes{y};
}

// dropout / dropout_bwd: ratio in [0, 1), the output has the input's shape.
decltype(OpDef::infer) dropout_shape(std::string op) {
  return [op](const Attrs& a, const Shapes& in) -> absl::StatusOr<Shapes> {
    LMS_ASSIGN_OR_RETURN(double ratio, finite_real(op, a, "ratio"));
    if (!(ratio >= 0.0 && ratio < 1.0)) {
      return op_error(op, str_cat("ratio must be in [0, 1), got ", ratio));
    }
    if (auto seed = attr_int(a, "seed"); !seed.ok()) return op_error(op, seed.status().message());
    return Shapes{in[0]};
  };
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

// clip (x) and clip_bwd (x, dy): finite min <= max.
decltype(OpDef::infer) clip_shape(std::string op) {
  return [op](const Attrs& a, const Shapes& in) -> absl::StatusOr<Shapes> {
    LMS_ASSIGN_OR_RETURN(double lo, finite_real(op, a, "min"));
    LMS_ASSIGN_OR_RETURN(double hi, finite_real(op, a, "max"));
    if (lo > hi) return op_error(op, str_cat("min ", lo, " must not exceed max ", hi));
    if (in.size() > 1) LMS_RETURN_IF_ERROR(check_same_shapes(op, in, {"x", "dy"}));
    return Shapes{in[0]};
  };
}

// The attribute "shape" with x's element count.
absl::StatusOr<Shapes> infer_reshape(const Attrs& a, const Shapes& in) {
  LMS_ASSIGN_OR_RETURN(Shape y, shape_attr("reshape", a, "shape"));
  if (num_elements(y) != num_elements(in[0])) {
    return op_error("reshape",
                    str_cat("shape ", shape_str(y), " has ", num_elements(y), " elements, x ",
                            shape_str(in[0]), " has ", num_elements(in[0])));
  }
  return Shapes{y};
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

// The attribute "perm", a permutation of x's dimensions: y[i] = x[perm[i]].
absl::StatusOr<Shapes> infer_transpose(const Attrs& a, const Shapes& in) {
  auto perm = attr_ints(a, "perm");
  if (!perm.ok()) return op_error("transpose", perm.status().message());
  const Shape& x = in[0];
  if (perm->size() != x.size()) {
    return op_error("transpose", str_cat("perm has ", perm->size(), " entries but x ", shape_str(x),
                                         " has rank ", x.size()));
  }
  std::vector<bool> seen(x.size(), false);
  Shape y;
  for (int64_t p : *perm) {
    if (p < 0 || p >= static_cast<int64_t>(x.size()) || seen[p]) {
      return op_error("transpose",
                      str_cat("perm ", shape_str(*perm), " is not a permutation of 0..",
                              x.size() - 1, " (x ", shape_str(x), ")"));
    }
    seen[p] = true;
    y.push_back(x[p]);
  }
  return Shapes{y};
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

absl::StatusOr<Shapes> infer_concat(const Attrs& a, const Shapes& in) {
  LMS_ASSIGN_OR_RETURN(const size_t axis, axis_attr("concat", a, in[0], "input 0"));
  Shape y = in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    Shape x = in[i], first = in[0];
    if (x.size() == first.size()) x[axis] = first[axis] = 0;
    if (x != first) {
      return op_error("concat",
                      str_cat("input ", i, " ", shape_str(in[i]), " differs from input 0 ",
                              shape_str(in[0]), " outside axis ", axis));
    }
    const std::optional<int64_t> total = checked_add(y[axis], in[i][axis]);
    if (!total) {
      return op_error("concat", str_cat("the size of axis ", axis, " overflows int64 at input ", i,
                                        " ", shape_str(in[i])));
    }
    y[axis] = *total;
  }
  return Shapes{y};
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

absl::StatusOr<Shapes> infer_slice(const Attrs& a, const Shapes& in) {
  const Shape& x = in[0];
  LMS_ASSIGN_OR_RETURN(const size_t axis, axis_attr("slice", a, x, "x"));
  auto begin = attr_int(a, "begin");
  auto size = attr_int(a, "size");
  if (!begin.ok()) return op_error("slice", begin.status().message());
  if (!size.ok()) return op_error("slice", size.status().message());
  // begin <= C - size rather than begin + size <= C: no overflow for huge values.
  if (*begin < 0 || *size < 1 || *size > x[axis] || *begin > x[axis] - *size) {
    return op_error("slice", str_cat("begin ", *begin, " and size ", *size,
                                     " must satisfy 0 <= begin, 1 <= size, begin + size <= ",
                                     x[axis], " (size of axis ", axis, " of x)"));
  }
  Shape y = x;
  y[axis] = *size;
  return Shapes{y};
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

absl::StatusOr<Shapes> infer_fill(const Attrs& a, const Shapes&) {
  LMS_ASSIGN_OR_RETURN(Shape shape, shape_attr("fill", a, "shape"));
  LMS_RETURN_IF_ERROR(finite_real("fill", a, "value").status());
  return Shapes{shape};
}

}  // namespace

void register_pointwise_ops(std::vector<OpSpec>& specs) {
  specs.push_back(make_spec(OpKind::kRelu, 1, 1, {}, same_shape("relu"), per_element(1),
                            activation_grad(OpKind::kReluBwd, true)));
  specs.push_back(
      make_spec(OpKind::kReluBwd, 2, 2, {}, bwd_shape("relu_bwd", "y"), per_element(1)));
  specs.push_back(make_spec(OpKind::kLeakyRelu, 1, 1, {"alpha"}, same_shape("leaky_relu", "alpha"),
                            per_element(2), activation_grad(OpKind::kLeakyReluBwd, false)));
  specs.push_back(make_spec(OpKind::kLeakyReluBwd, 2, 2, {"alpha"},
                            bwd_shape("leaky_relu_bwd", "x", "alpha"), per_element(2)));
  specs.push_back(make_spec(OpKind::kSigmoid, 1, 1, {}, same_shape("sigmoid"), per_element(4),
                            activation_grad(OpKind::kSigmoidBwd, true)));
  specs.push_back(
      make_spec(OpKind::kSigmoidBwd, 2, 2, {}, bwd_shape("sigmoid_bwd", "y"), per_element(3)));
  specs.push_back(make_spec(OpKind::kClip, 1, 1, {"max", "min"}, clip_shape("clip"), per_element(2),
                            activation_grad(OpKind::kClipBwd, false)));
  specs.push_back(
      make_spec(OpKind::kClipBwd, 2, 2, {"max", "min"}, clip_shape("clip_bwd"), per_element(2)));
  // GELU: erf counted like sigmoid's exp (4), plus the scale, the add and two
  // multiplies. Its backward: Phi(x) (7), phi(x) (7), x * phi(x) + Phi(x)
  // and the product with dy (3).
  specs.push_back(make_spec(OpKind::kGelu, 1, 1, {}, same_shape("gelu"), per_element(8),
                            activation_grad(OpKind::kGeluBwd, false)));
  specs.push_back(
      make_spec(OpKind::kGeluBwd, 2, 2, {}, bwd_shape("gelu_bwd", "x"), per_element(17)));
  specs.push_back(make_spec(
      OpKind::kSoftmax, 1, 1, {},
      [](const Attrs& a, const Shapes& in) { return infer_softmax("softmax", a, in); },
      per_element(5), activation_grad(OpKind::kSoftmaxBwd, true)));
  specs.push_back(make_spec(
      OpKind::kSoftmaxBwd, 2, 2, {},
      [](const Attrs& a, const Shapes& in) { return infer_softmax("softmax_bwd", a, in); },
      per_element(4)));
  specs.push_back(make_spec(
      OpKind::kAdd, 2, 2, {},
      [](const Attrs&, const Shapes& in) { return infer_binary("add", in); }, per_element(1),
      add_grad));
  specs.push_back(make_spec(
      OpKind::kMul, 2, 2, {},
      [](const Attrs&, const Shapes& in) { return infer_binary("mul", in); }, per_element(1),
      mul_grad));
  specs.push_back(make_spec(OpKind::kScale, 1, 1, {"factor"}, same_shape("scale", "factor"),
                            per_element(1), scale_grad));
  // One add per element of x.
  specs.push_back(
      make_spec(OpKind::kSumTo, 1, 1, {"shape"}, infer_sum_to,
                [](const Attrs&, const Shapes& in, const Shapes&) { return numel(in[0]); }));
  // A hash and a multiply per element.
  specs.push_back(make_spec(OpKind::kDropout, 1, 1, {"ratio", "seed"}, dropout_shape("dropout"),
                            per_element(2), dropout_grad));
  specs.push_back(make_spec(OpKind::kDropoutBwd, 1, 1, {"ratio", "seed"},
                            dropout_shape("dropout_bwd"), per_element(2)));
  // Data movement only: no floating-point work.
  specs.push_back(make_spec(OpKind::kConcat, 1, -1, {}, infer_concat, per_element(0), concat_grad));
  specs.push_back(
      make_spec(OpKind::kSlice, 1, 1, {"begin", "size"}, infer_slice, per_element(0), slice_grad));
  specs.push_back(
      make_spec(OpKind::kReshape, 1, 1, {"shape"}, infer_reshape, per_element(0), reshape_grad));
  specs.push_back(make_spec(OpKind::kTranspose, 1, 1, {"perm"}, infer_transpose, per_element(0),
                            transpose_grad));
  for (OpSpec& spec : specs) {
    const OpKind k = spec.def.kind;
    if (k == OpKind::kSoftmax || k == OpKind::kSoftmaxBwd || k == OpKind::kConcat ||
        k == OpKind::kSlice) {
      spec.optional_attrs.push_back(std::string(kAxisAttr));
    }
  }
  specs.push_back(make_spec(OpKind::kFill, 0, 0, {"shape", "value"}, infer_fill, per_element(0),
                            [](GradContext&) { return absl::OkStatus(); }));
  set_flag(specs, &OpDef::backward,
           {OpKind::kReluBwd, OpKind::kLeakyReluBwd, OpKind::kSigmoidBwd, OpKind::kClipBwd,
            OpKind::kGeluBwd, OpKind::kSoftmaxBwd, OpKind::kDropoutBwd});
  set_flag(specs, &OpDef::recomputable,
           {OpKind::kRelu, OpKind::kLeakyRelu, OpKind::kSigmoid, OpKind::kSoftmax, OpKind::kAdd,
            OpKind::kMul, OpKind::kScale, OpKind::kConcat, OpKind::kSlice, OpKind::kClip,
            OpKind::kGelu, OpKind::kReshape, OpKind::kTranspose, OpKind::kDropout});
}

}  // namespace lms::ops_internal
