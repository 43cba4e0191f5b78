// Helpers shared by the op families: their registry entries, the attribute
// types, and gradient-rule plumbing. The rules of which instances are valid
// are the op schema's (op_schema/op_schema.h).
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

OpSpec make_schema_spec(OpKind kind, decltype(OpDef::flops) flops, decltype(OpDef::grad) grad,
                        std::vector<int> mutated_inputs) {
  const OpArity arity = op_arity(kind);
  OpAttrNames names = op_attr_names(kind);
  OpSpec s = make_spec(kind, arity.min_inputs, arity.max_inputs, std::move(names.required), nullptr,
                       std::move(flops), std::move(grad), std::move(mutated_inputs));
  s.optional_attrs = std::move(names.optional);
  return s;
}

std::optional<AttrType> attr_type(std::string_view name) {
  // docs/ops.md gives each attribute name one type on every op that has it.
  static constexpr std::pair<std::string_view, AttrType> kTypes[] = {
      {kActivationAttr, AttrType::kStr},
      {"alpha", AttrType::kReal},
      {kAxisAttr, AttrType::kInt},
      {"begin", AttrType::kInt},
      {"beta", AttrType::kReal},
      {"beta1", AttrType::kReal},
      {"beta2", AttrType::kReal},
      {"ceil_mode", AttrType::kInt},
      {"clip_norm", AttrType::kReal},
      {"count_include_pad", AttrType::kInt},
      {"decay_power", AttrType::kReal},
      {"decay_steps", AttrType::kInt},
      {"dilation", AttrType::kInts},
      {"eps", AttrType::kReal},
      {"group", AttrType::kInt},
      {"ratio", AttrType::kReal},
      {"seed", AttrType::kInt},
      {"factor", AttrType::kReal},
      {"count", AttrType::kInt},
      {"has_bias", AttrType::kInt},
      {"ignore_index", AttrType::kInt},
      {"input_shape", AttrType::kInts},
      {"kernel", AttrType::kInts},
      {"lr", AttrType::kReal},
      {"max", AttrType::kReal},
      {"min", AttrType::kReal},
      {"mode", AttrType::kStr},
      {"momentum", AttrType::kReal},
      {"pad", AttrType::kInts},
      {"release_after", AttrType::kStr},
      {"scale", AttrType::kInts},
      {"shape", AttrType::kInts},
      {"perm", AttrType::kInts},
      {"size", AttrType::kInt},
      {"stride", AttrType::kInts},
      {"trans_a", AttrType::kInt},
      {"trans_b", AttrType::kInt},
      {"training", AttrType::kInt},
      {"value", AttrType::kReal},
      {"weight_decay", AttrType::kReal},
      {"weight_shape", AttrType::kInts},
      {kWorkspaceAttr, AttrType::kStr},
      {"softmax_scale", AttrType::kReal},
      {"causal", AttrType::kInt},
      {"to", AttrType::kStr},
      {"loss_scaling", AttrType::kInt},
      {"growth_factor", AttrType::kReal},
      {"backoff_factor", AttrType::kReal},
      {"growth_interval", AttrType::kInt},
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
