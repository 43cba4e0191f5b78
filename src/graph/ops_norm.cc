// Instance and batch normalisation (training mode) of docs/ops.md.
#include "absl/strings/str_cat.h"
#include "graph/ops_internal.h"
#include "lms/status.h"

namespace lms::ops_internal {
namespace {

using Shapes = std::vector<Shape>;

// Per-element work: mean, variance, normalise, scale and shift.
constexpr double kNormFlopsPerElement = 5;

// x[N,C,S], gamma[C] and a positive eps; instance norm needs a spatial part
// (statistics over S), batch norm at least [N,C].
absl::Status check_norm(std::string_view op, const Attrs& a, const Shape& x, const Shape& gamma,
                        size_t min_rank) {
  if (x.size() < min_rank) {
    return op_error(op, str_cat("input x must have at least ", min_rank, " dims [N,C,...], got ",
                                shape_str(x)));
  }
  if (gamma != Shape{x[1]}) {
    return op_error(
        op, str_cat("gamma must have shape [", x[1], "] (channels of x), got ", shape_str(gamma)));
  }
  return real_attr_in(op, a, "eps", 0, 1, /*open_lo=*/true).status();
}

decltype(OpDef::infer) infer_norm(std::string op, size_t min_rank) {
  return [=](const Attrs& a, const Shapes& in) -> absl::StatusOr<Shapes> {
    LMS_RETURN_IF_ERROR(check_norm(op, a, in[0], in[1], min_rank));
    if (in[2] != in[1]) {
      return op_error(
          op, str_cat("beta must have shape ", shape_str(in[1]), ", got ", shape_str(in[2])));
    }
    return Shapes{in[0]};
  };
}

// (x, gamma, dy) -> dx, dgamma, dbeta.
decltype(OpDef::infer) infer_norm_bwd(std::string op, size_t min_rank) {
  return [=](const Attrs& a, const Shapes& in) -> absl::StatusOr<Shapes> {
    LMS_RETURN_IF_ERROR(check_norm(op, a, in[0], in[1], min_rank));
    LMS_RETURN_IF_ERROR(check_same_shapes(op, {in[0], in[2]}, {"x", "dy"}));
    return Shapes{in[0], in[1], in[1]};
  };
}

decltype(OpDef::grad) norm_grad(OpKind bwd_op) {
  return [=](GradContext& ctx) -> absl::Status {
    const TensorId dy = ctx.output_grads[0];
    if (dy != kNoTensor && (wants(ctx, 0) || wants(ctx, 1) || wants(ctx, 2))) {
      const Node fwd = ctx.graph.node(ctx.node);
      LMS_ASSIGN_OR_RETURN(auto outs, add_grad_node(ctx, bwd_op, "bwd",
                                                    {fwd.inputs[0], fwd.inputs[1], dy}, fwd.attrs));
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
  specs.push_back(make_spec(OpKind::kInstanceNorm, 3, 3, {"eps"}, infer_norm("instance_norm", 3),
                            flops, norm_grad(OpKind::kInstanceNormBwd)));
  specs.push_back(make_spec(OpKind::kInstanceNormBwd, 3, 3, {"eps"},
                            infer_norm_bwd("instance_norm_bwd", 3), flops));
  specs.push_back(make_spec(OpKind::kBatchNorm, 3, 3, {"eps"}, infer_norm("batch_norm", 2), flops,
                            norm_grad(OpKind::kBatchNormBwd)));
  specs.push_back(
      make_spec(OpKind::kBatchNormBwd, 3, 3, {"eps"}, infer_norm_bwd("batch_norm_bwd", 2), flops));
  set_flag(specs, &OpDef::recomputable, {OpKind::kInstanceNorm, OpKind::kBatchNorm});
  set_flag(specs, &OpDef::backward, {OpKind::kInstanceNormBwd, OpKind::kBatchNormBwd});
}

}  // namespace lms::ops_internal
