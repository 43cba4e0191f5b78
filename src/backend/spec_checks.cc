#include "backend/spec_checks.h"

#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lms/status.h"
#include "lms/strings.h"

namespace lms {
namespace {

std::string attr_value_str(const AttrValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return absl::StrCat(*i, " (int)");
  if (const auto* d = std::get_if<double>(&v)) return absl::StrCat(*d, " (real)");
  if (const auto* s = std::get_if<std::string>(&v)) return absl::StrCat("\"", *s, "\" (str)");
  return absl::StrCat("[", absl::StrJoin(std::get<std::vector<int64_t>>(v), ","), "] (ints)");
}

absl::StatusOr<const AttrValue*> find_attr(const KernelSpec& spec, absl::string_view key,
                                           absl::string_view type) {
  auto it = spec.attrs.find(key);
  if (it == spec.attrs.end()) {
    return invalid(spec, absl::StrCat("missing attribute '", key, "' (", type, ")"));
  }
  return &it->second;
}

absl::Status check_dims(const KernelSpec& spec, const Shape& shape, absl::string_view what) {
  for (int64_t d : shape) {
    if (d < 1) {
      return invalid(spec, absl::StrCat(what, " has shape ", shape_str(shape),
                                        "; every dimension must be >= 1"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status invalid(const KernelSpec& spec, absl::string_view msg) {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", spec.name, "' (op ", op_name(spec.op), "): ", msg));
}

absl::StatusOr<size_t> check_broadcast_binary(const KernelSpec& spec) {
  LMS_RETURN_IF_ERROR(check_arity(spec, 2, 2, 1));
  const Shape &a = spec.input_shapes[0], &b = spec.input_shapes[1], &y = spec.output_shapes[0];
  if (broadcast_shape(a, b) != y || (a != y && b != y)) {
    return invalid(spec, absl::StrCat("inputs a ", shape_str(a), " and b ", shape_str(b),
                                      " must broadcast to the output ", shape_str(y),
                                      ", which one of them has"));
  }
  if (y.size() > SumToPlan::kMaxRank) {
    return invalid(spec,
                   absl::StrCat("the output ", shape_str(y), " has rank ", y.size(),
                                "; a broadcasting add / mul takes at most ", SumToPlan::kMaxRank));
  }
  return a == y ? 0 : 1;
}

absl::StatusOr<SumToPlan> check_sum_to(const KernelSpec& spec) {
  LMS_RETURN_IF_ERROR(check_arity(spec, 1, 1, 1));
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ints_attr(spec, "shape"));
  LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.output_shapes[0], shape, "output y"));
  const std::optional<SumToPlan> plan = sum_to_plan(spec.input_shapes[0], shape);
  if (!plan) {
    return invalid(spec, absl::StrCat("shape ", shape_str(shape), " does not broadcast to x ",
                                      shape_str(spec.input_shapes[0]), " (or has rank over ",
                                      SumToPlan::kMaxRank, ")"));
  }
  return *plan;
}

absl::StatusOr<BroadcastIndex> check_transpose(const KernelSpec& spec) {
  LMS_RETURN_IF_ERROR(check_arity(spec, 1, 1, 1));
  const Shape& x = spec.input_shapes[0];
  LMS_RETURN_IF_ERROR(check_rank(spec, x, 1, SumToPlan::kMaxRank, "input x"));
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ints_attr(spec, "perm"));
  const std::optional<BroadcastIndex> t = transpose_index(x, perm);
  if (!t) {
    return invalid(spec, absl::StrCat("perm ", shape_str(perm), " is not a permutation of the ",
                                      x.size(), " dimensions of input x ", shape_str(x)));
  }
  LMS_RETURN_IF_ERROR(
      check_same_shape(spec, spec.output_shapes[0], Shape(t->dims, t->dims + t->rank), "output y"));
  return *t;
}

absl::Status bad_embedding_id(const KernelSpec& spec, int64_t position, int64_t id, int64_t rows) {
  return invalid(spec, absl::StrCat("id ", id, " at position ", position, " is out of range [0, ",
                                    rows, ") of the table"));
}

std::string shape_str(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::StatusOr<double> real_attr(const KernelSpec& spec, absl::string_view key) {
  LMS_ASSIGN_OR_RETURN(const AttrValue* v, find_attr(spec, key, "real"));
  double value;
  if (const auto* d = std::get_if<double>(v)) {
    value = *d;
  } else if (const auto* i = std::get_if<int64_t>(v)) {
    value = static_cast<double>(*i);
  } else {
    return invalid(spec, absl::StrCat("attribute '", key, "' is ", attr_value_str(*v),
                                      "; a real is required"));
  }
  if (!std::isfinite(value)) {
    return invalid(spec, absl::StrCat("attribute '", key, "' is ", value, "; it must be finite"));
  }
  return value;
}

absl::StatusOr<double> real_attr_in(const KernelSpec& spec, absl::string_view key, double lo,
                                    bool lo_open, double hi, bool hi_open,
                                    absl::string_view allowed) {
  LMS_ASSIGN_OR_RETURN(double v, real_attr(spec, key));
  const bool lo_ok = lo_open ? v > lo : v >= lo;
  const bool hi_ok = hi_open ? v < hi : v <= hi;
  if (!lo_ok || !hi_ok) {
    return invalid(spec, absl::StrCat("attribute '", key, "' is ", v, "; allowed: ", allowed));
  }
  return v;
}

absl::StatusOr<int64_t> int_attr(const KernelSpec& spec, absl::string_view key) {
  LMS_ASSIGN_OR_RETURN(const AttrValue* v, find_attr(spec, key, "int"));
  if (const auto* i = std::get_if<int64_t>(v)) return *i;
  return invalid(
      spec, absl::StrCat("attribute '", key, "' is ", attr_value_str(*v), "; an int is required"));
}

absl::StatusOr<std::vector<int64_t>> ints_attr(const KernelSpec& spec, absl::string_view key) {
  LMS_ASSIGN_OR_RETURN(const AttrValue* v, find_attr(spec, key, "ints"));
  if (const auto* l = std::get_if<std::vector<int64_t>>(v)) return *l;
  return invalid(spec, absl::StrCat("attribute '", key, "' is ", attr_value_str(*v),
                                    "; an int list is required"));
}

absl::Status check_arity(const KernelSpec& spec, size_t min_in, size_t max_in, size_t n_out) {
  const size_t n_in = spec.input_shapes.size();
  if (n_in < min_in || n_in > max_in) {
    const std::string allowed =
        min_in == max_in ? absl::StrCat(min_in) : absl::StrCat(min_in, " to ", max_in);
    return invalid(spec, absl::StrCat("has ", n_in, " inputs; allowed: ", allowed));
  }
  if (spec.output_shapes.size() != n_out) {
    return invalid(spec,
                   absl::StrCat("has ", spec.output_shapes.size(), " outputs; allowed: ", n_out));
  }
  for (size_t i = 0; i < n_in; ++i) {
    LMS_RETURN_IF_ERROR(check_dims(spec, spec.input_shapes[i], absl::StrCat("input ", i)));
  }
  for (size_t i = 0; i < n_out; ++i) {
    LMS_RETURN_IF_ERROR(check_dims(spec, spec.output_shapes[i], absl::StrCat("output ", i)));
  }
  return absl::OkStatus();
}

absl::Status check_same_shape(const KernelSpec& spec, const Shape& got, const Shape& want,
                              absl::string_view what) {
  if (got == want) return absl::OkStatus();
  return invalid(spec,
                 absl::StrCat(what, " has shape ", shape_str(got), "; expected ", shape_str(want)));
}

absl::Status check_scalar(const KernelSpec& spec, const Shape& shape, absl::string_view what) {
  if (shape.size() <= 1 && num_elements(shape) == 1) return absl::OkStatus();
  return invalid(spec, absl::StrCat(what, " has shape ", shape_str(shape),
                                    "; a scalar ([] or [1]) is required"));
}

absl::Status check_rank(const KernelSpec& spec, const Shape& shape, size_t min_rank,
                        size_t max_rank, absl::string_view what) {
  if (shape.size() >= min_rank && shape.size() <= max_rank) return absl::OkStatus();
  return invalid(spec, absl::StrCat(what, " has shape ", shape_str(shape), " (rank ", shape.size(),
                                    "); allowed ranks: ", min_rank, " to ", max_rank));
}

absl::StatusOr<size_t> axis_attr(const KernelSpec& spec, const Shape& shape,
                                 absl::string_view what) {
  int64_t axis = kDefaultAxis;
  if (has_axis_attr(spec)) {
    LMS_ASSIGN_OR_RETURN(axis, int_attr(spec, to_absl(kAxisAttr)));
  }
  if (std::optional<size_t> dim = normalize_axis(axis, shape.size())) return *dim;
  const auto rank = static_cast<int64_t>(shape.size());
  return invalid(spec, absl::StrCat("axis ", axis, " is out of range for ", what, " ",
                                    shape_str(shape), " of rank ", rank, "; allowed: ",
                                    rank == 0 ? std::string("none (a scalar has no axis)")
                                              : absl::StrCat("[", -rank, ", ", rank - 1, "]")));
}

bool has_axis_attr(const KernelSpec& spec) { return spec.attrs.contains(kAxisAttr); }

namespace {

absl::StatusOr<bool> flag_attr(const KernelSpec& spec, absl::string_view key) {
  LMS_ASSIGN_OR_RETURN(int64_t v, int_attr(spec, key));
  if (v != 0 && v != 1) return invalid(spec, absl::StrCat(key, " must be 0 or 1, got ", v));
  return v == 1;
}

absl::StatusOr<bool> trans_b_attr(const KernelSpec& spec) { return flag_attr(spec, "trans_b"); }

Shape linear_weight(const LinearDims& d) { return d.trans_b ? Shape{d.k, d.c} : Shape{d.c, d.k}; }

}  // namespace

absl::StatusOr<LinearDims> linear_dims(const KernelSpec& spec) {
  const bool bwd = spec.op == OpKind::kLinearBwdWeights;
  LinearDims d;
  LMS_ASSIGN_OR_RETURN(d.trans_b, trans_b_attr(spec));
  if (bwd) {
    LMS_ASSIGN_OR_RETURN(int64_t has_bias, int_attr(spec, "has_bias"));
    d.bias = has_bias == 1;
    LMS_RETURN_IF_ERROR(check_arity(spec, 2, 2, d.bias ? 2 : 1));
  } else {
    LMS_RETURN_IF_ERROR(check_arity(spec, 2, 3, 1));
    d.bias = spec.input_shapes.size() == 3;
  }
  const Shape& x = spec.input_shapes[0];
  const Shape& y = bwd ? spec.input_shapes[1] : spec.output_shapes[0];
  LMS_RETURN_IF_ERROR(check_rank(spec, x, 2, 2, "input x"));
  LMS_RETURN_IF_ERROR(check_rank(spec, y, 2, 2, bwd ? "input dy" : "output y"));
  d.n = x[0];
  d.c = x[1];
  d.k = y[1];
  LMS_RETURN_IF_ERROR(check_same_shape(spec, y, {d.n, d.k}, bwd ? "input dy" : "output y"));
  const Shape& w = bwd ? spec.output_shapes[0] : spec.input_shapes[1];
  LMS_RETURN_IF_ERROR(check_same_shape(spec, w, linear_weight(d), bwd ? "output dw" : "input w"));
  if (d.bias) {
    const Shape& b = bwd ? spec.output_shapes[1] : spec.input_shapes[2];
    LMS_RETURN_IF_ERROR(check_same_shape(spec, b, {d.k}, bwd ? "output db" : "input b"));
  }
  return d;
}

absl::StatusOr<MatMulShape> matmul_dims(const KernelSpec& spec) {
  LMS_RETURN_IF_ERROR(check_arity(spec, 2, 2, 1));
  LMS_ASSIGN_OR_RETURN(bool trans_a, flag_attr(spec, "trans_a"));
  LMS_ASSIGN_OR_RETURN(bool trans_b, flag_attr(spec, "trans_b"));
  absl::StatusOr<MatMulShape> d =
      matmul_shape(spec.input_shapes[0], spec.input_shapes[1], trans_a, trans_b);
  if (!d.ok()) return invalid(spec, d.status().message());
  LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.output_shapes[0], d->out_shape(), "output y"));
  return d;
}

absl::StatusOr<CrossEntropyDims> cross_entropy_dims(const KernelSpec& spec) {
  const bool bwd = spec.op == OpKind::kSoftmaxCrossEntropyBwd;
  LMS_RETURN_IF_ERROR(check_arity(spec, bwd ? 3 : 2, bwd ? 3 : 2, 1));
  const Shape& logits = spec.input_shapes[0];
  LMS_RETURN_IF_ERROR(check_rank(spec, logits, 2, SumToPlan::kMaxRank, "input logits"));
  const Shape rows(logits.begin(), logits.end() - 1);
  CrossEntropyDims d;
  d.n = num_elements(rows);
  d.c = logits.back();
  LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.input_shapes[1], rows, "input labels"));
  if (bwd) {
    LMS_RETURN_IF_ERROR(check_scalar(spec, spec.input_shapes[2], "input dloss"));
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.output_shapes[0], logits, "output dlogits"));
  } else {
    LMS_RETURN_IF_ERROR(check_scalar(spec, spec.output_shapes[0], "output loss"));
  }
  if (spec.attrs.contains("ignore_index")) {
    LMS_ASSIGN_OR_RETURN(d.ignore_index, int_attr(spec, "ignore_index"));
  }
  return d;
}

