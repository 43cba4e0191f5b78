// The rules of the spatial ops of docs/ops.md: conv and deconv (transposed
// conv) with their backward ops, upsample and max / avg pooling. Shapes are
// NCHW / NCDHW; every spatial attribute has one entry per spatial dimension;
// the output arithmetic is overflow-checked and an overflow names the
// attributes that went into it.
#include <optional>

#include "absl/strings/str_cat.h"
#include "lms/checked.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "op_schema/op_dims.h"
#include "op_schema/op_rules.h"
#include "op_schema/spec_checks.h"

namespace lms {
namespace {

using Shapes = std::vector<Shape>;
using Int = Checked<int64_t>;

const char* layout_name(size_t rank) { return rank == 5 ? "NCDHW" : "NCHW"; }

// Requires `shape` to have rank 4 (NCHW) or 5 (NCDHW); `what` names it.
absl::Status check_spatial_rank(const OpInstance& spec, absl::string_view what,
                                const Shape& shape) {
  if (shape.size() == 4 || shape.size() == 5) return absl::OkStatus();
  return invalid(spec,
                 absl::StrCat(what, " must be 4-D (NCHW) or 5-D (NCDHW), got ", shape_str(shape)));
}

// An ints attribute with one entry per spatial dim of an input of rank
// `input_rank`, each >= min_value.
absl::StatusOr<std::vector<int64_t>> spatial_attr(const OpInstance& spec, absl::string_view key,
                                                  size_t input_rank, int64_t min_value) {
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> value, ints_attr(spec, key));
  if (value.size() != input_rank - 2) {
    return invalid(
        spec, absl::StrCat(key, " must have ", input_rank - 2, " entries for a ", input_rank,
                           "-D input (", layout_name(input_rank), "), got ", shape_str(value)));
  }
  for (int64_t v : value) {
    if (v >= min_value) continue;
    return invalid(
        spec, absl::StrCat(key, " entries must be >= ", min_value, ", got ", shape_str(value)));
  }
  return value;
}

// InvalidArgument for spatial arithmetic that overflows int64, naming the
// attributes that went into it.
absl::Status overflow_error(const OpInstance& spec, size_t dim, absl::string_view formula,
                            absl::string_view values) {
  return invalid(spec, absl::StrCat(formula, " overflows int64 in spatial dim ", dim, " (", values,
                                    "); the attributes or the input are too large"));
}

absl::Status check_dy(const OpInstance& spec, const Shape& expected, const Shape& dy) {
  if (expected == dy) return absl::OkStatus();
  return invalid(spec, absl::StrCat("dy ", shape_str(dy), " does not match the forward output ",
                                    shape_str(expected)));
}

// ---- conv / deconv ----

// Reads stride / pad, and for conv dilation and group, for p.x's rank.
absl::Status read_geometry(const OpInstance& spec, ConvProblem& p) {
  const size_t rank = p.x.size();
  LMS_ASSIGN_OR_RETURN(p.stride, spatial_attr(spec, "stride", rank, 1));
  LMS_ASSIGN_OR_RETURN(p.pad, spatial_attr(spec, "pad", rank, 0));
  if (p.transposed) {
    p.dilation.assign(rank - 2, 1);
    return absl::OkStatus();
  }
  LMS_ASSIGN_OR_RETURN(p.dilation, spatial_attr(spec, "dilation", rank, 1));
  if (spec.attrs.contains("group")) {
    LMS_ASSIGN_OR_RETURN(p.groups, int_attr(spec, "group"));
    if (p.groups < 1) return invalid(spec, absl::StrCat("group must be >= 1, got ", p.groups));
  }
  return absl::OkStatus();
}

// Checks x[N,C,S] against the weight: conv's [K,C/group,k..], deconv's
// [C,K,k..].
absl::Status check_weight(const OpInstance& spec, const ConvProblem& p) {
  const Shape &x = p.x, &w = p.w;
  const int64_t group = p.groups;
  if (w.size() != x.size()) {
    return invalid(spec, absl::StrCat("weight must be ", x.size(), "-D ",
                                      p.transposed ? "[C,K,k..]" : "[K,C/group,k..]", " for a ",
                                      x.size(), "-D input, got ", shape_str(w)));
  }
  if (group > 1 && (x[1] % group != 0 || w[0] % group != 0)) {
    return invalid(
        spec, absl::StrCat("group ", group, " must divide the ", x[1], " channels of x and the ",
                           w[0], " outputs of the weight ", shape_str(w)));
  }
  const int64_t w_c = p.transposed ? w[0] : w[1];
  if (w_c != x[1] / group) {
    return invalid(spec,
                   absl::StrCat("weight ", shape_str(w), " has ", w_c,
                                " input channels per group but x ", shape_str(x), " has ", x[1],
                                group > 1 ? absl::StrCat(" in ", group, " groups") : ""));
  }
  return absl::OkStatus();
}

// The extent of spatial dim i of y: (S + 2p - d(k-1) - 1)/s + 1 for conv,
// (S-1)s - 2p + k for deconv.
absl::StatusOr<int64_t> conv_extent(const OpInstance& spec, const ConvProblem& p, size_t i) {
  const int64_t s = p.x[i + 2], k = p.w[i + 2], pad = p.pad[i], stride = p.stride[i];
  if (p.transposed) {
    const Int out = Int(s - 1) * stride - Int(pad) * 2 + k;
    if (!out.ok()) {
      return overflow_error(
          spec, i, "(input-1)*stride - 2*pad + kernel",
          absl::StrCat("input ", s, ", kernel ", k, ", pad ", pad, ", stride ", stride));
    }
    if (out.value() > 0) return out.value();
    return invalid(spec, absl::StrCat("output size is not positive in spatial dim ", i, " (input ",
                                      s, ", kernel ", k, ", pad ", pad, ", stride ", stride, ")"));
  }
  const int64_t d = p.dilation[i];
  const Int room = Int(s) + Int(pad) * 2 - (Int(d) * (k - 1) + 1);
  if (!room.ok()) {
    return overflow_error(
        spec, i, "input + 2*pad - dilation*(kernel-1) - 1",
        absl::StrCat("input ", s, ", kernel ", k, ", pad ", pad, ", dilation ", d));
  }
  if (room.value() >= 0) return room.value() / stride + 1;
  return invalid(spec, absl::StrCat("output size is not positive in spatial dim ", i, " (input ", s,
                                    ", kernel ", k, ", pad ", pad, ", dilation ", d, ")"));
}

// conv's optional fused activation: "relu" (Note [Conv + ReLU fusion]).
absl::Status check_activation(const OpInstance& spec) {
  auto it = spec.attrs.find(kActivationAttr);
  if (it == spec.attrs.end()) return absl::OkStatus();
  const std::string* v = std::get_if<std::string>(&it->second);
  if (v != nullptr && *v == kActivationRelu) return absl::OkStatus();
  return invalid(spec,
                 absl::StrCat("attribute '", to_absl(kActivationAttr), "' must be the string \"",
                              to_absl(kActivationRelu), "\" (or absent: no activation)"));
}

absl::StatusOr<Shapes> conv(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(const ConvProblem p, conv_problem(spec));
  switch (conv_pass(spec.op)) {
    case ConvPass::kForward:
      return Shapes{p.y};
    case ConvPass::kBackwardData:
      return Shapes{p.x};
    case ConvPass::kBackwardWeights:
      break;
  }
  const int64_t k = p.transposed ? p.w[1] : p.w[0];
  return p.bias ? Shapes{p.w, {k}} : Shapes{p.w};
}

// ---- upsample ----

absl::StatusOr<Shapes> upsample(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(const UpsampleDims d, upsample_dims(spec));
  return Shapes{spec.op == OpKind::kUpsample ? d.y : d.x};
}

// ---- pooling ----

absl::StatusOr<Shapes> pool(const OpInstance& spec) {
  LMS_ASSIGN_OR_RETURN(const PoolDims d, pool_dims(spec));
  const bool backward = spec.op == OpKind::kMaxPoolBwd || spec.op == OpKind::kAvgPoolBwd;
  return Shapes{backward ? d.x : d.y};
}

}  // namespace

