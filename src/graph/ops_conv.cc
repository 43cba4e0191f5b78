// Spatial ops of docs/ops.md: conv, deconv (transposed conv), upsample and
// max_pool with their backward ops. Shapes are NCHW / NCDHW; every spatial
// attribute has one entry per spatial dimension.
#include "absl/strings/str_cat.h"
#include "graph/ops_internal.h"
#include "lms/checked.h"
#include "lms/status.h"
#include "lms/types.h"

namespace lms::ops_internal {
namespace {

using Shapes = std::vector<Shape>;

struct Geometry {
  std::vector<int64_t> stride, pad, dilation;
  int64_t group = 1;  // conv's channel groups (1 = dense; C = depthwise)
};

// Reads stride / pad (and dilation when `with_dilation`) for an input of rank
// `rank` (4 or 5).
absl::StatusOr<Geometry> read_geometry(std::string_view op, const Attrs& a, size_t rank,
                                       bool with_dilation) {
  Geometry g;
  const size_t r = rank - 2;
  LMS_ASSIGN_OR_RETURN(g.stride, spatial_attr(op, a, "stride", r, rank, 1));
  LMS_ASSIGN_OR_RETURN(g.pad, spatial_attr(op, a, "pad", r, rank, 0));
  if (with_dilation) {
    LMS_ASSIGN_OR_RETURN(g.dilation, spatial_attr(op, a, "dilation", r, rank, 1));
    g.group = attr_int_or(a, "group", 1);
    if (g.group < 1) return op_error(op, str_cat("group must be >= 1, got ", g.group));
  } else {
    g.dilation.assign(r, 1);
  }
  return g;
}

// Checks x[N,C,S] against a weight whose input-channel dim is `w_c_dim`
// (1 for conv's [K,C/group,k..], 0 for deconv's [C,K,k..]).
absl::Status check_weight(std::string_view op, const Shape& x, const Shape& w, int w_c_dim,
                          std::string_view w_layout, int64_t group = 1) {
  LMS_RETURN_IF_ERROR(check_spatial_rank(op, "input x", x));
  if (w.size() != x.size()) {
    return op_error(op, str_cat("weight must be ", x.size(), "-D ", w_layout, " for a ", x.size(),
                                "-D input, got ", shape_str(w)));
  }
  if (group > 1 && (x[1] % group != 0 || w[0] % group != 0)) {
    return op_error(
        op, str_cat("group ", group, " must divide the ", x[1], " channels of x and the ", w[0],
                    " outputs of the weight ", shape_str(w)));
  }
  if (w[w_c_dim] != x[1] / group) {
    return op_error(op, str_cat("weight ", shape_str(w), " has ", w[w_c_dim],
                                " input channels per group but x ", shape_str(x), " has ", x[1],
                                group > 1 ? str_cat(" in ", group, " groups") : ""));
  }
  return absl::OkStatus();
}

using Int = Checked<int64_t>;

// InvalidArgument for spatial arithmetic that overflows int64, naming the
// attributes that went into it.
absl::Status overflow_error(std::string_view op, size_t dim, std::string_view formula,
                            std::string_view values) {
  return op_error(op, str_cat(formula, " overflows int64 in spatial dim ", dim, " (", values,
                              "); the attributes or the input are too large"));
}

// y[N,K,S'] of conv(x, w) with S' = (S + 2p - d(k-1) - 1)/s + 1.
absl::StatusOr<Shape> conv_shape(std::string_view op, const Shape& x, const Shape& w,
                                 const Geometry& g) {
  LMS_RETURN_IF_ERROR(check_weight(op, x, w, 1, "[K,C/group,k..]", g.group));
  Shape y = {x[0], w[0]};
  for (size_t i = 0; i + 2 < x.size(); ++i) {
    const Int span = Int(g.dilation[i]) * (w[i + 2] - 1) + 1;
    const Int checked_room = Int(x[i + 2]) + Int(g.pad[i]) * 2 - span;
    if (!checked_room.ok()) {
      return overflow_error(op, i, "input + 2*pad - dilation*(kernel-1) - 1",
                            str_cat("input ", x[i + 2], ", kernel ", w[i + 2], ", pad ", g.pad[i],
                                    ", dilation ", g.dilation[i]));
    }
    const int64_t room = checked_room.value();
    if (room < 0) {
      return op_error(op, str_cat("output size is not positive in spatial dim ", i, " (input ",
                                  x[i + 2], ", kernel ", w[i + 2], ", pad ", g.pad[i],
                                  ", dilation ", g.dilation[i], ")"));
    }
    y.push_back(room / g.stride[i] + 1);
  }
  return y;
}

// y[N,K,S'] of deconv(x, w) with S' = (S-1)s - 2p + k.
absl::StatusOr<Shape> deconv_shape(std::string_view op, const Shape& x, const Shape& w,
                                   const Geometry& g) {
  LMS_RETURN_IF_ERROR(check_weight(op, x, w, 0, "[C,K,k..]"));
  Shape y = {x[0], w[1]};
  for (size_t i = 0; i + 2 < x.size(); ++i) {
    const Int checked_out = Int(x[i + 2] - 1) * g.stride[i] - Int(g.pad[i]) * 2 + w[i + 2];
    if (!checked_out.ok()) {
      return overflow_error(op, i, "(input-1)*stride - 2*pad + kernel",
                            str_cat("input ", x[i + 2], ", kernel ", w[i + 2], ", pad ", g.pad[i],
                                    ", stride ", g.stride[i]));
    }
    const int64_t out = checked_out.value();
    if (out <= 0) {
      return op_error(
          op, str_cat("output size is not positive in spatial dim ", i, " (input ", x[i + 2],
                      ", kernel ", w[i + 2], ", pad ", g.pad[i], ", stride ", g.stride[i], ")"));
    }
    y.push_back(out);
  }
  return y;
}

absl::Status check_bias(std::string_view op, const Shapes& in, int64_t k) {
  if (in.size() < 3) return absl::OkStatus();
  if (in[2] != Shape{k}) {
    return op_error(op, str_cat("bias must have shape [", k, "], got ", shape_str(in[2])));
  }
  return absl::OkStatus();
}

absl::Status check_dy(std::string_view op, const Shape& expected, const Shape& dy) {
  if (expected == dy) return absl::OkStatus();
  return op_error(op, str_cat("dy ", shape_str(dy), " does not match the forward output ",
                              shape_str(expected)));
}

absl::StatusOr<bool> has_bias_attr(std::string_view op, const Attrs& a) {
  auto v = attr_int(a, "has_bias");
  if (!v.ok()) return op_error(op, v.status().message());
  if (*v != 0 && *v != 1) return op_error(op, str_cat("has_bias must be 0 or 1, got ", *v));
  return *v == 1;
}

// ---- conv ----

absl::StatusOr<Shapes> infer_conv(const Attrs& a, const Shapes& in) {
  LMS_RETURN_IF_ERROR(check_spatial_rank("conv", "input x", in[0]));
  LMS_ASSIGN_OR_RETURN(Geometry g, read_geometry("conv", a, in[0].size(), true));
  LMS_ASSIGN_OR_RETURN(Shape y, conv_shape("conv", in[0], in[1], g));
  LMS_RETURN_IF_ERROR(check_bias("conv", in, in[1][0]));
  if (auto it = a.find(kActivationAttr); it != a.end()) {
    const std::string* v = std::get_if<std::string>(&it->second);
    if (v == nullptr || *v != kActivationRelu) {
      return op_error("conv", str_cat("attribute '", kActivationAttr, "' must be the string \"",
                                      kActivationRelu, "\" (or absent: no activation)"));
    }
  }
  return Shapes{y};
}

absl::StatusOr<Shapes> infer_conv_bwd_data(const Attrs& a, const Shapes& in) {
  constexpr std::string_view kOp = "conv_bwd_data";
  LMS_ASSIGN_OR_RETURN(Shape x, shape_attr(kOp, a, "input_shape"));
  LMS_RETURN_IF_ERROR(check_spatial_rank(kOp, "input_shape", x));
  LMS_ASSIGN_OR_RETURN(Geometry g, read_geometry(kOp, a, x.size(), true));
  LMS_ASSIGN_OR_RETURN(Shape y, conv_shape(kOp, x, in[1], g));
  LMS_RETURN_IF_ERROR(check_dy(kOp, y, in[0]));
  return Shapes{x};
}

absl::StatusOr<Shapes> infer_conv_bwd_weights(const Attrs& a, const Shapes& in) {
  constexpr std::string_view kOp = "conv_bwd_weights";
  LMS_RETURN_IF_ERROR(check_spatial_rank(kOp, "input x", in[0]));
  LMS_ASSIGN_OR_RETURN(Shape w, shape_attr(kOp, a, "weight_shape"));
  LMS_ASSIGN_OR_RETURN(Geometry g, read_geometry(kOp, a, in[0].size(), true));
  LMS_ASSIGN_OR_RETURN(Shape y, conv_shape(kOp, in[0], w, g));
  LMS_RETURN_IF_ERROR(check_dy(kOp, y, in[1]));
  LMS_ASSIGN_OR_RETURN(bool bias, has_bias_attr(kOp, a));
  return bias ? Shapes{w, {w[0]}} : Shapes{w};
}

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

absl::StatusOr<Shapes> infer_deconv(const Attrs& a, const Shapes& in) {
  LMS_RETURN_IF_ERROR(check_spatial_rank("deconv", "input x", in[0]));
  LMS_ASSIGN_OR_RETURN(Geometry g, read_geometry("deconv", a, in[0].size(), false));
  LMS_ASSIGN_OR_RETURN(Shape y, deconv_shape("deconv", in[0], in[1], g));
  LMS_RETURN_IF_ERROR(check_bias("deconv", in, in[1][1]));
  return Shapes{y};
}

absl::StatusOr<Shapes> infer_deconv_bwd_data(const Attrs& a, const Shapes& in) {
  constexpr std::string_view kOp = "deconv_bwd_data";
  LMS_ASSIGN_OR_RETURN(Shape x, shape_attr(kOp, a, "input_shape"));
  LMS_RETURN_IF_ERROR(check_spatial_rank(kOp, "input_shape", x));
  LMS_ASSIGN_OR_RETURN(Geometry g, read_geometry(kOp, a, x.size(), false));
  LMS_ASSIGN_OR_RETURN(Shape y, deconv_shape(kOp, x, in[1], g));
  LMS_RETURN_IF_ERROR(check_dy(kOp, y, in[0]));
  return Shapes{x};
}

absl::StatusOr<Shapes> infer_deconv_bwd_weights(const Attrs& a, const Shapes& in) {
  constexpr std::string_view kOp = "deconv_bwd_weights";
  LMS_RETURN_IF_ERROR(check_spatial_rank(kOp, "input x", in[0]));
  LMS_ASSIGN_OR_RETURN(Shape w, shape_attr(kOp, a, "weight_shape"));
  LMS_ASSIGN_OR_RETURN(Geometry g, read_geometry(kOp, a, in[0].size(), false));
  LMS_ASSIGN_OR_RETURN(Shape y, deconv_shape(kOp, in[0], w, g));
  LMS_RETURN_IF_ERROR(check_dy(kOp, y, in[1]));
  LMS_ASSIGN_OR_RETURN(bool bias, has_bias_attr(kOp, a));
  return bias ? Shapes{w, {w[1]}} : Shapes{w};
}

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

absl::StatusOr<std::string> read_mode(std::string_view op, const Attrs& a) {
  auto mode = attr_str(a, "mode");
  if (!mode.ok()) return op_error(op, mode.status().message());
  if (*mode != "nearest" && *mode != "linear") {
    return op_error(op, str_cat("mode must be \"nearest\" or \"linear\", got \"", *mode, "\""));
  }
  return mode;
}

absl::StatusOr<Shape> upsample_shape(std::string_view op, const Attrs& a, const Shape& x) {
  LMS_RETURN_IF_ERROR(check_spatial_rank(op, "input x", x));
  LMS_ASSIGN_OR_RETURN(auto scale, spatial_attr(op, a, "scale", x.size() - 2, x.size(), 1));
  LMS_RETURN_IF_ERROR(read_mode(op, a).status());
  Shape y = x;
  for (size_t i = 0; i < scale.size(); ++i) {
    const Int dim = Int(x[i + 2]) * scale[i];
    if (!dim.ok()) {
      return overflow_error(op, i, "input*scale",
                            str_cat("input ", x[i + 2], ", scale ", scale[i]));
    }
    y[i + 2] = dim.value();
  }
  return y;
}

absl::StatusOr<Shapes> infer_upsample(const Attrs& a, const Shapes& in) {
  LMS_ASSIGN_OR_RETURN(Shape y, upsample_shape("upsample", a, in[0]));
  return Shapes{y};
}

absl::StatusOr<Shapes> infer_upsample_bwd(const Attrs& a, const Shapes& in) {
  LMS_ASSIGN_OR_RETURN(Shape x, shape_attr("upsample_bwd", a, "input_shape"));
  LMS_ASSIGN_OR_RETURN(Shape y, upsample_shape("upsample_bwd", a, x));
  LMS_RETURN_IF_ERROR(check_dy("upsample_bwd", y, in[0]));
  return Shapes{x};
}

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

absl::StatusOr<Shape> pool_shape(std::string_view op, const Attrs& a, const Shape& x) {
  LMS_RETURN_IF_ERROR(check_spatial_rank(op, "input x", x));
  const size_t r = x.size() - 2;
  LMS_ASSIGN_OR_RETURN(auto kernel, spatial_attr(op, a, "kernel", r, x.size(), 1));
  LMS_ASSIGN_OR_RETURN(auto stride, spatial_attr(op, a, "stride", r, x.size(), 1));
  LMS_ASSIGN_OR_RETURN(auto pad, spatial_attr(op, a, "pad", r, x.size(), 0));
  Shape y = {x[0], x[1]};
  for (size_t i = 0; i < r; ++i) {
    // pad < kernel keeps every window overlapping the input.
    if (pad[i] >= kernel[i]) {
      return op_error(op, str_cat("pad must be smaller than kernel, got pad ", shape_str(pad),
                                  " for kernel ", shape_str(kernel)));
    }
    const Int checked_room = Int(x[i + 2]) + Int(pad[i]) * 2 - kernel[i];
    if (!checked_room.ok()) {
      return overflow_error(op, i, "input + 2*pad - kernel",
                            str_cat("input ", x[i + 2], ", kernel ", kernel[i], ", pad ", pad[i]));
    }
    const int64_t room = checked_room.value();
    if (room < 0) {
      return op_error(op, str_cat("output size is not positive in spatial dim ", i, " (input ",
                                  x[i + 2], ", kernel ", kernel[i], ", pad ", pad[i], ")"));
    }
    y.push_back(room / stride[i] + 1);
  }
  return y;
}

absl::StatusOr<Shapes> infer_max_pool(const Attrs& a, const Shapes& in) {
  LMS_ASSIGN_OR_RETURN(Shape y, pool_shape("max_pool", a, in[0]));
  return Shapes{y};
}

absl::StatusOr<Shapes> infer_max_pool_bwd(const Attrs& a, const Shapes& in) {
  LMS_ASSIGN_OR_RETURN(Shape y, pool_shape("max_pool_bwd", a, in[0]));
  LMS_RETURN_IF_ERROR(check_dy("max_pool_bwd", y, in[1]));
  return Shapes{in[0]};
}

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

// count_include_pad (optional, default 1 as PyTorch): 0 or 1.
absl::Status check_count_include_pad(std::string_view op, const Attrs& a) {
  const int64_t v = attr_int_or(a, "count_include_pad", 1);
  if (v == 0 || v == 1) return absl::OkStatus();
  return op_error(op, str_cat("count_include_pad must be 0 or 1, got ", v));
}

absl::StatusOr<Shapes> infer_avg_pool(const Attrs& a, const Shapes& in) {
  LMS_RETURN_IF_ERROR(check_count_include_pad("avg_pool", a));
  LMS_ASSIGN_OR_RETURN(Shape y, pool_shape("avg_pool", a, in[0]));
  return Shapes{y};
}

// (dy) -> dx[input_shape].
absl::StatusOr<Shapes> infer_avg_pool_bwd(const Attrs& a, const Shapes& in) {
  constexpr std::string_view kOp = "avg_pool_bwd";
  LMS_RETURN_IF_ERROR(check_count_include_pad(kOp, a));
  LMS_ASSIGN_OR_RETURN(Shape x, shape_attr(kOp, a, "input_shape"));
  LMS_ASSIGN_OR_RETURN(Shape y, pool_shape(kOp, a, x));
  LMS_RETURN_IF_ERROR(check_dy(kOp, y, in[0]));
  return Shapes{x};
}

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
  specs.push_back(make_spec(
      OpKind::kConv, 2, 3, {"dilation", "pad", "stride"}, infer_conv,
      [](const Attrs&, const Shapes& in, const Shapes& out) { return conv_flops(out[0], in[1]); },
      conv_grad));
  specs.push_back(make_spec(
      OpKind::kConvBwdData, 2, 2, {"dilation", "input_shape", "pad", "stride"}, infer_conv_bwd_data,
      [](const Attrs&, const Shapes& in, const Shapes&) { return conv_flops(in[0], in[1]); }));
  specs.push_back(make_spec(
      OpKind::kConvBwdWeights, 2, 2, {"dilation", "has_bias", "pad", "stride", "weight_shape"},
      infer_conv_bwd_weights,
      [](const Attrs&, const Shapes& in, const Shapes& out) { return conv_flops(in[1], out[0]); }));
  // Transposed conv: every input pixel scatters into K*prod(k) outputs.
  auto deconv_flops = [](const Shape& x, const Shape& w) { return 2 * numel(x) * numel(w, 1); };
  specs.push_back(make_spec(
      OpKind::kDeconv, 2, 3, {"pad", "stride"}, infer_deconv,
      [=](const Attrs&, const Shapes& in, const Shapes&) { return deconv_flops(in[0], in[1]); },
      deconv_grad));
  specs.push_back(make_spec(OpKind::kDeconvBwdData, 2, 2, {"input_shape", "pad", "stride"},
                            infer_deconv_bwd_data,
                            [=](const Attrs&, const Shapes& in, const Shapes& out) {
                              return deconv_flops(out[0], in[1]);
                            }));
  specs.push_back(make_spec(OpKind::kDeconvBwdWeights, 2, 2,
                            {"has_bias", "pad", "stride", "weight_shape"}, infer_deconv_bwd_weights,
                            [=](const Attrs&, const Shapes& in, const Shapes& out) {
                              return deconv_flops(in[0], out[0]);
                            }));
  // The six above accept the optional workspace attribute (docs/ops.md);
  // conv also the activation attribute (lms/types.h kActivationAttr).
  // conv and its two gradients also take the group attribute.
  for (size_t i = specs.size() - 6; i < specs.size(); ++i) {
    specs[i].optional_attrs = {std::string(kWorkspaceAttr)};
    if (i < specs.size() - 3) specs[i].optional_attrs.push_back("group");
  }
  specs[specs.size() - 6].optional_attrs.push_back(std::string(kActivationAttr));
  specs.push_back(make_spec(
      OpKind::kUpsample, 1, 1, {"mode", "scale"}, infer_upsample,
      [](const Attrs& a, const Shapes&, const Shapes& out) { return upsample_flops(a, out[0]); },
      upsample_grad));
  specs.push_back(make_spec(
      OpKind::kUpsampleBwd, 1, 1, {"input_shape", "mode", "scale"}, infer_upsample_bwd,
      [](const Attrs& a, const Shapes& in, const Shapes&) { return upsample_flops(a, in[0]); }));
  specs.push_back(make_spec(
      OpKind::kMaxPool, 1, 1, {"kernel", "pad", "stride"}, infer_max_pool,
      [](const Attrs& a, const Shapes&, const Shapes& out) { return pool_flops(a, out[0]); },
      max_pool_grad));
  specs.push_back(make_spec(
      OpKind::kMaxPoolBwd, 2, 2, {"kernel", "pad", "stride"}, infer_max_pool_bwd,
      [](const Attrs& a, const Shapes& in, const Shapes&) { return pool_flops(a, in[1]); }));
  specs.push_back(make_spec(
      OpKind::kAvgPool, 1, 1, {"kernel", "pad", "stride"}, infer_avg_pool,
      [](const Attrs& a, const Shapes&, const Shapes& out) { return pool_flops(a, out[0]); },
      avg_pool_grad));
  specs.back().optional_attrs = {"count_include_pad"};
  specs.push_back(make_spec(
      OpKind::kAvgPoolBwd, 1, 1, {"input_shape", "kernel", "pad", "stride"}, infer_avg_pool_bwd,
      [](const Attrs& a, const Shapes& in, const Shapes&) { return pool_flops(a, in[0]); }));
  specs.back().optional_attrs = {"count_include_pad"};
  set_flag(specs, &OpDef::recomputable,
           {OpKind::kConv, OpKind::kDeconv, OpKind::kUpsample, OpKind::kMaxPool, OpKind::kAvgPool});
  set_flag(
      specs, &OpDef::backward,
      {OpKind::kConvBwdData, OpKind::kConvBwdWeights, OpKind::kDeconvBwdData,
       OpKind::kDeconvBwdWeights, OpKind::kUpsampleBwd, OpKind::kMaxPoolBwd, OpKind::kAvgPoolBwd});
}

}  // namespace lms::ops_internal
