// The op registry: every op of docs/ops.md is registered once with its arity,
// attribute validation + shape inference, gradient rule, FLOP count and the
// inputs it mutates. Immutable after construction (built on first use).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/graph.h"
#include "lms/types.h"

namespace lms {

// Passed to a gradient rule for one forward node. The rule adds backward
// nodes to `graph` (names start with `prefix`, e.g. "grad/conv1/...") and sets
// input_grads[i] to the gradient of the loss w.r.t. input i (kNoTensor when
// the input gets none, e.g. a graph input or a target). The autodiff requests
// gradients by pre-filling input_grads[i] with ops_internal::kWantGrad (-2)
// for the inputs that need one and kNoTensor for the rest; the rule replaces
// every kWantGrad and emits nothing for unrequested inputs (Note [Gradient
// request] in ops_internal.h). output_grads[j] is the
// incoming gradient of output j, or kNoTensor when no gradient reaches it
// (the rule then treats it as zero). Errors go into graph.status() via the
// builders; the rule returns them too.
struct GradContext {
  Graph& graph;
  NodeId node;
  std::vector<TensorId> output_grads;
  std::vector<TensorId> input_grads;
  std::string prefix;
};

struct OpDef {
  std::string name;
  int min_inputs = 0;
  int max_inputs = 0;  // -1: unbounded
  // Validates attributes against the input shapes and returns the output
  // shapes. InvalidArgument (without the node name; the caller adds it)
  // saying which attribute or input is wrong and what is allowed.
  std::function<absl::StatusOr<std::vector<Shape>>(const Attrs&, const std::vector<Shape>&)> infer;
  // Gradient rule; empty for ops that are not differentiated (backward ops,
  // optimizer updates, swap ops): a gradient reaching them is an error.
  std::function<absl::Status(GradContext&)> grad;
  // Floating-point operations of one execution (multiply-add = 2).
  std::function<double(const Attrs&, const std::vector<Shape>& inputs,
                       const std::vector<Shape>& outputs)>
      flops;
  // Inputs written in place (optimizer updates).
  std::vector<int> mutated_inputs;
};

// Null for an unknown op.
const OpDef* find_op(std::string_view name);
// All registered op names, sorted.
std::vector<std::string> registered_ops();

// Attribute access for rules and kernels: InvalidArgument naming the attribute
// and the expected type when absent (and no default) or of the wrong type.
absl::StatusOr<int64_t> attr_int(const Attrs& attrs, std::string_view key);
absl::StatusOr<double> attr_real(const Attrs& attrs, std::string_view key);
absl::StatusOr<std::string> attr_str(const Attrs& attrs, std::string_view key);
absl::StatusOr<std::vector<int64_t>> attr_ints(const Attrs& attrs, std::string_view key);
int64_t attr_int_or(const Attrs& attrs, std::string_view key, int64_t fallback);
double attr_real_or(const Attrs& attrs, std::string_view key, double fallback);

// FLOPs of a node of `graph` (0 for unknown ops).
double node_flops(const Graph& graph, NodeId node);

}  // namespace lms
