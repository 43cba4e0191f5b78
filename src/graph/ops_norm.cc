// Instance, batch and layer normalisation of docs/ops.md: batch_norm in
// training mode (batch statistics, optionally saving them for the running
// averages) or eval mode (running statistics), bn_stats_update, the
// step-commit update of the running averages, and layer_norm over the last
// axis.
#include "absl/strings/str_cat.h"
#include "graph/ops_internal.h"
#include "lms/status.h"

namespace lms::ops_internal {
namespace {

using Shapes = std::vector<Shape>;

// Per-element work: mean, variance, normalise, scale and shift.
constexpr double kNormFlopsPerElement = 5;

decltype(OpDef::grad) norm_grad(OpKind bwd_op) {
  return [=](GradContext& ctx) -> absl::Status {
    const Node& node = ctx.graph.node(ctx.node);
    if (node.op == OpKind::kBatchNorm) {
      // The node has passed the op schema: training is absent, 0 or 1.
      if (attr_int_or(node.attrs, "training", 1) == 0) {
        return absl::UnimplementedError(
            "batch_norm in eval mode (training = 0) has no gradient rule; train with training = 1");
      }
    }
    const TensorId dy = ctx.output_grads[0];
    if (dy != kNoTensor && (wants(ctx, 0) || wants(ctx, 1) || wants(ctx, 2))) {
      const Node fwd = ctx.graph.node(ctx.node);
      Attrs attrs = {{"eps", fwd.attrs.at("eps")}};  // not momentum / training
      LMS_ASSIGN_OR_RETURN(
          auto outs, add_grad_node(ctx, bwd_op, "bwd", {fwd.inputs[0], fwd.inputs[1], dy}, attrs));
      for (size_t i = 0; i < 3; ++i) {
        if (wants(ctx, i)) ctx.input_grads[i] = outs[i];
      }
    }
    decline_rest(ctx);
    return absl::OkStatus();
  };
}

double norm_flops(const Shapes& in) { return kNormFlopsPerElement * numel(in[0]); }

}  // namespace

void register_norm_ops(std::vector<OpSpec>& specs) {
  auto flops = [](const Attrs&, const Shapes& in, const Shapes&) { return norm_flops(in); };
  specs.push_back(
      make_schema_spec(OpKind::kInstanceNorm, flops, norm_grad(OpKind::kInstanceNormBwd)));
  specs.push_back(make_schema_spec(OpKind::kInstanceNormBwd, flops));
  specs.push_back(make_schema_spec(OpKind::kBatchNorm, flops, norm_grad(OpKind::kBatchNormBwd)));
  specs.push_back(make_schema_spec(OpKind::kBatchNormBwd, flops));
  // Two multiply-adds per running statistic, one scale for the variance.
  specs.push_back(make_schema_spec(
      OpKind::kBnStatsUpdate,
      [](const Attrs&, const Shapes& in, const Shapes&) { return 5 * numel(in[0]); }, nullptr,
      {0, 1}));
  specs.push_back(make_schema_spec(OpKind::kLayerNorm, flops, norm_grad(OpKind::kLayerNormBwd)));
  specs.push_back(make_schema_spec(OpKind::kLayerNormBwd, flops));
  set_flag(specs, &OpDef::recomputable,
           {OpKind::kInstanceNorm, OpKind::kBatchNorm, OpKind::kLayerNorm});
  set_flag(specs, &OpDef::backward,
           {OpKind::kInstanceNormBwd, OpKind::kBatchNormBwd, OpKind::kLayerNormBwd});
}

}  // namespace lms::ops_internal
