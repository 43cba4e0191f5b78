// Scaled dot-product attention of docs/ops.md as one op, whose backward
// recomputes the probabilities (FlashAttention, Dao et al. 2022, Section
// 3.1; the kernels tile it): the forward saves its output and the row log-sum-exp
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
  specs.push_back(make_schema_spec(
      OpKind::kAttention,
      [](const Attrs&, const Shapes& in, const Shapes&) { return kFwdFlopsPerTsd * nhtsd(in); },
      attention_grad));
  specs.push_back(make_schema_spec(
      OpKind::kAttentionBwd,
      [](const Attrs&, const Shapes& in, const Shapes&) { return kBwdFlopsPerTsd * nhtsd(in); }));
  set_flag(specs, &OpDef::recomputable, {OpKind::kAttention});
  set_flag(specs, &OpDef::backward, {OpKind::kAttentionBwd});
}

}  // namespace lms::ops_internal
