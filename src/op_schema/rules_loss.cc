// The rules of the losses and reductions of docs/ops.md: each reduces to a
// scalar loss[] (reduce_mean with an axis to that axis of size 1).
// softmax_cross_entropy reads int64 class labels (op_input_dtype).
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "lms/status.h"
#include "op_schema/op_dims.h"
#include "op_schema/op_rules.h"
#include "op_schema/spec_checks.h"

namespace lms {
namespace {

using Shapes = std::vector<Shape>;

bool is_loss_backward(OpKind op) {
  return op == OpKind::kMseLossBwd || op == OpKind::kSoftDiceLossBwd ||
         op == OpKind::kSoftmaxCrossEntropyBwd;
}

// The loss (forward: loss[]) or the gradient of input 0 (backward, whose
// third input is dloss[]).
absl::StatusOr<Shapes> loss_outputs(const OpInstance& spec) {
  if (!is_loss_backward(spec.op)) return Shapes{Shape{}};
  LMS_RETURN_IF_ERROR(check_scalar(spec, spec.input_shapes[2], "dloss"));
  return Shapes{spec.input_shapes[0]};
}

absl::StatusOr<Shapes> mse(const OpInstance& spec) {
  const Shapes& in = spec.input_shapes;
  LMS_RETURN_IF_ERROR(check_same_shapes(spec, {in[0], in[1]}, {"pred", "target"}));
  return loss_outputs(spec);
}

absl::StatusOr<Shapes> dice(const OpInstance& spec) {
  const Shapes& in = spec.input_shapes;
  if (in[0].size() < 3) {
    return invalid(spec,
                   absl::StrCat("probs must have at least 3 dims [N,C,S], got ", shape_str(in[0])));
  }
  LMS_RETURN_IF_ERROR(check_same_shapes(spec, {in[0], in[1]}, {"probs", "target"}));
  LMS_RETURN_IF_ERROR(real_attr_in(spec, "eps", 0, HUGE_VAL, false, true).status());
  return loss_outputs(spec);
}

// (loss[], lse[...]) forward; (dx, dw) backward.
absl::StatusOr<Shapes> linear_xent(const OpInstance& spec) {
  LMS_RETURN_IF_ERROR(linear_cross_entropy_dims(spec).status());
  if (spec.op == OpKind::kLinearCrossEntropy) return Shapes{Shape{}};
  return Shapes{spec.input_shapes[0], spec.input_shapes[1]};
}

absl::StatusOr<Shapes> xent(const OpInstance& spec) {
  LMS_RETURN_IF_ERROR(cross_entropy_dims(spec).status());
  return loss_outputs(spec);
}

// Without an axis: the scalar mean of all elements. With one: x with that
// axis reduced to size 1 (ONNX ReduceMean, keepdims=1).
absl::StatusOr<Shapes> reduce_mean(const OpInstance& spec) {
  if (!has_axis_attr(spec)) return Shapes{Shape{}};
  LMS_ASSIGN_OR_RETURN(const size_t axis, axis_attr(spec, spec.input_shapes[0], "x"));
  Shape y = spec.input_shapes[0];
  y[axis] = 1;
  return Shapes{y};
}

absl::StatusOr<Shapes> reduce_mean_bwd(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(Shape shape, shape_attr(spec, "input_shape"));
  const Shape& dy = spec.input_shapes[0];
  if (!has_axis_attr(spec)) {
    LMS_RETURN_IF_ERROR(check_scalar(spec, dy, "dy"));
    return Shapes{shape};
  }
  LMS_ASSIGN_OR_RETURN(const size_t axis, axis_attr(spec, shape, "input_shape"));
  Shape want = shape;
  want[axis] = 1;
  if (dy != want) {
    return invalid(spec,
                   absl::StrCat("dy ", shape_str(dy), " must be input_shape ", shape_str(shape),
                                " with axis ", axis, " reduced to 1, ", shape_str(want)));
  }
  return Shapes{shape};
}

}  // namespace

// logits[..., C] and labels[...] (int64) (+ dloss[] for the backward); the
// ignore_index attribute is any int (absent: kDefaultIgnoreIndex).
absl::StatusOr<CrossEntropyDims> cross_entropy_dims(const OpInstance& spec) {
  CrossEntropyDims d;
  if (spec.attrs.contains("ignore_index")) {
    LMS_ASSIGN_OR_RETURN(d.ignore_index, int_attr(spec, "ignore_index"));
  }
  const Shape& logits = spec.input_shapes[0];
  if (logits.size() < 2) {
    return invalid(spec, absl::StrCat("logits must be [..., C] of rank 2 or more (classes on the "
                                      "last axis), got ",
                                      shape_str(logits)));
  }
  if (logits.size() > 2 && logits.back() == 1) {
    return invalid(spec, absl::StrCat("logits ", shape_str(logits),
                                      " have one class on the last axis, where the classes go; "
                                      "flatten an [N,C,1,...] output first (lms::flatten)"));
  }
  const Shape rows(logits.begin(), logits.end() - 1);
  if (spec.input_shapes[1] != rows) {
    return invalid(
        spec, absl::StrCat("labels ", shape_str(spec.input_shapes[1]), " must be ", shape_str(rows),
                           ", one class index per row of logits ", shape_str(logits)));
  }
  d.n = num_elements(rows);
  d.c = logits.back();
  return d;
}

absl::StatusOr<LinearCrossEntropyDims> linear_cross_entropy_dims(const OpInstance& spec) {
  LinearCrossEntropyDims d;
  if (spec.attrs.contains("ignore_index")) {
    LMS_ASSIGN_OR_RETURN(d.ignore_index, int_attr(spec, "ignore_index"));
  }
  LMS_ASSIGN_OR_RETURN(d.trans_b, flag_attr(spec, "trans_b"));
  const Shapes& in = spec.input_shapes;
  const Shape& x = in[0];
  if (x.size() < 2) {
    return invalid(spec, absl::StrCat("x must be [..., D] of rank 2 or more, got ", shape_str(x)));
  }
  d.d = x.back();
  const Shape& w = in[1];
  if (w.size() != 2 || w[d.trans_b ? 1 : 0] != d.d) {
    return invalid(spec, absl::StrCat("w must be ", d.trans_b ? "[V,D]" : "[D,V]",
                                      " with D = ", d.d, " (x's last dim), got ", shape_str(w)));
  }
  d.v = w[d.trans_b ? 0 : 1];
  if (d.v < 2) return invalid(spec, absl::StrCat("needs at least 2 classes, got V = ", d.v));
  const Shape rows(x.begin(), x.end() - 1);
  if (in[2] != rows) {
    return invalid(spec, absl::StrCat("labels ", shape_str(in[2]), " must be ", shape_str(rows),
                                      ", one class index per row of x ", shape_str(x)));
  }
  d.n = num_elements(rows);
  if (spec.op == OpKind::kLinearCrossEntropyBwd) {
    LMS_RETURN_IF_ERROR(check_scalar(spec, in[3], "dloss"));
  }
  return d;
}

absl::Status bad_class_label(const OpInstance& spec, int64_t position, int64_t label,
                             const CrossEntropyDims& dims) {
  return invalid(spec, absl::StrCat("label ", label, " at position ", position,
                                    " is out of range [0, ", dims.c, ") of the ", dims.c,
                                    " classes and is not ignore_index ", dims.ignore_index));
}

namespace op_rules {

std::optional<RuleEntry> loss_rule(OpKind op) {
  switch (op) {
    case OpKind::kMseLoss:
      return RuleEntry{{2, 2}, mse, {}};
    case OpKind::kMseLossBwd:
      return RuleEntry{{3, 3}, mse, {}};
    case OpKind::kSoftDiceLoss:
      return RuleEntry{{2, 2}, dice, {{"eps"}, {}}};
    case OpKind::kSoftDiceLossBwd:
      return RuleEntry{{3, 3}, dice, {{"eps"}, {}}};
    case OpKind::kSoftmaxCrossEntropy:
      return RuleEntry{{2, 2}, xent, {{}, {"ignore_index"}}};
    case OpKind::kSoftmaxCrossEntropyBwd:
      return RuleEntry{{3, 3}, xent, {{}, {"ignore_index"}}};
    case OpKind::kLinearCrossEntropy:
      return RuleEntry{{3, 3}, linear_xent, {{"trans_b"}, {"ignore_index"}}};
    case OpKind::kLinearCrossEntropyBwd:
      return RuleEntry{{4, 4}, linear_xent, {{"trans_b"}, {"ignore_index"}}};
    case OpKind::kReduceMean:
      return RuleEntry{{1, 1}, reduce_mean, {{}, {std::string(kAxisAttr)}}};
    case OpKind::kReduceMeanBwd:
      return RuleEntry{{1, 1}, reduce_mean_bwd, {{"input_shape"}, {std::string(kAxisAttr)}}};
    default:
      return std::nullopt;
  }
}

}  // namespace op_rules
}  // namespace lms