absl::StatusOr<BatchNormDims> batch_norm_dims(const KernelSpec& spec) {
  const size_t n_in = spec.input_shapes.size();
  int64_t training = 1;
  if (spec.attrs.contains("training")) {
    LMS_ASSIGN_OR_RETURN(training, int_attr(spec, "training"));
    if (training != 0 && training != 1) {
      return invalid(spec, absl::StrCat("training must be 0 or 1, got ", training));
    }
  }
  BatchNormDims d;
  d.mode = training == 0 ? BatchNormMode::kEval
           : n_in == 5   ? BatchNormMode::kTrainingSavingStats
                         : BatchNormMode::kTraining;
  const size_t want_in = d.mode == BatchNormMode::kTraining ? 3 : 5;
  const size_t want_out = d.mode == BatchNormMode::kTrainingSavingStats ? 3 : 1;
  LMS_RETURN_IF_ERROR(check_arity(spec, want_in, want_in, want_out));
  const Shape& x = spec.input_shapes[0];
  LMS_RETURN_IF_ERROR(check_rank(spec, x, 2, 5, "input x"));
  const Shape c = {x[1]};
  const char* kInputs[] = {"input x", "input gamma", "input beta", "input running_mean",
                           "input running_var"};
  for (size_t i = 1; i < want_in; ++i) {
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.input_shapes[i], c, kInputs[i]));
  }
  LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.output_shapes[0], x, "output y"));
  for (size_t j = 1; j < want_out; ++j) {
    LMS_RETURN_IF_ERROR(
        check_same_shape(spec, spec.output_shapes[j], c, j == 1 ? "output mean" : "output var"));
  }
  LMS_ASSIGN_OR_RETURN(d.eps, real_attr_in(spec, "eps", 0.0, true, 1e300, false, "eps > 0"));
  return d;
}