ConvPass conv_pass(OpKind op) {
  if (op == OpKind::kConvBwdData || op == OpKind::kDeconvBwdData) return ConvPass::kBackwardData;
  if (op == OpKind::kConvBwdWeights || op == OpKind::kDeconvBwdWeights) {
    return ConvPass::kBackwardWeights;
  }
  return ConvPass::kForward;
}

absl::StatusOr<ConvProblem> conv_problem(const OpInstance& spec) {
  ConvProblem p;
  p.transposed = spec.op == OpKind::kDeconv || spec.op == OpKind::kDeconvBwdData ||
                 spec.op == OpKind::kDeconvBwdWeights;
  const ConvPass pass = conv_pass(spec.op);
  const Shapes& in = spec.input_shapes;
  if (pass == ConvPass::kBackwardData) {
    LMS_ASSIGN_OR_RETURN(p.x, shape_attr(spec, "input_shape"));
    LMS_RETURN_IF_ERROR(check_spatial_rank(spec, "input_shape", p.x));
  } else {
    p.x = in[0];
    LMS_RETURN_IF_ERROR(check_spatial_rank(spec, "input x", p.x));
  }
  if (pass == ConvPass::kBackwardWeights) {
    LMS_ASSIGN_OR_RETURN(p.w, shape_attr(spec, "weight_shape"));
    LMS_ASSIGN_OR_RETURN(p.bias, flag_attr(spec, "has_bias"));
  } else {
    p.w = in[1];
    p.bias = pass == ConvPass::kForward && in.size() > 2;
  }
  p.rank = static_cast<int>(p.x.size()) - 2;
  LMS_RETURN_IF_ERROR(read_geometry(spec, p));
  LMS_RETURN_IF_ERROR(check_weight(spec, p));
  p.y = {p.x[0], p.transposed ? p.w[1] : p.w[0]};
  for (size_t i = 0; i + 2 < p.x.size(); ++i) {
    LMS_ASSIGN_OR_RETURN(int64_t extent, conv_extent(spec, p, i));
    p.y.push_back(extent);
  }
  if (pass == ConvPass::kForward) {
    LMS_RETURN_IF_ERROR(check_activation(spec));
    if (p.bias && in[2] != Shape{p.y[1]}) {
      return invalid(spec,
                     absl::StrCat("bias must have shape [", p.y[1], "], got ", shape_str(in[2])));
    }
  } else {
    LMS_RETURN_IF_ERROR(check_dy(spec, p.y, in[pass == ConvPass::kBackwardData ? 0 : 1]));
  }
  return p;
}

