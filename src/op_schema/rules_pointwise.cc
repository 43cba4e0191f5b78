// The rules of the element-wise ops, activations, softmax, concat / slice,
// reshape, transpose, fill and dropout of docs/ops.md.
#include <optional>

#include "absl/strings/str_cat.h"
#include "lms/checked.h"
#include "lms/status.h"
#include "op_schema/op_dims.h"
#include "op_schema/op_rules.h"
#include "op_schema/spec_checks.h"

namespace lms {
namespace {

using Shapes = std::vector<Shape>;

// relu, sigmoid, gelu: y has x's shape.
absl::StatusOr<Shapes> unary(const OpInstance& spec) { return Shapes{spec.input_shapes[0]}; }

// leaky_relu (alpha), scale (factor): y has x's shape; a finite real.
absl::StatusOr<Shapes> unary_real(const OpInstance& spec) {
  const char* key = spec.op == OpKind::kScale ? "factor" : "alpha";
  LMS_RETURN_IF_ERROR(real_attr(spec, key).status());
  return Shapes{spec.input_shapes[0]};
}

// cast (x) -> y: x of a floating dtype (f32, bf16, f16), `to` the name of
// one (dtype_name); y has x's shape.
absl::StatusOr<Shapes> cast(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(const std::string to, str_attr(spec, "to"));
  const std::optional<DType> dtype = parse_dtype(to);
  if (!dtype || !is_float_dtype(*dtype)) {
    return invalid(
        spec, absl::StrCat("attribute 'to' is \"", to, "\"; allowed: \"f32\", \"bf16\", \"f16\""));
  }
  if (!spec.input_dtypes.empty() && !is_float_dtype(spec.input_dtypes[0])) {
    return invalid(spec, absl::StrCat("input 0 has dtype ", dtype_name(spec.input_dtypes[0]),
                                      "; cast converts between f32, bf16 and f16"));
  }
  return Shapes{spec.input_shapes[0]};
}

// (y or x, dy) -> dx, both of one shape; leaky_relu_bwd's finite alpha.
absl::StatusOr<Shapes> activation_bwd(const OpInstance& spec) {
  const bool saves_y =
      spec.op == OpKind::kReluBwd || spec.op == OpKind::kSigmoidBwd || spec.op == OpKind::kTanhBwd;
  if (spec.op == OpKind::kLeakyReluBwd) LMS_RETURN_IF_ERROR(real_attr(spec, "alpha").status());
  LMS_RETURN_IF_ERROR(check_same_shapes(spec, spec.input_shapes, {saves_y ? "y" : "x", "dy"}));
  return Shapes{spec.input_shapes[0]};
}

// clip (x) and clip_bwd (x, dy): finite min <= max.
absl::StatusOr<Shapes> clip(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(double lo, real_attr(spec, "min"));
  LMS_ASSIGN_OR_RETURN(double hi, real_attr(spec, "max"));
  if (lo > hi) return invalid(spec, absl::StrCat("min ", lo, " must not exceed max ", hi));
  LMS_RETURN_IF_ERROR(check_same_shapes(spec, spec.input_shapes, {"x", "dy"}));
  return Shapes{spec.input_shapes[0]};
}

// hard_sigmoid (x) and hard_sigmoid_bwd (x, dy): finite alpha and beta.
absl::StatusOr<Shapes> hard_sigmoid(const OpInstance& spec) {
  LMS_RETURN_IF_ERROR(real_attr(spec, "alpha").status());
  LMS_RETURN_IF_ERROR(real_attr(spec, "beta").status());
  LMS_RETURN_IF_ERROR(check_same_shapes(spec, spec.input_shapes, {"x", "dy"}));
  return Shapes{spec.input_shapes[0]};
}

// softmax (x) and softmax_bwd (y, dy) along the axis.
absl::StatusOr<Shapes> softmax(const OpInstance& spec) {
  const bool bwd = spec.op == OpKind::kSoftmaxBwd;
  LMS_RETURN_IF_ERROR(axis_attr(spec, spec.input_shapes[0], bwd ? "y" : "x").status());
  LMS_RETURN_IF_ERROR(check_same_shapes(spec, spec.input_shapes, {"y", "dy"}));
  return Shapes{spec.input_shapes[0]};
}

absl::StatusOr<Shapes> binary(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(size_t full, check_broadcast_binary(spec));
  return Shapes{spec.input_shapes[full]};
}

absl::StatusOr<Shapes> sum_to(const OpInstance& spec) {
  LMS_RETURN_IF_ERROR(check_sum_to(spec).status());
  return Shapes{*ints_attr(spec, "shape")};
}

absl::StatusOr<Shapes> dropout(const OpInstance& spec) {
  LMS_RETURN_IF_ERROR(dropout_dims(spec).status());
  return Shapes{spec.input_shapes[0]};
}

absl::StatusOr<Shapes> concat(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(const size_t axis, concat_axis(spec));
  Shape y = spec.input_shapes[0];
  for (size_t i = 1; i < spec.input_shapes.size(); ++i) {
    const std::optional<int64_t> total = checked_add(y[axis], spec.input_shapes[i][axis]);
    if (!total) {
      return invalid(spec, absl::StrCat("the size of axis ", axis, " overflows int64 at input ", i,
                                        " ", shape_str(spec.input_shapes[i])));
    }
    y[axis] = *total;
  }
  return Shapes{y};
}

absl::StatusOr<Shapes> slice(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(const SliceDims d, slice_dims(spec));
  Shape y = spec.input_shapes[0];
  y[d.axis] = d.size;
  return Shapes{y};
}

// The attribute "shape" with x's element count.
absl::StatusOr<Shapes> reshape(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(Shape y, shape_attr(spec, "shape"));
  const Shape& x = spec.input_shapes[0];
  if (num_elements(y) != num_elements(x)) {
    return invalid(spec, absl::StrCat("shape ", shape_str(y), " has ", num_elements(y),
                                      " elements, x ", shape_str(x), " has ", num_elements(x)));
  }
  return Shapes{y};
}

absl::StatusOr<Shapes> transpose(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(const BroadcastIndex t, check_transpose(spec));
  return Shapes{Shape(t.dims, t.dims + t.rank)};
}

absl::StatusOr<Shapes> fill(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(Shape shape, shape_attr(spec, "shape"));
  LMS_RETURN_IF_ERROR(real_attr(spec, "value").status());
  return Shapes{shape};
}

}  // namespace

absl::StatusOr<size_t> check_broadcast_binary(const OpInstance& spec) {
  const Shape &a = spec.input_shapes[0], &b = spec.input_shapes[1];
  const std::optional<Shape> y = broadcast_shape(a, b);
  if (!y) {
    return invalid(spec, absl::StrCat("a ", shape_str(a), " and b ", shape_str(b),
                                      " do not broadcast: aligned at the last dimension, each "
                                      "pair must be equal or one of them 1"));
  }
  if (*y != a && *y != b) {
    return invalid(spec,
                   absl::StrCat("a ", shape_str(a), " and b ", shape_str(b), " both broadcast to ",
                                shape_str(*y), "; one operand must have the output's shape"));
  }
  if (a != b && y->size() > SumToPlan::kMaxRank) {
    return invalid(spec,
                   absl::StrCat("the output ", shape_str(*y), " has rank ", y->size(),
                                "; a broadcasting add / mul takes at most ", SumToPlan::kMaxRank));
  }
  return a == *y ? 0 : 1;
}

absl::StatusOr<SumToPlan> check_sum_to(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(Shape y, shape_attr(spec, "shape"));
  const Shape& x = spec.input_shapes[0];
  if (x.size() > SumToPlan::kMaxRank) {
    return invalid(spec, absl::StrCat("x ", shape_str(x), " has rank ", x.size(), "; at most ",
                                      SumToPlan::kMaxRank, " is supported"));
  }
  const std::optional<SumToPlan> plan = sum_to_plan(x, y);
  if (!plan) {
    return invalid(spec, absl::StrCat("shape ", shape_str(y), " must broadcast to x ", shape_str(x),
                                      ": of no higher rank, and each dimension (aligned at the "
                                      "last) equal to x's or 1"));
  }
  return *plan;
}

absl::StatusOr<BroadcastIndex> check_transpose(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ints_attr(spec, "perm"));
  const Shape& x = spec.input_shapes[0];
  if (perm.size() != x.size()) {
    return invalid(spec, absl::StrCat("perm has ", perm.size(), " entries but x ", shape_str(x),
                                      " has rank ", x.size()));
  }
  LMS_RETURN_IF_ERROR(check_rank(spec, x, 1, SumToPlan::kMaxRank, "x"));
  const std::optional<BroadcastIndex> t = transpose_index(x, perm);
  if (!t) {
    return invalid(spec, absl::StrCat("perm ", shape_str(perm), " is not a permutation of 0..",
                                      x.size() - 1, " (x ", shape_str(x), ")"));
  }
  return *t;
}

