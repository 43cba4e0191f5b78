#include "op_schema/spatial_spec.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lms/status.h"

namespace lms {
namespace {

std::string shape_str(const Shape& s) { return absl::StrCat("[", absl::StrJoin(s, ","), "]"); }

const AttrValue* find_attr(const OpInstance& spec, const std::string& key) {
  auto it = spec.attrs.find(key);
  return it == spec.attrs.end() ? nullptr : &it->second;
}

absl::StatusOr<std::vector<int64_t>> checked_ints(const OpInstance& spec, const std::string& key,
                                                  const AttrValue& value, int rank,
                                                  int64_t min_value) {
  const auto* list = std::get_if<std::vector<int64_t>>(&value);
  if (list == nullptr) {
    return spec_error(spec, absl::StrCat("attribute '", key, "' must be an ints list"));
  }
  if (list->size() != static_cast<size_t>(rank)) {
    return spec_error(spec, absl::StrCat("attribute '", key, "' has ", list->size(),
                                         " entries; the spatial rank is ", rank));
  }
  for (int64_t v : *list) {
    if (v < min_value) {
      return spec_error(spec, absl::StrCat("attribute '", key, "' = ", shape_str(*list),
                                           " has an entry below the minimum ", min_value));
    }
  }
  return *list;
}

// Fills x, w, bias and returns the y shape the node carries (y or dy).
absl::StatusOr<Shape> read_conv_roles(const OpInstance& spec, ConvPass pass, ConvProblem* p) {
  switch (pass) {
    case ConvPass::kForward:
      LMS_RETURN_IF_ERROR(check_arity(spec, 2, 3, 1, 1));
      p->x = spec.input_shapes[0];
      p->w = spec.input_shapes[1];
      p->bias = spec.input_shapes.size() == 3;
      return spec.output_shapes[0];
    case ConvPass::kBackwardData: {
      LMS_RETURN_IF_ERROR(check_arity(spec, 2, 2, 1, 1));
      LMS_ASSIGN_OR_RETURN(p->x, required_shape(spec, "input_shape"));
      p->w = spec.input_shapes[1];
      LMS_RETURN_IF_ERROR(check_shape(spec, "output dx", spec.output_shapes[0], p->x));
      return spec.input_shapes[0];
    }
    case ConvPass::kBackwardWeights: {
      LMS_RETURN_IF_ERROR(check_arity(spec, 2, 2, 1, 2));
      p->x = spec.input_shapes[0];
      LMS_ASSIGN_OR_RETURN(p->w, required_shape(spec, "weight_shape"));
      LMS_ASSIGN_OR_RETURN(p->bias, has_bias_attr(spec));
      LMS_RETURN_IF_ERROR(check_shape(spec, "output dw", spec.output_shapes[0], p->w));
      return spec.input_shapes[1];
    }
  }
  return spec_error(spec, "unknown convolution pass");
}

// conv's optional group (1 when absent): >= 1, dividing the K outputs of w
// ([K,C/group,k..]); deconv ops take none.
absl::StatusOr<int64_t> group_attr(const OpInstance& spec, const ConvProblem& p) {
  const AttrValue* value = find_attr(spec, "group");
  if (value == nullptr) return 1;
  const auto* group = std::get_if<int64_t>(value);
  if (group == nullptr || *group < 1 || p.transposed) {
    return spec_error(spec, "attribute 'group' must be an int >= 1, on conv ops only");
  }
  if (p.w[0] % *group != 0) {
    return spec_error(spec, absl::StrCat("group ", *group, " does not divide the ", p.w[0],
                                         " outputs of the weights ", shape_str(p.w)));
  }
  return *group;
}

absl::Status read_conv_attrs(const OpInstance& spec, ConvProblem* p) {
  LMS_ASSIGN_OR_RETURN(p->stride, optional_ints(spec, "stride", p->rank, 1, 1));
  LMS_ASSIGN_OR_RETURN(p->pad, optional_ints(spec, "pad", p->rank, 0, 0));
  LMS_ASSIGN_OR_RETURN(p->dilation, optional_ints(spec, "dilation", p->rank, 1, 1));
  if (p->transposed) {
    for (int64_t d : p->dilation) {
      if (d != 1) return spec_error(spec, "deconv ops have no dilation (allowed: all 1)");
    }
  }
  return absl::OkStatus();
}

// y shape of the forward problem; errors when a spatial extent would be < 1.
absl::StatusOr<Shape> conv_output_shape(const OpInstance& spec, const ConvProblem& p) {
  int64_t k_out = p.transposed ? p.w[1] : p.w[0];
  Shape y = {p.x[0], k_out};
  for (int i = 0; i < p.rank; ++i) {
    int64_t s = p.x[2 + i], k = p.w[2 + i];
    int64_t extent = p.transposed
                         ? (s - 1) * p.stride[i] - 2 * p.pad[i] + k
                         : (s + 2 * p.pad[i] - p.dilation[i] * (k - 1) - 1) / p.stride[i] + 1;
    bool empty = p.transposed ? extent < 1 : s + 2 * p.pad[i] < p.dilation[i] * (k - 1) + 1;
    if (empty) {
      return spec_error(spec, absl::StrCat("spatial dim ", i, " of x ", shape_str(p.x),
                                           " with kernel ", k, ", stride ", p.stride[i], ", pad ",
                                           p.pad[i], " gives an empty output"));
    }
    y.push_back(extent);
  }
  return y;
}

}  // namespace

absl::Status spec_error(const OpInstance& spec, const std::string& message) {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", spec.name, "' (op ", op_name(spec.op), "): ", message));
}

absl::Status check_arity(const OpInstance& spec, size_t min_inputs, size_t max_inputs,
                         size_t min_outputs, size_t max_outputs) {
  size_t in = spec.input_shapes.size(), out = spec.output_shapes.size();
  if (in < min_inputs || in > max_inputs || out < min_outputs || out > max_outputs) {
    return spec_error(
        spec, absl::StrCat("has ", in, " inputs and ", out, " outputs; allowed: ", min_inputs, "..",
                           max_inputs, " inputs and ", min_outputs, "..", max_outputs, " outputs"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> spatial_rank(const OpInstance& spec, const Shape& shape,
                                 const std::string& what) {
  if (shape.size() != 4 && shape.size() != 5) {
    return spec_error(spec, absl::StrCat(what, " has shape ", shape_str(shape),
                                         "; allowed: NCHW (rank 4) or NCDHW (rank 5)"));
  }
  for (int64_t d : shape) {
    if (d < 1) {
      return spec_error(spec, absl::StrCat(what, " has shape ", shape_str(shape),
                                           "; every dimension must be >= 1"));
    }
  }
  return static_cast<int>(shape.size()) - 2;
}

absl::StatusOr<std::vector<int64_t>> optional_ints(const OpInstance& spec, const std::string& key,
                                                   int rank, int64_t default_value,
                                                   int64_t min_value) {
  const AttrValue* value = find_attr(spec, key);
  if (value == nullptr) return std::vector<int64_t>(rank, default_value);
  return checked_ints(spec, key, *value, rank, min_value);
}

absl::StatusOr<std::vector<int64_t>> required_ints(const OpInstance& spec, const std::string& key,
                                                   int rank, int64_t min_value) {
  const AttrValue* value = find_attr(spec, key);
  if (value == nullptr) {
    return spec_error(spec, absl::StrCat("missing required attribute '", key, "'"));
  }
  return checked_ints(spec, key, *value, rank, min_value);
}

absl::StatusOr<Shape> required_shape(const OpInstance& spec, const std::string& key) {
  const AttrValue* value = find_attr(spec, key);
  const auto* list = value ? std::get_if<std::vector<int64_t>>(value) : nullptr;
  if (list == nullptr) {
    return spec_error(spec, absl::StrCat("attribute '", key, "' (a full shape as ints) is ",
                                         value ? "not an ints list" : "missing"));
  }
  return *list;
}

absl::StatusOr<std::string> required_str(const OpInstance& spec, const std::string& key) {
  const AttrValue* value = find_attr(spec, key);
  const auto* str = value ? std::get_if<std::string>(value) : nullptr;
  if (str == nullptr) {
    return spec_error(spec, absl::StrCat("attribute '", key, "' (a string) is ",
                                         value ? "of another type" : "missing"));
  }
  return *str;
}

absl::StatusOr<bool> count_include_pad_attr(const OpInstance& spec) {
  const AttrValue* value = find_attr(spec, "count_include_pad");
  if (value == nullptr) return true;
  const auto* flag = std::get_if<int64_t>(value);
  if (flag == nullptr || (*flag != 0 && *flag != 1)) {
    return spec_error(spec, "attribute 'count_include_pad' must be the int 0 or 1");
  }
  return *flag == 1;
}

absl::StatusOr<bool> has_bias_attr(const OpInstance& spec) {
  bool two_outputs = spec.output_shapes.size() == 2;
  const AttrValue* value = find_attr(spec, "has_bias");
  if (value == nullptr) return two_outputs;
  const auto* flag = std::get_if<int64_t>(value);
  if (flag == nullptr || (*flag != 0 && *flag != 1)) {
    return spec_error(spec, "attribute 'has_bias' must be the int 0 or 1");
  }
  if ((*flag == 1) != two_outputs) {
    return spec_error(
        spec, absl::StrCat("has_bias = ", *flag, " but the node has ", spec.output_shapes.size(),
                           " outputs (allowed: 2 iff has_bias)"));
  }
  return *flag == 1;
}

absl::Status check_shape(const OpInstance& spec, const std::string& what, const Shape& actual,
                         const Shape& expected) {
  if (actual == expected) return absl::OkStatus();
  return spec_error(spec, absl::StrCat(what, " has shape ", shape_str(actual), "; expected ",
                                       shape_str(expected)));
}

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
  ConvPass pass = conv_pass(spec.op);
  LMS_ASSIGN_OR_RETURN(Shape y_given, read_conv_roles(spec, pass, &p));
  LMS_ASSIGN_OR_RETURN(p.rank, spatial_rank(spec, p.x, "x"));
  LMS_ASSIGN_OR_RETURN(int w_rank, spatial_rank(spec, p.w, "the weights"));
  if (w_rank != p.rank) {
    return spec_error(spec, absl::StrCat("weights ", shape_str(p.w), " and x ", shape_str(p.x),
                                         " differ in spatial rank"));
  }
  LMS_ASSIGN_OR_RETURN(p.groups, group_attr(spec, p));
  int64_t c_in = p.transposed ? p.w[0] : p.w[1] * p.groups;
  if (c_in != p.x[1]) {
    return spec_error(
        spec, absl::StrCat("x ", shape_str(p.x), " has ", p.x[1], " channels but the weights ",
                           shape_str(p.w), p.transposed ? " ([C,K,k..])" : " ([K,C/group,k..])",
                           " expect ", c_in));
  }
  LMS_RETURN_IF_ERROR(read_conv_attrs(spec, &p));
  LMS_ASSIGN_OR_RETURN(p.y, conv_output_shape(spec, p));
  LMS_RETURN_IF_ERROR(
      check_shape(spec, pass == ConvPass::kForward ? "output y" : "input dy", y_given, p.y));
  int64_t k_out = p.y[1];
  if (pass == ConvPass::kForward && p.bias) {
    LMS_RETURN_IF_ERROR(check_shape(spec, "bias", spec.input_shapes[2], {k_out}));
  }
  if (pass == ConvPass::kBackwardWeights && p.bias) {
    LMS_RETURN_IF_ERROR(check_shape(spec, "output db", spec.output_shapes[1], {k_out}));
  }
  return p;
}

}  // namespace lms