absl::StatusOr<UpsampleDims> upsample_dims(const OpInstance& spec) {
  UpsampleDims d;
  if (spec.op == OpKind::kUpsampleBwd) {
    LMS_ASSIGN_OR_RETURN(d.x, shape_attr(spec, "input_shape"));
  } else {
    d.x = spec.input_shapes[0];
  }
  LMS_RETURN_IF_ERROR(check_spatial_rank(spec, "input x", d.x));
  LMS_ASSIGN_OR_RETURN(d.scale, spatial_attr(spec, "scale", d.x.size(), 1));
  LMS_ASSIGN_OR_RETURN(const std::string mode, str_attr(spec, "mode"));
  if (mode != "nearest" && mode != "linear") {
    return invalid(spec,
                   absl::StrCat("mode must be \"nearest\" or \"linear\", got \"", mode, "\""));
  }
  d.linear = mode == "linear";
  d.y = d.x;
  for (size_t i = 0; i < d.scale.size(); ++i) {
    const Int dim = Int(d.x[i + 2]) * d.scale[i];
    if (!dim.ok()) {
      return overflow_error(spec, i, "input*scale",
                            absl::StrCat("input ", d.x[i + 2], ", scale ", d.scale[i]));
    }
    d.y[i + 2] = dim.value();
  }
  if (spec.op == OpKind::kUpsampleBwd)
    LMS_RETURN_IF_ERROR(check_dy(spec, d.y, spec.input_shapes[0]));
  return d;
}