absl::StatusOr<LayerNormDims> layer_norm_dims(const KernelSpec& spec, bool backward) {
  LMS_RETURN_IF_ERROR(check_arity(spec, 3, 3, backward ? 3 : 1));
  const Shape& x = spec.input_shapes[0];
  LMS_RETURN_IF_ERROR(check_rank(spec, x, 2, 4, "input x"));
  const Shape c = {x.back()};
  LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.input_shapes[1], c, "input gamma"));
  if (backward) {
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.input_shapes[2], x, "input dy"));
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.output_shapes[0], x, "output dx"));
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.output_shapes[1], c, "output dgamma"));
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.output_shapes[2], c, "output dbeta"));
  } else {
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.input_shapes[2], c, "input beta"));
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.output_shapes[0], x, "output y"));
  }
  LayerNormDims d;
  d.cols = x.back();
  d.rows = num_elements(x) / d.cols;
  LMS_ASSIGN_OR_RETURN(d.eps, real_attr_in(spec, "eps", 0.0, true, 1e300, false, "eps > 0"));
  return d;
}

absl::StatusOr<AttentionDims> attention_dims(const KernelSpec& spec, bool backward) {
  LMS_RETURN_IF_ERROR(check_arity(spec, backward ? 6 : 3, backward ? 6 : 3, backward ? 3 : 2));
  const Shape& q = spec.input_shapes[0];
  LMS_RETURN_IF_ERROR(check_rank(spec, q, 4, 4, "input q"));
  const Shape& k = spec.input_shapes[1];
  LMS_RETURN_IF_ERROR(check_rank(spec, k, 4, 4, "input k"));
  LMS_RETURN_IF_ERROR(check_same_shape(spec, k, {q[0], q[1], k[2], q[3]}, "input k"));
  LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.input_shapes[2], k, "input v"));
  const Shape lse = {q[0], q[1], q[2]};
  if (backward) {
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.input_shapes[3], q, "input out"));
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.input_shapes[4], lse, "input lse"));
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.input_shapes[5], q, "input dout"));
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.output_shapes[0], q, "output dq"));
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.output_shapes[1], k, "output dk"));
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.output_shapes[2], k, "output dv"));
  } else {
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.output_shapes[0], q, "output out"));
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.output_shapes[1], lse, "output lse"));
  }
  AttentionDims d;
  d.heads = q[0] * q[1];
  d.t = q[2];
  d.s = k[2];
  d.d = q[3];
  LMS_ASSIGN_OR_RETURN(d.scale,
                       real_attr_in(spec, "softmax_scale", 0.0, true, 1e300, false, "> 0"));
  LMS_ASSIGN_OR_RETURN(int64_t causal, int_attr(spec, "causal"));
  if (causal != 0 && causal != 1) {
    return invalid(spec, absl::StrCat("attribute 'causal' is ", causal, "; allowed: 0 or 1"));
  }
  if (causal == 1 && d.t != d.s) {
    return invalid(spec, absl::StrCat("causal = 1 needs T == S, got T = ", d.t, ", S = ", d.s));
  }
  d.causal = causal == 1;
  return d;
}

