// The rules of linear, linear_bwd_weights, matmul, attention (+ _bwd) and
// embedding (+ _bwd) of docs/ops.md.
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

absl::Status check_matrix(const OpInstance& spec, absl::string_view what, const Shape& s) {
  if (s.size() == 2) return absl::OkStatus();
  return invalid(spec, absl::StrCat(what, " must be 2-D, got ", shape_str(s)));
}

// The weight's shape for C inputs and K outputs.
Shape weight_shape(bool trans_b, int64_t c, int64_t k) {
  return trans_b ? Shape{k, c} : Shape{c, k};
}

absl::StatusOr<Shapes> linear(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(const LinearDims d, linear_dims(spec));
  const Shape w = weight_shape(d.trans_b, d.c, d.k);
  if (spec.op == OpKind::kLinear) return Shapes{{d.n, d.k}};
  return d.bias ? Shapes{w, {d.k}} : Shapes{w};
}

absl::StatusOr<Shapes> matmul(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(const MatMulShape d, matmul_dims(spec));
  return Shapes{d.out_shape()};
}

absl::StatusOr<Shapes> attention(const OpInstance& spec) {
  LMS_RETURN_IF_ERROR(attention_dims(spec).status());
  const Shape& q = spec.input_shapes[0];
  if (spec.op == OpKind::kAttention) return Shapes{q, {q[0], q[1], q[2]}};
  return Shapes{q, spec.input_shapes[1], spec.input_shapes[2]};
}

// The table must be [V,D]; returns y = ids.shape + [D].
absl::StatusOr<Shape> embedded_shape(const OpInstance& spec, const Shape& table,
                                     absl::string_view table_name) {
  if (table.size() != 2) {
    return invalid(spec, absl::StrCat(table_name, " must be 2-D [V,D], got ", shape_str(table)));
  }
  Shape y = spec.input_shapes[0];
  y.push_back(table[1]);
  return y;
}

// (ids, table[V,D]) -> y = ids.shape + [D]; (ids, dy) -> dtable =
// weight_shape, dy = ids.shape + [D].
absl::StatusOr<Shapes> embedding(const OpInstance& spec) {
  if (spec.op == OpKind::kEmbedding) {
    LMS_ASSIGN_OR_RETURN(Shape y, embedded_shape(spec, spec.input_shapes[1], "table"));
    return Shapes{y};
  }
  LMS_ASSIGN_OR_RETURN(Shape table, shape_attr(spec, "weight_shape"));
  LMS_ASSIGN_OR_RETURN(Shape dy, embedded_shape(spec, table, "weight_shape"));
  if (spec.input_shapes[1] != dy) {
    return invalid(spec, absl::StrCat("dy ", shape_str(spec.input_shapes[1]), " must be ids ",
                                      shape_str(spec.input_shapes[0]), " + [D] = ", shape_str(dy)));
  }
  return Shapes{table};
}

}  // namespace

absl::StatusOr<LinearDims> linear_dims(const OpInstance& spec) {
  const Shapes& in = spec.input_shapes;
  LinearDims d;
  LMS_ASSIGN_OR_RETURN(d.trans_b, flag_attr(spec, "trans_b"));
  LMS_RETURN_IF_ERROR(check_matrix(spec, "input x", in[0]));
  d.n = in[0][0];
  d.c = in[0][1];
  if (spec.op == OpKind::kLinearBwdWeights) {
    LMS_ASSIGN_OR_RETURN(d.bias, flag_attr(spec, "has_bias"));
    LMS_RETURN_IF_ERROR(check_matrix(spec, "input dy", in[1]));
    if (in[1][0] != d.n) {
      return invalid(spec, absl::StrCat("dy ", shape_str(in[1]), " must have x's ", d.n,
                                        " rows (x ", shape_str(in[0]), ")"));
    }
    d.k = in[1][1];
    return d;
  }
  LMS_RETURN_IF_ERROR(check_matrix(spec, "weight w", in[1]));
  d.k = d.trans_b ? in[1][0] : in[1][1];
  if (in[1] != weight_shape(d.trans_b, d.c, d.k)) {
    return invalid(spec, absl::StrCat("weight w ", shape_str(in[1]), " must be ",
                                      d.trans_b ? "[K,C]" : "[C,K]", " with C = ", d.c, " (x ",
                                      shape_str(in[0]), ", trans_b ", d.trans_b ? 1 : 0, ")"));
  }
  d.bias = in.size() > 2;
  if (d.bias && in[2] != Shape{d.k}) {
    return invalid(spec, absl::StrCat("bias b ", shape_str(in[2]), " must be [", d.k, "]"));
  }
  return d;
}

