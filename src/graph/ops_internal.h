// Shared helpers of the op families (ops_*.cc) and the registry
// (op_registry.cc). Not part of the public API.
//
// Each family file defines one `register_*_ops` function that appends an
// OpSpec per op. An op a backend compiles takes its arity and shape rule
// from the op schema (make_schema_spec, op_schema/op_schema.h); the others
// (swap_out, swap_in, all_reduce) bring their own `infer`, which
// op_registry.cc wraps with the arity and attribute-name checks, so the
// family code may index inputs freely.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "graph/op_registry.h"
#include "lms/graph.h"
#include "lms/strings.h"
#include "lms/types.h"

namespace lms::ops_internal {

// Note [Gradient request]: before calling a gradient rule the autodiff sets
// ctx.input_grads[i] = kWantGrad for every input whose gradient is needed and
// kNoTensor for the others. A rule replaces each kWantGrad by the gradient
// tensor, or by kNoTensor where no gradient flows (for example the target of
// a loss); it never leaves kWantGrad behind and never fills an input that was
// not requested. This keeps rules from emitting unneeded backward nodes (no
// conv_bwd_data for a first layer whose input is a graph input).
inline constexpr TensorId kWantGrad = -2;

// A family's own shape rule (ops without a schema rule): InvalidArgument
// "<op>: <msg>" without the node name, which the registry adds.
using InferFn =
    std::function<absl::StatusOr<std::vector<Shape>>(const Attrs&, const std::vector<Shape>&)>;

struct OpSpec {
  OpDef def;
  InferFn infer;  // empty: the op schema's rule
  // The attribute names the op requires and those it also accepts (the op
  // schema's, op_attr_names, for an op with a schema rule); their types come
  // from attr_type (one meaning per attribute name across all ops).
  std::vector<std::string> attrs;
  std::vector<std::string> optional_attrs;
};

OpSpec make_spec(OpKind kind, int min_inputs, int max_inputs, std::vector<std::string> attrs,
                 InferFn infer, decltype(OpDef::flops) flops, decltype(OpDef::grad) grad = nullptr,
                 std::vector<int> mutated_inputs = {});
// The entry of an op whose arity, attribute names and shape rule are the op
// schema's.
OpSpec make_schema_spec(OpKind kind, decltype(OpDef::flops) flops,
                        decltype(OpDef::grad) grad = nullptr, std::vector<int> mutated_inputs = {});

// The type of the attribute `name` on every op that takes it (docs/ops.md);
// nullopt for a name no op takes.
std::optional<AttrType> attr_type(std::string_view name);

// Sets a flag of OpDef (recomputable, backward) on the entries of `ops`
// (registered already).
void set_flag(std::vector<OpSpec>& specs, bool OpDef::*flag, std::initializer_list<OpKind> ops);

// numel as a double (FLOP counts overflow nothing this way).
double numel(const Shape& s, size_t from_dim = 0);

void register_conv_ops(std::vector<OpSpec>& specs);
void register_pointwise_ops(std::vector<OpSpec>& specs);
void register_embedding_ops(std::vector<OpSpec>& specs);
void register_linear_ops(std::vector<OpSpec>& specs);
void register_norm_ops(std::vector<OpSpec>& specs);
void register_attention_ops(std::vector<OpSpec>& specs);
void register_loss_ops(std::vector<OpSpec>& specs);
void register_optimizer_ops(std::vector<OpSpec>& specs);
void register_swap_ops(std::vector<OpSpec>& specs);

// absl::StrCat that also takes std::string_view (Debian's Abseil has its own
// string_view type; see lms/strings.h).
template <typename T>
decltype(auto) cat_arg(const T& v) {
  if constexpr (std::is_same_v<T, std::string_view>) {
    return to_absl(v);
  } else {
    return (v);
  }
}
template <typename... Args>
std::string str_cat(const Args&... args) {
  return absl::StrCat(cat_arg(args)...);
}

// "[2,3,4]"
std::string shape_str(const Shape& shape);

// InvalidArgument "<op>: <message>".
absl::Status op_error(std::string_view op, absl::string_view message);

// Gradient-rule helpers: true if input i was requested (Note [Gradient request]).
inline bool wants(const GradContext& ctx, size_t i) {
  return i < ctx.input_grads.size() && ctx.input_grads[i] == kWantGrad;
}
// Sets every still-requested input gradient to kNoTensor.
void decline_rest(GradContext& ctx);
// Adds one backward node named ctx.prefix + suffix (made unique) with
// kGradient outputs; on failure returns the error recorded in graph.status().
absl::StatusOr<std::vector<TensorId>> add_grad_node(GradContext& ctx, OpKind op,
                                                    std::string_view suffix,
                                                    std::vector<TensorId> inputs, Attrs attrs);
absl::StatusOr<TensorId> add_grad_node1(GradContext& ctx, OpKind op, std::string_view suffix,
                                        std::vector<TensorId> inputs, Attrs attrs);

// Shape (a copy: adding nodes may move tensors) of input i of the forward
// node, and the ids of its input i / output j.
Shape input_shape(const GradContext& ctx, size_t i);
TensorId fwd_input(const GradContext& ctx, size_t i);
TensorId fwd_output(const GradContext& ctx, size_t j);

}  // namespace lms::ops_internal