absl::StatusOr<BnStatsUpdateDims> bn_stats_update_dims(const KernelSpec& spec) {
  LMS_RETURN_IF_ERROR(check_arity(spec, 4, 4, 0));
  const Shape& c = spec.input_shapes[0];
  LMS_RETURN_IF_ERROR(check_rank(spec, c, 1, 1, "input running_mean"));
  const char* kInputs[] = {"input running_mean", "input running_var", "input mean", "input var"};
  for (size_t i = 1; i < 4; ++i) {
    LMS_RETURN_IF_ERROR(check_same_shape(spec, spec.input_shapes[i], c, kInputs[i]));
  }
  BnStatsUpdateDims d;
  d.channels = c[0];
  LMS_ASSIGN_OR_RETURN(d.momentum, real_attr_in(spec, "momentum", 0, false, 1, false, "[0, 1]"));
  LMS_ASSIGN_OR_RETURN(d.count, int_attr(spec, "count"));
  if (d.count < 2) {
    return invalid(spec, absl::StrCat("count (elements per channel) must be >= 2, got ", d.count));
  }
  return d;
}

absl::Status bad_class_label(const KernelSpec& spec, int64_t position, int64_t label,
                             const CrossEntropyDims& dims) {
  return invalid(spec, absl::StrCat("label ", label, " at position ", position,
                                    " is out of range [0, ", dims.c, ") of the ", dims.c,
                                    " classes and is not ignore_index ", dims.ignore_index));
}

}  // namespace lms
