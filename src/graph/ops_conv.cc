// Spatial ops of docs/ops.md: conv, deconv (transposed conv), upsample and
// max_pool with their backward ops. Shapes are NCHW / NCDHW; every spatial
// attribute has one entry per spatial dimension.
#include "absl/strings/str_cat.h"
#include "graph/ops_internal.h"
#include "lms/status.h"
#include "lms/types.h"

namespace lms::ops_internal {
namespace {

using Shapes = std::vector<Shape>;

// 2*N*K*(C/group)*prod(k)*prod(S'): numel(y) * (numel(w)/K) multiply-adds.
double conv_flops(const Shape& y, const Shape& w) { return 2 * numel(y) * numel(w, 1); }

absl::Status conv_grad(GradContext& ctx) {
  if (ctx.output_grads[0] == kNoTensor) {
    decline_rest(ctx);
    return absl::OkStatus();
  }
  const Node fwd = ctx.graph.node(ctx.node);
  const bool bias = fwd.inputs.size() > 2;
  const bool want_db = bias && wants(ctx, 2);
  TensorId dy = ctx.output_grads[0];
  if (fwd.attrs.contains(kActivationAttr) && (wants(ctx, 0) || wants(ctx, 1) || want_db)) {
    // y = relu(v): dv = relu_bwd(y, dy), exact (Note [Conv + ReLU fusion]).
    LMS_ASSIGN_OR_RETURN(dy,
                         add_grad_node1(ctx, OpKind::kReluBwd, "relu", {fwd.outputs[0], dy}, {}));
  }
  Attrs geom = {{"stride", fwd.attrs.at("stride")},
                {"pad", fwd.attrs.at("pad")},
                {"dilation", fwd.attrs.at("dilation")}};
  if (auto it = fwd.attrs.find("group"); it != fwd.attrs.end()) geom["group"] = it->second;
  if (wants(ctx, 0)) {
    Attrs a = geom;
    a["input_shape"] = input_shape(ctx, 0);
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0],
                         add_grad_node1(ctx, OpKind::kConvBwdData, "data", {dy, fwd.inputs[1]}, a));
  }
  if (wants(ctx, 1) || want_db) {
    Attrs a = geom;
    a["weight_shape"] = input_shape(ctx, 1);
    a["has_bias"] = int64_t{want_db ? 1 : 0};
    LMS_ASSIGN_OR_RETURN(
        auto outs, add_grad_node(ctx, OpKind::kConvBwdWeights, "weights", {fwd.inputs[0], dy}, a));
    if (wants(ctx, 1)) ctx.input_grads[1] = outs[0];
    if (want_db) ctx.input_grads[2] = outs[1];
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// ---- deconv ----

absl::Status deconv_grad(GradContext& ctx) {
  const TensorId dy = ctx.output_grads[0];
  if (dy == kNoTensor) {
    decline_rest(ctx);
    return absl::OkStatus();
  }
  const Node fwd = ctx.graph.node(ctx.node);
  const bool bias = fwd.inputs.size() > 2;
  Attrs geom = {{"stride", fwd.attrs.at("stride")}, {"pad", fwd.attrs.at("pad")}};
  if (wants(ctx, 0)) {
    Attrs a = geom;
    a["input_shape"] = input_shape(ctx, 0);
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0], add_grad_node1(ctx, OpKind::kDeconvBwdData, "data",
                                                            {dy, fwd.inputs[1]}, a));
  }
  const bool want_db = bias && wants(ctx, 2);
  if (wants(ctx, 1) || want_db) {
    Attrs a = geom;
    a["weight_shape"] = input_shape(ctx, 1);
    a["has_bias"] = int64_t{want_db ? 1 : 0};
    LMS_ASSIGN_OR_RETURN(auto outs, add_grad_node(ctx, OpKind::kDeconvBwdWeights, "weights",
                                                  {fwd.inputs[0], dy}, a));
    if (wants(ctx, 1)) ctx.input_grads[1] = outs[0];
    if (want_db) ctx.input_grads[2] = outs[1];
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// ---- upsample ----

double upsample_flops(const Attrs& a, const Shape& big) {
  const bool linear = attr_str(a, "mode").value_or("nearest") == "linear";
  // Linear interpolation reads 2^r neighbours with a multiply-add each.
  return numel(big) * (linear ? 2.0 * static_cast<double>(1 << (big.size() - 2)) : 1.0);
}

absl::Status upsample_grad(GradContext& ctx) {
  if (ctx.output_grads[0] != kNoTensor && wants(ctx, 0)) {
    const Node fwd = ctx.graph.node(ctx.node);
    Attrs a = {{"scale", fwd.attrs.at("scale")},
               {"mode", fwd.attrs.at("mode")},
               {"input_shape", input_shape(ctx, 0)}};
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0], add_grad_node1(ctx, OpKind::kUpsampleBwd, "data",
                                                            {ctx.output_grads[0]}, a));
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// ---- max_pool ----

double pool_flops(const Attrs& a, const Shape& y) {
  auto kernel = attr_ints(a, "kernel");
  return numel(y) * (kernel.ok() ? numel(*kernel) : 1.0);
}

absl::Status max_pool_grad(GradContext& ctx) {
  if (ctx.output_grads[0] != kNoTensor && wants(ctx, 0)) {
    const Node fwd = ctx.graph.node(ctx.node);
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0],
                         add_grad_node1(ctx, OpKind::kMaxPoolBwd, "data",
                                        {fwd.inputs[0], ctx.output_grads[0]}, fwd.attrs));
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

// ---- avg_pool ----

// dx spreads each dy over its window; it needs dy and x's shape, not x.
absl::Status avg_pool_grad(GradContext& ctx) {
  if (ctx.output_grads[0] != kNoTensor && wants(ctx, 0)) {
    Attrs a = ctx.graph.node(ctx.node).attrs;
    a.erase(std::string(kLayoutAttr));
    a["input_shape"] = input_shape(ctx, 0);
    LMS_ASSIGN_OR_RETURN(ctx.input_grads[0], add_grad_node1(ctx, OpKind::kAvgPoolBwd, "data",
                                                            {ctx.output_grads[0]}, a));
  }
  decline_rest(ctx);
  return absl::OkStatus();
}

}  // namespace

void register_conv_ops(std::vector<OpSpec>& specs) {
  specs.push_back(make_schema_spec(
      OpKind::kConv,
      [](const Attrs&, const Shapes& in, const Shapes& out) { return conv_flops(out[0], in[1]); },
      conv_grad));
  specs.push_back(make_schema_spec(
      OpKind::kConvBwdData,
      [](const Attrs&, const Shapes& in, const Shapes&) { return conv_flops(in[0], in[1]); }));
  specs.push_back(make_schema_spec(
      OpKind::kConvBwdWeights,
      [](const Attrs&, const Shapes& in, const Shapes& out) { return conv_flops(in[1], out[0]); }));
  // Transposed conv: every input pixel scatters into K*prod(k) outputs.
  auto deconv_flops = [](const Shape& x, const Shape& w) { return 2 * numel(x) * numel(w, 1); };
  specs.push_back(make_schema_spec(
      OpKind::kDeconv,
      [=](const Attrs&, const Shapes& in, const Shapes&) { return deconv_flops(in[0], in[1]); },
      deconv_grad));
  specs.push_back(make_schema_spec(OpKind::kDeconvBwdData,
                                   [=](const Attrs&, const Shapes& in, const Shapes& out) {
                                     return deconv_flops(out[0], in[1]);
                                   }));
  specs.push_back(make_schema_spec(OpKind::kDeconvBwdWeights,
                                   [=](const Attrs&, const Shapes& in, const Shapes& out) {
                                     return deconv_flops(in[0], out[0]);
                                   }));
  specs.push_back(make_schema_spec(
      OpKind::kUpsample,
      [](const Attrs& a, const Shapes&, const Shapes& out) { return upsample_flops(a, out[0]); },
      upsample_grad));
  specs.push_back(make_schema_spec(
      OpKind::kUpsampleBwd,
      [](const Attrs& a, const Shapes& in, const Shapes&) { return upsample_flops(a, in[0]); }));
  specs.push_back(make_schema_spec(
      OpKind::kMaxPool,
      [](const Attrs& a, const Shapes&, const Shapes& out) { return pool_flops(a, out[0]); },
      max_pool_grad));
  specs.push_back(make_schema_spec(
      OpKind::kMaxPoolBwd,
      [](const Attrs& a, const Shapes& in, const Shapes&) { return pool_flops(a, in[1]); }));
  specs.push_back(make_schema_spec(
      OpKind::kAvgPool,
      [](const Attrs& a, const Shapes&, const Shapes& out) { return pool_flops(a, out[0]); },
      avg_pool_grad));
  specs.push_back(make_schema_spec(
      OpKind::kAvgPoolBwd,
      [](const Attrs& a, const Shapes& in, const Shapes&) { return pool_flops(a, in[0]); }));
  set_flag(specs, &OpDef::recomputable,
           {OpKind::kConv, OpKind::kDeconv, OpKind::kUpsample, OpKind::kMaxPool, OpKind::kAvgPool});
  set_flag(
      specs, &OpDef::backward,
      {OpKind::kConvBwdData, OpKind::kConvBwdWeights, OpKind::kDeconvBwdData,
       OpKind::kDeconvBwdWeights, OpKind::kUpsampleBwd, OpKind::kMaxPoolBwd, OpKind::kAvgPoolBwd});
}

}  // namespace lms::ops_internal
