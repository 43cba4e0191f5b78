// The op registry: every op of docs/ops.md (one OpKind, lms/op_kind.h) is
// registered once with its attribute names and their types, shape
// inference, gradient rule, cost (FLOPs and bytes touched), how it executes
// and the inputs it mutates. Immutable after construction (built on first
// use). The rule of which instances of an op are valid (arity, attribute
// values, dtypes, shapes) is the op schema's (op_schema/op_schema.h), which
// the backends call too; an op's `infer` here runs it. Kernels are not here:
// the graph layer does not depend on the backends, so each backend keeps its
// own dispatch table keyed by OpKind (docs/ops.md, "Adding an op").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/graph.h"
#include "lms/op_kind.h"
#include "lms/types.h"
#include "op_schema/op_instance.h"

namespace lms {

// Passed to a gradient rule for one forward node. The rule adds backward
// nodes to `graph` (names start with `prefix`, e.g. "grad/conv1/...") and sets
// input_grads[i] to the gradient of the loss w.r.t. input i (kNoTensor when
// the input gets none, e.g. a graph input or a target). The autodiff requests
// gradients by pre-filling input_grads[i] with ops_internal::kWantGrad (-2)
// for the inputs that need one and kNoTensor for the rest; the rule replaces
// every kWantGrad and emits nothing for unrequested inputs
// (Note [Gradient request]). output_grads[j] is the incoming gradient of
// output j, or kNoTensor when no gradient reaches it (the rule then treats it
// as zero). Errors go into graph.status() via the builders; the rule returns
// them too.
struct GradContext {
  Graph& graph;
  NodeId node;
  std::vector<TensorId> output_grads;
  std::vector<TensorId> input_grads;
  std::string prefix;
};

// The value type an attribute must hold (docs/ops.md, "Attribute types").
enum class AttrType : uint8_t { kInt, kReal, kStr, kInts };
const char* attr_type_name(AttrType type);  // "int", "real", "str", "ints"

struct AttrSchema {
  std::string name;
  AttrType type = AttrType::kInt;
  bool required = true;
};

// Where a node runs: kernels on the compute stream, the rest on a copy or the
// communication stream, without a kernel of the backend.
enum class OpExec : uint8_t {
  kKernel,        // a backend kernel on the compute stream
  kCopyToHost,    // swap_out: D2H copy into pinned host memory
  kCopyToDevice,  // swap_in: H2D copy back
  kCollective,    // all_reduce on the communication stream
};

using Shapes = std::vector<Shape>;

struct OpDef {
  OpKind kind = OpKind::kConv;
  std::string name;  // op_name(kind), for messages
  int min_inputs = 0;
  int max_inputs = 0;  // -1: unbounded
  // Validates a node (its output_shapes are not read) and returns its output
  // shapes: arity, input shapes and dtypes, attribute names and types, the
  // op's rule (the op schema's where it has one, op_schema.h), the outputs'
  // sizes and the layout attribute. InvalidArgument "node '<name>' (op
  // <op>): <msg>" saying which attribute or input is wrong and what is
  // allowed.
  std::function<absl::StatusOr<std::vector<Shape>>(const OpInstance&)> infer;
  // Gradient rule; empty for ops that are not differentiated (backward ops,
  // optimizer updates, swap ops): a gradient reaching them is an error.
  std::function<absl::Status(GradContext&)> grad;
  // Floating-point operations of one execution (multiply-add = 2).
  std::function<double(const Attrs&, const Shapes& inputs, const Shapes& outputs)> flops;
  // Bytes of device memory one execution reads and writes, for the time
  // model's memory-bound estimate (swap/cost_model.cc). Every op's is the
  // bytes of its inputs plus its outputs unless its entry says otherwise.
  std::function<double(const Attrs&, const Shapes& inputs, const Shapes& outputs)> bytes;
  // Inputs written in place (optimizer updates).
  std::vector<int> mutated_inputs;
  // Forward ops whose outputs depend only on their inputs and attributes, so
  // the recompute planner may run them again (swap/plan.h recomputable).
  bool recomputable = false;
  // Backward ops (the gradient of a forward op: conv_bwd_data, relu_bwd, ...);
  // vDNN triggers its prefetches on them (swap/planner_vdnn.cc).
  bool backward = false;
  // Every attribute the op accepts besides the layout attribute (which every
  // op takes, kLayoutAttr in lms/types.h), sorted by name.
  std::vector<AttrSchema> attrs;
  OpExec exec = OpExec::kKernel;
};

// The registry entry of `op` (every OpKind has one).
const OpDef& op_def(OpKind op);

// Attribute access for rules and kernels: InvalidArgument naming the attribute
// and the expected type when absent (and no default) or of the wrong type.
absl::StatusOr<int64_t> attr_int(const Attrs& attrs, std::string_view key);
absl::StatusOr<double> attr_real(const Attrs& attrs, std::string_view key);
absl::StatusOr<std::string> attr_str(const Attrs& attrs, std::string_view key);
absl::StatusOr<std::vector<int64_t>> attr_ints(const Attrs& attrs, std::string_view key);
int64_t attr_int_or(const Attrs& attrs, std::string_view key, int64_t fallback);
double attr_real_or(const Attrs& attrs, std::string_view key, double fallback);

// FLOPs and bytes touched of a node of `graph` (0 for an id out of range).
double node_flops(const Graph& graph, NodeId node);
double node_bytes(const Graph& graph, NodeId node);

// True for swap_out and swap_in, which copy bytes of any dtype.
inline bool is_copy(OpKind op) { return op == OpKind::kSwapOut || op == OpKind::kSwapIn; }

// The dtype of output `j` of a node of `op` with `attrs` reading `inputs`:
// the input's for the copies (is_copy), the one `to` names for cast (f32
// where it names none: the schema rejects such a node), input 0's for an
// op that follows its inputs' dtype (Note [Float dtypes of ops]) but for
// its float32 master outputs, float32 for every other op.
DType output_dtype(const Graph& graph, OpKind op, const Attrs& attrs,
                   const std::vector<TensorId>& inputs, size_t j);

// The op instance of a node of `graph` that is to read `inputs`: their
// shapes, dtypes and names; no output shapes.
OpInstance node_instance(const Graph& graph, std::string_view name, OpKind op, const Attrs& attrs,
                         const std::vector<TensorId>& inputs);

// True for ops run by a backend kernel (OpExec::kKernel).
inline bool has_kernel(OpKind op) { return op_def(op).exec == OpExec::kKernel; }

}  // namespace lms
