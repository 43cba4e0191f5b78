// Helpers shared by the op families: attribute checks with messages that name
// the op, the attribute and what is allowed, and gradient-rule plumbing.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/ops_internal.h"
#include "lms/status.h"
#include "op_schema/op_schema.h"

namespace lms::ops_internal {

std::string shape_str(const Shape& shape) { return str_cat("[", absl::StrJoin(shape, ","), "]"); }

absl::Status op_error(std::string_view op, absl::string_view message) {
  return absl::InvalidArgumentError(str_cat(op, ": ", message));
}

namespace {

const char* layout_name(size_t rank) { return rank == 5 ? "NCDHW" : "NCHW"; }

}  // namespace

absl::Status check_spatial_rank(std::string_view op, std::string_view what, const Shape& shape) {
  if (shape.size() == 4 || shape.size() == 5) return absl::OkStatus();
  return op_error(op, str_cat(what, " must be 4-D (NCHW) or 5-D (NCDHW), got ", shape_str(shape)));
}

absl::StatusOr<size_t> axis_attr(std::string_view op, const Attrs& attrs, const Shape& x,
                                 std::string_view what) {
  absl::StatusOr<int64_t> axis = attrs.contains(kAxisAttr) ? attr_int(attrs, kAxisAttr)
                                                           : absl::StatusOr<int64_t>(kDefaultAxis);
  if (!axis.ok()) return op_error(op, axis.status().message());
  const std::optional<size_t> dim = normalize_axis(*axis, x.size());
  if (dim) return *dim;
  const auto rank = static_cast<int64_t>(x.size());
  if (rank == 0) {
    return op_error(op, str_cat("axis ", *axis, " is out of range: ", what,
                                " is a scalar (shape []), which has no axis"));
  }
  return op_error(op, str_cat("axis ", *axis, " is out of range [", -rank, ", ", rank - 1, "] for ",
                              what, " ", shape_str(x), " of rank ", rank));
}

absl::StatusOr<std::vector<int64_t>> spatial_attr(std::string_view op, const Attrs& attrs,
                                                  std::string_view key, size_t rank,
                                                  size_t input_rank, int64_t min_value) {
  auto value = attr_ints(attrs, key);
  if (!value.ok()) return op_error(op, value.status().message());
  if (value->size() != rank) {
    return op_error(op,
                    str_cat(key, " must have ", rank, " entries for a ", input_rank, "-D input (",
                            layout_name(input_rank), "), got ", shape_str(*value)));
  }
  for (int64_t v : *value) {
    if (v < min_value) {
      return op_error(op,
                      str_cat(key, " entries must be >= ", min_value, ", got ", shape_str(*value)));
    }
  }
  return value;
}

absl::StatusOr<Shape> shape_attr(std::string_view op, const Attrs& attrs, std::string_view key) {
  auto shape = attr_ints(attrs, key);
  if (!shape.ok()) return op_error(op, shape.status().message());
  absl::Status s = check_shape(key, *shape);
  if (!s.ok()) return op_error(op, s.message());
  return shape;
}

absl::StatusOr<double> real_attr_in(std::string_view op, const Attrs& attrs, std::string_view key,
                                    double lo, double hi, bool open_lo, bool open_hi) {
  auto value = attr_real(attrs, key);
  if (!value.ok()) return op_error(op, value.status().message());
  const double v = *value;
  const bool below = open_lo ? !(v > lo) : !(v >= lo);
  const bool above = open_hi ? !(v < hi) : !(v <= hi);
  if (std::isnan(v) || below || above) {
    return op_error(op, str_cat(key, " must be in ", open_lo ? "(" : "[", lo, ", ", hi,
                                open_hi ? ")" : "]", ", got ", v));
  }
  return v;
}

absl::Status check_same_shapes(std::string_view op, const std::vector<Shape>& shapes,
                               const std::vector<std::string_view>& names) {
  for (size_t i = 1; i < shapes.size(); ++i) {
    if (shapes[i] != shapes[0]) {
      return op_error(op, str_cat(names[i], " ", shape_str(shapes[i]), " must have the shape of ",
                                  names[0], " ", shape_str(shapes[0])));
    }
  }
  return absl::OkStatus();
}

OpSpec make_spec(OpKind kind, int min_inputs, int max_inputs, std::vector<std::string> attrs,
                 InferFn infer, decltype(OpDef::flops) flops, decltype(OpDef::grad) grad,
                 std::vector<int> mutated_inputs) {
  OpSpec s;
  s.def.kind = kind;
  s.def.name = std::string(op_name(kind));
  s.def.min_inputs = min_inputs;
  s.def.max_inputs = max_inputs;
  s.infer = std::move(infer);
  s.def.flops = std::move(flops);
  s.def.grad = std::move(grad);
  s.def.mutated_inputs = std::move(mutated_inputs);
  s.attrs = std::move(attrs);
  return s;
}

OpSpec make_schema_spec(OpKind kind, std::vector<std::string> attrs, decltype(OpDef::flops) flops,
                        decltype(OpDef::grad) grad, std::vector<int> mutated_inputs) {
  const OpArity arity = op_arity(kind);
  return make_spec(kind, arity.min_inputs, arity.max_inputs, std::move(attrs), nullptr,
                   std::move(flops), std::move(grad), std::move(mutated_inputs));
}

std::optional<AttrType> attr_type(std::string_view name) {
  // docs/ops.md gives each attribute name one type on every op that has it.
  static constexpr std::pair<std::string_view, AttrType> kTypes[] = {
      {kActivationAttr, AttrType::kStr},  {"alpha", AttrType::kReal},
      {kAxisAttr, AttrType::kInt},        {"begin", AttrType::kInt},
      {"beta1", AttrType::kReal},         {"beta2", AttrType::kReal},
      {"clip_norm", AttrType::kReal},     {"count_include_pad", AttrType::kInt},
      {"decay_power", AttrType::kReal},   {"decay_steps", AttrType::kInt},
      {"dilation", AttrType::kInts},      {"eps", AttrType::kReal},
      {"group", AttrType::kInt},          {"ratio", AttrType::kReal},
      {"seed", AttrType::kInt},           {"factor", AttrType::kReal},
      {"count", AttrType::kInt},          {"has_bias", AttrType::kInt},
      {"ignore_index", AttrType::kInt},   {"input_shape", AttrType::kInts},
      {"kernel", AttrType::kInts},        {"lr", AttrType::kReal},
      {"max", AttrType::kReal},           {"min", AttrType::kReal},
      {"mode", AttrType::kStr},           {"momentum", AttrType::kReal},
      {"pad", AttrType::kInts},           {"release_after", AttrType::kStr},
      {"scale", AttrType::kInts},         {"shape", AttrType::kInts},
      {"perm", AttrType::kInts},          {"size", AttrType::kInt},
      {"stride", AttrType::kInts},        {"trans_a", AttrType::kInt},
      {"trans_b", AttrType::kInt},        {"training", AttrType::kInt},
      {"value", AttrType::kReal},         {"weight_decay", AttrType::kReal},
      {"weight_shape", AttrType::kInts},  {kWorkspaceAttr, AttrType::kStr},
      {"softmax_scale", AttrType::kReal}, {"causal", AttrType::kInt},
  };
  for (const auto& [key, type] : kTypes) {
    if (key == name) return type;
  }
  return std::nullopt;
}

void set_flag(std::vector<OpSpec>& specs, bool OpDef::*flag, std::initializer_list<OpKind> ops) {
  for (OpKind op : ops) {
    auto it = std::find_if(specs.begin(), specs.end(),
                           [op](const OpSpec& s) { return s.def.kind == op; });
    LMS_CHECK(it != specs.end());
    it->def.*flag = true;
  }
}

double numel(const Shape& s, size_t from_dim) {
  double n = 1;
  for (size_t i = from_dim; i < s.size(); ++i) n *= static_cast<double>(s[i]);
  return n;
}

void decline_rest(GradContext& ctx) {
  for (TensorId& g : ctx.input_grads) {
    if (g == kWantGrad) g = kNoTensor;
  }
}

absl::StatusOr<std::vector<TensorId>> add_grad_node(GradContext& ctx, OpKind op,
                                                    std::string_view suffix,
                                                    std::vector<TensorId> inputs, Attrs attrs) {
  const std::string name = ctx.graph.unique_name(str_cat(ctx.prefix, suffix));
  auto outs =
      ctx.graph.add_node(op, name, std::move(inputs), std::move(attrs), TensorRole::kGradient);
  if (!outs.ok()) {
    if (ctx.graph.status().ok()) ctx.graph.record_error(outs.status());
    return outs.status();
  }
  return outs;
}

absl::StatusOr<TensorId> add_grad_node1(GradContext& ctx, OpKind op, std::string_view suffix,
                                        std::vector<TensorId> inputs, Attrs attrs) {
  LMS_ASSIGN_OR_RETURN(std::vector<TensorId> outs,
                       add_grad_node(ctx, op, suffix, std::move(inputs), std::move(attrs)));
  LMS_CHECK(outs.size() == 1);
  return outs[0];
}

TensorId fwd_input(const GradContext& ctx, size_t i) { return ctx.graph.node(ctx.node).inputs[i]; }

TensorId fwd_output(const GradContext& ctx, size_t j) {
  return ctx.graph.node(ctx.node).outputs[j];
}

Shape input_shape(const GradContext& ctx, size_t i) {
  return ctx.graph.tensor(fwd_input(ctx, i)).shape;
}

}  // namespace lms::ops_internal
