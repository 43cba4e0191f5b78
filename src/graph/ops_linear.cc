// Matrix products of docs/ops.md: linear (ONNX Gemm with alpha = beta = 1 and
// transA = 0) and the gradient of its weight and bias, and matmul (batched,
// numpy.matmul with transposes). The data gradient of linear needs no op of
// its own: dx = dy · W is a linear with trans_b flipped; matmul's gradients
// are matmuls with the transposes folded into their flags.
#include "absl/strings/str_cat.h"
#include "common/matmul_shape.h"
#include "graph/ops_internal.h"
#include "lms/status.h"

namespace lms::ops_internal {
namespace {

using Shapes = std::vector<Shape>;

// dx = linear(dy, w) with trans_b flipped (dy[N,K] · w[K,C], or dy · w[C,K]ᵀ);
// dw and db from one linear_bwd_weights.
absl::Status linear_grad(GradContext& ctx) {
  const TensorId dy = ctx.output_grads[0];
  if (dy == kNoTensor) {
    decline_rest(ctx);
    return absl::OkStatus();
  }
  const Node fwd = ctx.graph.node(ctx.node);
  const int64_t trans_b = attr_int_or(fwd.attrs, "trans_b", 1);
  const bool want_db = fwd.inputs.size() > 2 && wants(ctx, 2);
  if (wants(ctx, 0)) {
    Attrs a = {{"trans_b", int64_t{1 - trans_b}}};
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0],
                         add_grad_node1(ctx, OpKind::kLinear, "data", {dy, fwd.inputs[1]}, a));
  }
  if (wants(ctx, 1) || want_db) {
    Attrs a = {{"trans_b", trans_b}, {"has_bias", int64_t{want_db ? 1 : 0}}};
    LMS_ASSIGN_OR_RETURN(auto outs, add_grad_node(ctx, OpKind::kLinearBwdWeights, "weights",
                                                  {fwd.inputs[0], dy}, a));
    if (wants(ctx, 1)) ctx.input_grads[1] = outs[0];
    if (want_db) ctx.input_grads[2] = outs[1];
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// 2·N·C·K for the product, N·K for the bias (added or summed).
double linear_flops(const Shapes& in, const Shapes& out, bool bias) {
  const double n = static_cast<double>(in[0][0]);
  const double c = static_cast<double>(in[0][1]);
  const double k = numel(out[0]) / n;
  return 2 * n * c * k + (bias ? n * k : 0.0);
}

// 2·batch·M·N·K.
double matmul_flops(const Attrs& a, const Shapes& in, const Shapes& out) {
  const Shape& x = in[0];
  const bool trans_a = attr_int_or(a, "trans_a", 0) == 1;
  const double k = static_cast<double>(x[x.size() - (trans_a ? 2 : 1)]);
  return 2 * numel(out[0]) * k;
}

Attrs matmul_flags(bool trans_a, bool trans_b) {
  return {{"trans_a", int64_t{trans_a ? 1 : 0}}, {"trans_b", int64_t{trans_b ? 1 : 0}}};
}

// `g` (batched like y) summed to the shape of input i where that input was
// broadcast over y's batch.
absl::StatusOr<TensorId> sum_to_input(GradContext& ctx, size_t i, TensorId g) {
  const Shape s = input_shape(ctx, i);
  if (ctx.graph.tensor(g).shape == s) return g;
  return add_grad_node1(ctx, OpKind::kSumTo, i == 0 ? "a_sum" : "b_sum", {g}, {{"shape", s}});
}

// A rank-2 b shared by a batched, untransposed a: dB = Aᵀ·dY over all rows
// at once, a[P·M, K]ᵀ · dy[P·M, N] (or dyᵀ · a for a transposed b), one
// matmul that sums over the batch in its own inner loop.
absl::StatusOr<TensorId> shared_weight_grad(GradContext& ctx, TensorId dy, bool trans_b) {
  const Shape a = input_shape(ctx, 0);
  const Shape y = ctx.graph.tensor(dy).shape;
  const int64_t rows = num_elements(a) / a.back();
  LMS_ASSIGN_OR_RETURN(TensorId a2,
                       add_grad_node1(ctx, OpKind::kReshape, "a_rows", {fwd_input(ctx, 0)},
                                      {{"shape", Shape{rows, a.back()}}}));
  LMS_ASSIGN_OR_RETURN(TensorId dy2, add_grad_node1(ctx, OpKind::kReshape, "dy_rows", {dy},
                                                    {{"shape", Shape{rows, y.back()}}}));
  if (trans_b)
    return add_grad_node1(ctx, OpKind::kMatMul, "b", {dy2, a2}, matmul_flags(true, false));
  return add_grad_node1(ctx, OpKind::kMatMul, "b", {a2, dy2}, matmul_flags(true, false));
}

// y = op(a) · op(b): d op(a) = dy · op(b)ᵀ and d op(b) = op(a)ᵀ · dy, with
// each transpose folded into the flags of the matmul that computes it, then
// summed over the batch dimensions the input was broadcast along.
absl::Status matmul_grad(GradContext& ctx) {
  const TensorId dy = ctx.output_grads[0];
  if (dy == kNoTensor) {
    decline_rest(ctx);
    return absl::OkStatus();
  }
  const Node fwd = ctx.graph.node(ctx.node);
  const bool ta = attr_int_or(fwd.attrs, "trans_a", 0) == 1;
  const bool tb = attr_int_or(fwd.attrs, "trans_b", 0) == 1;
  const TensorId a = fwd.inputs[0], b = fwd.inputs[1];
  if (wants(ctx, 0)) {
    // da = dy · op(b)ᵀ, or its transpose op(b) · dyᵀ for a transposed a.
    LMS_ASSIGN_OR_RETURN(
        TensorId g,
        ta ? add_grad_node1(ctx, OpKind::kMatMul, "a", {b, dy}, matmul_flags(tb, true))
           : add_grad_node1(ctx, OpKind::kMatMul, "a", {dy, b}, matmul_flags(false, !tb)));
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0], sum_to_input(ctx, 0, g));
  }
  if (wants(ctx, 1)) {
    const Shape as = input_shape(ctx, 0), bs = input_shape(ctx, 1);
    if (bs.size() == 2 && as.size() > 2 && !ta) {
      LMS_ASSIGN_OR_RETURN(ctx.input_grads[1], shared_weight_grad(ctx, dy, tb));
    } else {
      // db = op(a)ᵀ · dy, or its transpose dyᵀ · op(a) for a transposed b.
      LMS_ASSIGN_OR_RETURN(
          TensorId g,
          tb ? add_grad_node1(ctx, OpKind::kMatMul, "b", {dy, a}, matmul_flags(true, ta))
             : add_grad_node1(ctx, OpKind::kMatMul, "b", {a, dy}, matmul_flags(!ta, false)));
      LMS_ASSIGN_OR_RETURN(ctx.input_grads[1], sum_to_input(ctx, 1, g));
    }
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

}  // namespace

void register_linear_ops(std::vector<OpSpec>& specs) {
  specs.push_back(make_schema_spec(
      OpKind::kLinear,
      [](const Attrs&, const Shapes& in, const Shapes& out) {
        return linear_flops(in, out, in.size() > 2);
      },
      linear_grad));
  specs.back().def.recomputable = true;
  specs.push_back(make_schema_spec(OpKind::kLinearBwdWeights, [](const Attrs&, const Shapes& in,
                                                                 const Shapes& out) {
    return 2 * numel(in[0]) * static_cast<double>(in[1][1]) + (out.size() > 1 ? numel(in[1]) : 0.0);
  }));
  specs.back().def.backward = true;
  specs.push_back(make_schema_spec(OpKind::kMatMul, matmul_flops, matmul_grad));
  specs.back().def.recomputable = true;
}

}  // namespace lms::ops_internal