absl::StatusOr<MatMulShape> matmul_dims(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(bool trans_a, flag_attr(spec, "trans_a"));
  LMS_ASSIGN_OR_RETURN(bool trans_b, flag_attr(spec, "trans_b"));
  absl::StatusOr<MatMulShape> d =
      matmul_shape(spec.input_shapes[0], spec.input_shapes[1], trans_a, trans_b);
  if (!d.ok()) return invalid(spec, d.status().message());
  return d;
}

absl::StatusOr<AttentionDims> attention_dims(const OpInstance& spec) {
  const Shapes& in = spec.input_shapes;
  const Shape &q = in[0], &k = in[1];
  if (q.size() != 4) {
    return invalid(spec, absl::StrCat("q must have 4 dims [N,H,T,D], got ", shape_str(q)));
  }
  if (k.size() != 4 || k[0] != q[0] || k[1] != q[1] || k[3] != q[3]) {
    return invalid(spec, absl::StrCat("k must have shape [", q[0], ",", q[1], ",S,", q[3],
                                      "] (q's N, H and D), got ", shape_str(k)));
  }
  if (in[2] != k) {
    return invalid(spec, absl::StrCat("v must have the shape of k ", shape_str(k),
                                      " (the same S and D), got ", shape_str(in[2])));
  }
  if (q[3] < 1 || q[3] > kMaxAttentionHeadDim) {
    return invalid(
        spec, absl::StrCat("head dim D = ", q[3], " is not supported: attention takes 1 to ",
                           kMaxAttentionHeadDim, " (the kernels' tiles hold whole rows of D)"));
  }
  AttentionDims d;
  d.heads = q[0] * q[1];
  d.t = q[2];
  d.s = k[2];
  d.d = q[3];
  LMS_ASSIGN_OR_RETURN(d.scale, real_attr(spec, "softmax_scale"));
  if (!(d.scale > 0)) {
    return invalid(spec, absl::StrCat("softmax_scale must be > 0 and finite, got ", d.scale));
  }
  LMS_ASSIGN_OR_RETURN(d.causal, flag_attr(spec, "causal"));
  if (d.causal && d.t != d.s) {
    return invalid(spec, absl::StrCat("causal = 1 needs as many queries as keys (T == S), got T = ",
                                      d.t, ", S = ", d.s));
  }
  if (spec.op == OpKind::kAttentionBwd) {
    LMS_RETURN_IF_ERROR(check_same_shapes(spec, {q, in[3], in[5]}, {"q", "out", "dout"}));
    const Shape lse = {q[0], q[1], q[2]};
    if (in[4] != lse) {
      return invalid(spec, absl::StrCat("lse must have shape ", shape_str(lse), " [N,H,T], got ",
                                        shape_str(in[4])));
    }
  }
  return d;
}

namespace op_rules {

std::optional<RuleEntry> linear_rule(OpKind op) {
  switch (op) {
    case OpKind::kLinear:
      return RuleEntry{{2, 3}, linear, {{"trans_b"}, {}}};
    case OpKind::kLinearBwdWeights:
      return RuleEntry{{2, 2}, linear, {{"has_bias", "trans_b"}, {}}};
    case OpKind::kMatMul:
      return RuleEntry{{2, 2}, matmul, {{"trans_a", "trans_b"}, {}}};
    case OpKind::kAttention:
      return RuleEntry{{3, 3}, attention, {{"causal", "softmax_scale"}, {}}};
    case OpKind::kAttentionBwd:
      return RuleEntry{{6, 6}, attention, {{"causal", "softmax_scale"}, {}}};
    case OpKind::kEmbedding:
      return RuleEntry{{2, 2}, embedding, {}};
    case OpKind::kEmbeddingBwd:
      return RuleEntry{{2, 2}, embedding, {{"weight_shape"}, {}}};
    default:
      return std::nullopt;
  }
}

}  // namespace op_rules
}  // namespace lms