absl::StatusOr<size_t> concat_axis(const OpInstance& spec) {
  const Shape& first = spec.input_shapes[0];
  LMS_ASSIGN_OR_RETURN(const size_t axis, axis_attr(spec, first, "input 0"));
  for (size_t i = 1; i < spec.input_shapes.size(); ++i) {
    Shape x = spec.input_shapes[i], want = first;
    if (x.size() == want.size()) x[axis] = want[axis] = 0;
    if (x == want) continue;
    return invalid(
        spec, absl::StrCat("input ", i, " ", shape_str(spec.input_shapes[i]),
                           " differs from input 0 ", shape_str(first), " outside axis ", axis));
  }
  return axis;
}

absl::StatusOr<SliceDims> slice_dims(const OpInstance& spec) {
  const Shape& x = spec.input_shapes[0];
  SliceDims d;
  LMS_ASSIGN_OR_RETURN(d.axis, axis_attr(spec, x, "x"));
  LMS_ASSIGN_OR_RETURN(d.begin, int_attr(spec, "begin"));
  LMS_ASSIGN_OR_RETURN(d.size, int_attr(spec, "size"));
  const int64_t extent = x[d.axis];
  // begin <= C - size rather than begin + size <= C: no overflow for huge values.
  if (d.begin < 0 || d.size < 1 || d.size > extent || d.begin > extent - d.size) {
    return invalid(spec, absl::StrCat("begin ", d.begin, " and size ", d.size,
                                      " must satisfy 0 <= begin, 1 <= size, begin + size <= ",
                                      extent, " (size of axis ", d.axis, " of x)"));
  }
  return d;
}