// Note [Pooling ceil mode]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// With ceil_mode the output size rounds up, as PyTorch's pooling computes it
// (aten/src/ATen/native/Pool.h, pooling_output_shape): S' = ceil((S + 2p -
// k)/s) + 1, less one where the last window would start at or past S + p,
// so every window holds at least one element of x. The last window may run
// past S + p; the kernels see it as padding after x of pad_end = (S' - 1)s
// + k - S - p (>= p), which max pooling skips and average pooling without
// count_include_pad leaves out of the divisor, as PyTorch does. With
// count_include_pad, PyTorch divides such a window by its part inside S + p
// (not by k), which neither oneDNN's nor our CUDA pooling computes: that
// case is refused, naming the dimension.
absl::StatusOr<PoolDims> pool_dims(const OpInstance& spec) {
  PoolDims d;
  if (spec.op == OpKind::kAvgPoolBwd) {
    LMS_ASSIGN_OR_RETURN(d.x, shape_attr(spec, "input_shape"));
  } else {
    d.x = spec.input_shapes[0];
  }
  if (spec.attrs.contains("count_include_pad")) {
    LMS_ASSIGN_OR_RETURN(d.count_include_pad, flag_attr(spec, "count_include_pad"));
  }
  if (spec.attrs.contains("ceil_mode")) {
    LMS_ASSIGN_OR_RETURN(d.ceil_mode, flag_attr(spec, "ceil_mode"));
  }
  const bool avg = spec.op == OpKind::kAvgPool || spec.op == OpKind::kAvgPoolBwd;
  LMS_RETURN_IF_ERROR(check_spatial_rank(spec, "input x", d.x));
  LMS_ASSIGN_OR_RETURN(d.kernel, spatial_attr(spec, "kernel", d.x.size(), 1));
  LMS_ASSIGN_OR_RETURN(d.stride, spatial_attr(spec, "stride", d.x.size(), 1));
  LMS_ASSIGN_OR_RETURN(d.pad, spatial_attr(spec, "pad", d.x.size(), 0));
  d.y = {d.x[0], d.x[1]};
  for (size_t i = 0; i < d.kernel.size(); ++i) {
    const int64_t s = d.x[i + 2], k = d.kernel[i], pad = d.pad[i], stride = d.stride[i];
    // pad < kernel keeps every window overlapping the input.
    if (pad >= k) {
      return invalid(spec, absl::StrCat("pad must be smaller than kernel, got pad ",
                                        shape_str(d.pad), " for kernel ", shape_str(d.kernel)));
    }
    const Int room = Int(s) + Int(pad) * 2 - k;
    if (!room.ok()) {
      return overflow_error(spec, i, "input + 2*pad - kernel",
                            absl::StrCat("input ", s, ", kernel ", k, ", pad ", pad));
    }
    if (room.value() < 0) {
      return invalid(spec, absl::StrCat("output size is not positive in spatial dim ", i,
                                        " (input ", s, ", kernel ", k, ", pad ", pad, ")"));
    }
    int64_t out = room.value() / stride + 1;
    if (d.ceil_mode) {  // Note [Pooling ceil mode]
      if (room.value() % stride != 0) ++out;
      // (out - 1) * stride <= room + stride: in range when it is not past s + pad.
      const Int start = Int(out - 1) * stride;
      if (!start.ok() || start.value() >= s + pad) --out;
    }
    const int64_t end = (out - 1) * stride + k - s - pad;
    if (avg && d.count_include_pad && end > pad) {
      return invalid(spec, absl::StrCat("ceil_mode with count_include_pad: the last window of "
                                        "spatial dim ",
                                        i, " runs ", end - pad, " past the padded input (input ", s,
                                        ", kernel ", k, ", stride ", stride, ", pad ", pad,
                                        "), whose divisor PyTorch shortens and lms cannot; use "
                                        "count_include_pad = 0 or ceil_mode = 0"));
    }
    d.pad_end.push_back(std::max(pad, end));
    d.y.push_back(out);
  }
  if (spec.op == OpKind::kMaxPoolBwd)
    LMS_RETURN_IF_ERROR(check_dy(spec, d.y, spec.input_shapes[1]));
  if (spec.op == OpKind::kAvgPoolBwd)
    LMS_RETURN_IF_ERROR(check_dy(spec, d.y, spec.input_shapes[0]));
  return d;
}

namespace op_rules {

std::optional<RuleEntry> spatial_rule(OpKind op) {
  switch (op) {
    // The convolutions take the optional workspace attribute (docs/ops.md),
    // conv and its gradients the group, conv the fused activation.
    case OpKind::kConv:
      return RuleEntry{{2, 3},
                       conv,
                       {{"dilation", "pad", "stride"},
                        {std::string(kActivationAttr), "group", std::string(kWorkspaceAttr)}}};
    case OpKind::kConvBwdData:
      return RuleEntry{
          {2, 2},
          conv,
          {{"dilation", "input_shape", "pad", "stride"}, {"group", std::string(kWorkspaceAttr)}}};
    case OpKind::kConvBwdWeights:
      return RuleEntry{{2, 2},
                       conv,
                       {{"dilation", "has_bias", "pad", "stride", "weight_shape"},
                        {"group", std::string(kWorkspaceAttr)}}};
    case OpKind::kDeconv:
      return RuleEntry{{2, 3}, conv, {{"pad", "stride"}, {std::string(kWorkspaceAttr)}}};
    case OpKind::kDeconvBwdData:
      return RuleEntry{
          {2, 2}, conv, {{"input_shape", "pad", "stride"}, {std::string(kWorkspaceAttr)}}};
    case OpKind::kDeconvBwdWeights:
      return RuleEntry{
          {2, 2},
          conv,
          {{"has_bias", "pad", "stride", "weight_shape"}, {std::string(kWorkspaceAttr)}}};
    case OpKind::kUpsample:
      return RuleEntry{{1, 1}, upsample, {{"mode", "scale"}, {}}};
    case OpKind::kUpsampleBwd:
      return RuleEntry{{1, 1}, upsample, {{"input_shape", "mode", "scale"}, {}}};
    case OpKind::kMaxPool:
      return RuleEntry{{1, 1}, pool, {{"kernel", "pad", "stride"}, {"ceil_mode"}}};
    case OpKind::kMaxPoolBwd:
      return RuleEntry{{2, 2}, pool, {{"kernel", "pad", "stride"}, {"ceil_mode"}}};
    case OpKind::kAvgPool:
      return RuleEntry{
          {1, 1}, pool, {{"kernel", "pad", "stride"}, {"ceil_mode", "count_include_pad"}}};
    case OpKind::kAvgPoolBwd:
      return RuleEntry{
          {1, 1},
          pool,
          {{"input_shape", "kernel", "pad", "stride"}, {"ceil_mode", "count_include_pad"}}};
    default:
      return std::nullopt;
  }
}

}  // namespace op_rules
}  // namespace lms
