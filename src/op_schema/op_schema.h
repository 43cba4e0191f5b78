// The op schema: for each op of docs/ops.md that a backend runs, the one
// rule that says which instances are valid (arity, attribute values, input
// dtypes and shapes) and what output shapes they give. The graph's shape
// inference (Graph::add_node, verify) and both backends' kernel compilation
// call it, so a bad node is refused with the same status wherever it is
// met, and a kernel reads a spec that has passed it.
//
//   OpInstance inst{"crop", OpKind::kSlice, {{"begin", int64_t{1}}, {"size", int64_t{9}}},
//                   {{4, 8}}};
//   absl::StatusOr<std::vector<Shape>> y = infer_outputs(inst);
//   // InvalidArgument "node 'crop' (op slice): begin 1 and size 9 must satisfy
//   //   0 <= begin, 1 <= size, begin + size <= 8 (size of axis 1 of x)"
//
// Errors are InvalidArgument "node '<name>' (op <op>): <msg>", the msg naming
// what was wrong and what is allowed. What a backend cannot run on this
// machine (a rank over oneDNN's limit, a blocked layout it has no kernel
// for) is the backend's.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "op_schema/op_instance.h"

namespace lms {

// The inputs an op takes: min_inputs..max_inputs (max -1: unbounded).
struct OpArity {
  int min_inputs = 0;
  int max_inputs = 0;
};

// The attribute names an op takes besides the layout attribute (which every
// op takes, kLayoutAttr in lms/types.h), each list sorted by name.
struct OpAttrNames {
  std::vector<std::string> required;
  std::vector<std::string> optional;
};

// Whether `op` has a rule here. Every op with a kernel does; the copies
// (swap_out, swap_in) and all_reduce, which no backend compiles, are the
// graph's alone.
bool has_schema_rule(OpKind op);

// The arity and attribute names of an op with a rule (has_schema_rule).
OpArity op_arity(OpKind op);
OpAttrNames op_attr_names(OpKind op);

// Note [Float dtypes of ops]: most ops compute in the float dtype of their
// inputs (f32, bf16 or f16; all of one dtype) and give outputs of that
// dtype, as PyTorch's ops do: the convolutions, linear and matmul, the
// pointwise ops, pooling, upsample, reshapes, reductions and the
// normalisations, and their backward ops. The normalisations' scale, shift
// and running statistics stay float32 master tensors whatever the data's
// dtype (is_master_input), and so do the batch statistics they give and
// the gradients of scale and shift (is_master_output), as in PyTorch's
// bf16 batch norm. The rest take float32 alone: the losses, embedding,
// attention (its lse output stays float32), bn_stats_update and the
// optimizer ops; cast converts. A device without a low-precision kernel
// for an op runs it in float32 between casts (Note [Low-precision
// lowering]), so every op of the first kind runs on every device.
bool op_follows_input_dtype(OpKind op);
// For an op that follows its inputs' dtype: whether input `i` is a float32
// master tensor (gamma, beta, running_mean, running_var of a
// normalisation; gamma of its backward op), and whether output `j` stays
// float32 (batch_norm's batch mean and variance; dgamma and dbeta).
bool is_master_input(OpKind op, size_t i);
bool is_master_output(OpKind op, size_t j);

// OK when a kernel that computes in float32 alone can run `inst`: its
// float inputs are all float32, or it is cast. Otherwise Unimplemented naming
// the node, the op, the dtype and `backend` ("CPU"): a session lowers such
// a node to float32 between casts first (Note [Low-precision lowering]).
absl::Status check_float32_kernel(const OpInstance& inst, std::string_view backend);

// The dtype input `i` of `op` must have: int64 for embedding's ids and the
// cross-entropy labels, float32 elsewhere; nullopt for the copies, which
// move bytes of any dtype, for cast, and for the ops that follow their
// inputs' float dtype (check_inputs checks those are one float dtype).
std::optional<DType> op_input_dtype(OpKind op, size_t i);

// The checks every op shares: each input shape has dimensions >= 1 and fits
// in int64 bytes; each input has the dtype op_input_dtype gives, and the
// inputs of an op that follows its inputs' dtype share one float dtype
// (when inst.input_dtypes is given).
absl::Status check_inputs(const OpInstance& inst);

// Every attribute is one of `names` (or the layout attribute), every
// required one is there, and the workspace attribute (kWorkspaceAttr) is
// "fast" or "least": "unknown attribute 'alpha' (allowed: ...)".
absl::Status check_attr_names(const OpInstance& inst, const OpAttrNames& names);

// The checks every op's outputs get: each fits in int64 bytes, and the
// layout attribute (kLayoutAttr) has one 'p' or 'b' per input, ':', one per
// output.
absl::Status check_outputs(const OpInstance& inst, const std::vector<Shape>& outputs);

// For an op with a rule: arity, check_inputs, check_attr_names, the op's
// rule and check_outputs; returns the output shapes. inst.output_shapes is not read. For an op
// without a rule: FailedPrecondition (a caller's bug).
absl::StatusOr<std::vector<Shape>> infer_outputs(const OpInstance& inst);

// infer_outputs, and the instance's outputs must be exactly those (their
// count and shapes): what a backend calls before it compiles a kernel. OK for
// an op without a rule.
absl::Status check_spec(const OpInstance& inst);

}  // namespace lms