absl::StatusOr<DropoutDims> dropout_dims(const OpInstance& spec) {
  DropoutDims d;
  LMS_ASSIGN_OR_RETURN(d.ratio, real_attr(spec, "ratio"));
  if (!(d.ratio >= 0.0 && d.ratio < 1.0)) {
    return invalid(spec, absl::StrCat("ratio must be in [0, 1), got ", d.ratio));
  }
  LMS_ASSIGN_OR_RETURN(d.seed, int_attr(spec, "seed"));
  return d;
}

namespace op_rules {

std::optional<RuleEntry> pointwise_rule(OpKind op) {
  switch (op) {
    case OpKind::kRelu:
    case OpKind::kSigmoid:
    case OpKind::kTanh:
    case OpKind::kGelu:
    case OpKind::kHardSwish:
      return RuleEntry{{1, 1}, unary, {}};
    case OpKind::kHardSigmoid:
      return RuleEntry{{1, 1}, hard_sigmoid, {{"alpha", "beta"}, {}}};
    case OpKind::kLeakyRelu:
      return RuleEntry{{1, 1}, unary_real, {{"alpha"}, {}}};
    case OpKind::kScale:
      return RuleEntry{{1, 1}, unary_real, {{"factor"}, {}}};
    case OpKind::kReluBwd:
    case OpKind::kSigmoidBwd:
    case OpKind::kTanhBwd:
    case OpKind::kGeluBwd:
    case OpKind::kHardSwishBwd:
      return RuleEntry{{2, 2}, activation_bwd, {}};
    case OpKind::kHardSigmoidBwd:
      return RuleEntry{{2, 2}, hard_sigmoid, {{"alpha", "beta"}, {}}};
    case OpKind::kLeakyReluBwd:
      return RuleEntry{{2, 2}, activation_bwd, {{"alpha"}, {}}};
    case OpKind::kClip:
      return RuleEntry{{1, 1}, clip, {{"max", "min"}, {}}};
    case OpKind::kClipBwd:
      return RuleEntry{{2, 2}, clip, {{"max", "min"}, {}}};
    case OpKind::kSoftmax:
      return RuleEntry{{1, 1}, softmax, {{}, {std::string(kAxisAttr)}}};
    case OpKind::kSoftmaxBwd:
      return RuleEntry{{2, 2}, softmax, {{}, {std::string(kAxisAttr)}}};
    case OpKind::kAdd:
    case OpKind::kMul:
      return RuleEntry{{2, 2}, binary, {}};
    case OpKind::kSumTo:
      return RuleEntry{{1, 1}, sum_to, {{"shape"}, {}}};
    case OpKind::kDropout:
    case OpKind::kDropoutBwd:
      return RuleEntry{{1, 1}, dropout, {{"ratio", "seed"}, {}}};
    case OpKind::kConcat:
      return RuleEntry{{1, -1}, concat, {{}, {std::string(kAxisAttr)}}};
    case OpKind::kSlice:
      return RuleEntry{{1, 1}, slice, {{"begin", "size"}, {std::string(kAxisAttr)}}};
    case OpKind::kReshape:
      return RuleEntry{{1, 1}, reshape, {{"shape"}, {}}};
    case OpKind::kTranspose:
      return RuleEntry{{1, 1}, transpose, {{"perm"}, {}}};
    case OpKind::kFill:
      return RuleEntry{{0, 0}, fill, {{"shape", "value"}, {}}};
    case OpKind::kCast:
      return RuleEntry{{1, 1}, cast, {{"to"}, {}}};
    default:
      return std::nullopt;
  }
}

}  // namespace op_rules
}  // namespace lms
