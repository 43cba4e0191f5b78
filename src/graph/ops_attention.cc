// Scaled dot-product attention of docs/ops.md as one op, whose backward
// recomputes the probabilities (FlashAttention, Dao et al. 2022, Section
// 3.1, untiled): the forward saves its output and the row log-sum-exp
// lse[N,H,T], so the [N,H,T,S] probabilities are never a graph tensor and
// the tensors kept for the backward are O(T), not O(T*S).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "graph/ops_internal.h"
#include "lms/status.h"

namespace lms::ops_internal {
namespace {

// Forward: scores q·kᵀ and P·v (2·T·S·D each, multiply-add = 2).
constexpr double kFwdFlopsPerTsd = 4;
// Backward: the recomputed scores, dV = Pᵀ·dO, dP = dO·Vᵀ, dQ and dK.
constexpr double kBwdFlopsPerTsd = 10;

// q[N,H,T,D], k[N,H,S,D] and v[N,H,S,D]; softmax_scale > 0 and causal 0 or
// 1, where causal needs T == S.
absl::Status check_attention(std::string_view op, const Attrs& a, const Shapes& in) {
  const Shape& q = in[0];
  if (q.size() != 4) {
    return op_error(op, str_cat("q must have 4 dims [N,H,T,D], got ", shape_str(q)));
  }
  const Shape& k = in[1];
  if (k.size() != 4 || k[0] != q[0] || k[1] != q[1] || k[3] != q[3]) {
    return op_error(op, str_cat("k must have shape [", q[0], ",", q[1], ",S,", q[3],
                                "] (q's N, H and D), got ", shape_str(k)));
  }
  if (in[2] != k) {
    return op_error(op, str_cat("v must have the shape of k ", shape_str(k),
                                " (the same S and D), got ", shape_str(in[2])));
  }
  auto scale = attr_real(a, "softmax_scale");
  if (!scale.ok()) return op_error(op, scale.status().message());
  if (!(*scale > 0) || !std::isfinite(*scale)) {
    return op_error(op, str_cat("softmax_scale must be > 0 and finite, got ", *scale));
  }
  auto causal = attr_int(a, "causal");
  if (!causal.ok()) return op_error(op, causal.status().message());
  if (*causal != 0 && *causal != 1) {
    return op_error(op, str_cat("causal must be 0 or 1, got ", *causal));
  }
  if (*causal == 1 && q[2] != k[2]) {
    return op_error(op, str_cat("causal = 1 needs as many queries as keys (T == S), got T = ", q[2],
                                ", S = ", k[2]));
  }
  return absl::OkStatus();
}

absl::StatusOr<Shapes> infer_attention(const Attrs& a, const Shapes& in) {
  LMS_RETURN_IF_ERROR(check_attention("attention", a, in));
  const Shape& q = in[0];
  return Shapes{q, {q[0], q[1], q[2]}};
}

// (q, k, v, out, lse, dout) -> dq, dk, dv.
absl::StatusOr<Shapes> infer_attention_bwd(const Attrs& a, const Shapes& in) {
  constexpr std::string_view kOp = "attention_bwd";
  LMS_RETURN_IF_ERROR(check_attention(kOp, a, in));
  const Shape& q = in[0];
  LMS_RETURN_IF_ERROR(check_same_shapes(kOp, {q, in[3], in[5]}, {"q", "out", "dout"}));
  const Shape lse = {q[0], q[1], q[2]};
  if (in[4] != lse) {
    return op_error(
        kOp, str_cat("lse must have shape ", shape_str(lse), " [N,H,T], got ", shape_str(in[4])));
  }
  return Shapes{q, in[1], in[2]};
}

// N·H·T·S·D of q[N,H,T,D] and k[N,H,S,D].
double nhtsd(const Shapes& in) { return numel(in[0]) * static_cast<double>(in[1][2]); }

absl::Status attention_grad(GradContext& ctx) {
  if (ctx.output_grads.size() > 1 && ctx.output_grads[1] != kNoTensor) {
    // The autodiff names the node.
    return absl::InvalidArgumentError(
        "its output lse (the row log-sum-exp) is saved for the backward only; no gradient may "
        "reach it (read the attention output instead)");
  }
  const TensorId dout = ctx.output_grads[0];
  if (dout != kNoTensor && (wants(ctx, 0) || wants(ctx, 1) || wants(ctx, 2))) {
    const Node fwd = ctx.graph.node(ctx.node);
    const Attrs attrs = {{"softmax_scale", fwd.attrs.at("softmax_scale")},
                         {"causal", fwd.attrs.at("causal")}};
    LMS_ASSIGN_OR_RETURN(auto outs, add_grad_node(ctx, OpKind::kAttentionBwd, "bwd",
                                                  {fwd.inputs[0], fwd.inputs[1], fwd.inputs[2],
                                                   fwd.outputs[0], fwd.outputs[1], dout},
                                                  attrs));
    for (size_t i = 0; i < 3; ++i) {
      if (wants(ctx, i)) ctx.input_grads[i] = outs[i];
    }
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

}  // namespace

void register_attention_ops(std::vector<OpSpec>& specs) {
  specs.push_back(make_spec(
      OpKind::kAttention, 3, 3, {"causal", "softmax_scale"}, infer_attention,
      [](const Attrs&, const Shapes& in, const Shapes&) { return kFwdFlopsPerTsd * nhtsd(in); },
      attention_grad));
  specs.push_back(make_spec(
      OpKind::kAttentionBwd, 6, 6, {"causal", "softmax_scale"}, infer_attention_bwd,
      [](const Attrs&, const Shapes& in, const Shapes&) { return kBwdFlopsPerTsd * nhtsd(in); }));
  set_flag(specs, &OpDef::recomputable, {OpKind::kAttention});
  set_flag(specs, &OpDef::backward, {OpKind::kAttentionBwd});
}

}  // namespace lms::ops_internal
