// The state of one import (lms/onnx.h): the ONNX values seen so far, each a
// folded constant or a tensor of the graph being built, and the helpers the
// passes share.
//
// Note [ONNX import]: first the fusion passes (import_pass.h), in the order
// import_pipeline declares, rewrite exported op chains (layer norm, GELU,
// attention) into one node each. Then the nodes are visited once, in file
// order (ONNX requires a topological order); each node is first offered to
// the folding and identity steps (fold.cc), then mapped onto lms ops
// (map_ops.cc), a fused node by its own mapper. Initializers stay constants
// until a mapped op reads one as a tensor, which is when it becomes a
// persistent tensor of the graph.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "lms/graph.h"
#include "lms/onnx.h"
#include "onnx/onnx_tensor.h"

namespace onnx {
class GraphProto;
class NodeProto;
class AttributeProto;
}  // namespace onnx

namespace lms::onnx_import {

// One ONNX value: a constant (initializer, Constant, folded) or a tensor of
// the graph. An initializer read by a mapped op is both.
struct Value {
  std::optional<Const> constant;
  TensorId tensor = kNoTensor;
  bool initializer = false;
  // The ONNX name of the rank-2 constant whose Transpose this constant is
  // (Note [Weight-side Transpose]); empty otherwise.
  std::string transpose_of;
  // For an identity of an initializer not yet in the graph: the
  // initializer's ONNX name, so that reading this value as a tensor reads
  // the initializer (a parameter if trainable), never a copy.
  std::string alias_of;
};

struct Importer {
  Graph graph;
  const OnnxImportOptions* options = nullptr;
  std::string model_dir;
  int64_t opset = 0;
  absl::flat_hash_map<std::string, Value> values;
  absl::flat_hash_set<std::string> trainable;  // initializer names
  // ONNX values lms does not compute (BatchNormalization's updated running
  // statistics), with the reason a reader of one is refused.
  absl::flat_hash_map<std::string, std::string> not_computed;
  // Slice outputs whose ends ONNX clamped to the input's size (a sequence
  // longer than a position table sliced to it), with what was asked: named
  // when a reader of one fails on its shape.
  absl::flat_hash_map<std::string, std::string> clamped_slices;
  // Pad outputs taken as the padding of the AveragePool that reads them
  // (Note [Pad before AveragePool]): the padded ONNX value and the spatial
  // pads, one per spatial dim, the same before and after.
  struct PendingPad {
    std::string input;
    std::vector<int64_t> pads;
  };
  absl::flat_hash_map<std::string, PendingPad> pending_pads;
  // The node visit_node is at (a fused node's body node inside it), for the
  // message when host memory runs out (Note [Host memory at import]).
  const ::onnx::NodeProto* visiting = nullptr;

  // InvalidArgument "ONNX node '<name>' (<op>): <what>".
  static absl::Status error(const ::onnx::NodeProto& n, std::string_view what);
  // The value of input `k` (NotFound-style InvalidArgument if unknown);
  // nullptr for an absent optional input.
  absl::StatusOr<const Value*> input(const ::onnx::NodeProto& n, int k) const;
  // Input `k` as a graph tensor, making a constant persistent on first use
  // (a parameter if trainable, else optimizer state); float32 only. The
  // transpose of a trainable initializer is refused (Note [Weight-side
  // Transpose]).
  absl::StatusOr<TensorId> tensor_input(const ::onnx::NodeProto& n, int k);
  // The same for the ONNX value `name`, which node `n` reads (as its input
  // `k`, or as the source of that input's transpose).
  absl::StatusOr<TensorId> tensor_of(const ::onnx::NodeProto& n, int k, const std::string& name);
  // Input `k` as a constant; InvalidArgument naming `what` if it is not one.
  absl::StatusOr<Const> const_input(const ::onnx::NodeProto& n, int k, std::string_view what) const;
  bool has_input(const ::onnx::NodeProto& n, int k) const;
  // The lms name for ONNX value `onnx_name`, unique in the graph.
  std::string lms_name(std::string_view onnx_name) const;
  void set_const(const std::string& name, Const c);
  void set_tensor(const std::string& name, TensorId t);
  // `to` is the value `from` (an identity); see Value::alias_of.
  void alias(const std::string& to, const std::string& from);
  // Adds one lms node named after the ONNX value `out` and binds `out` to its
  // first output; a graph error is returned naming the ONNX node.
  absl::StatusOr<TensorId> add(const ::onnx::NodeProto& n, OpKind op, const std::string& out,
                               std::vector<TensorId> inputs, Attrs attrs);
  absl::StatusOr<Shape> shape_of(TensorId t) const { return graph.tensor(t).shape; }
};

// Attribute readers; `fallback` when absent.
const ::onnx::AttributeProto* find_attr(const ::onnx::NodeProto& n, std::string_view name);
int64_t attr_int(const ::onnx::NodeProto& n, std::string_view name, int64_t fallback);
double attr_float(const ::onnx::NodeProto& n, std::string_view name, double fallback);
std::string attr_string(const ::onnx::NodeProto& n, std::string_view name,
                        std::string_view fallback);
std::vector<int64_t> attr_ints(const ::onnx::NodeProto& n, std::string_view name);
// Transpose's attribute perm for an input of `rank` dims (absent: the dims
// reversed); InvalidArgument naming it when it is not a permutation of them.
absl::StatusOr<std::vector<int64_t>> transpose_perm(const ::onnx::NodeProto& n, int64_t rank);
// Slice's ends, axes and steps (inputs 2-4, where given) have as many
// values as its starts; InvalidArgument otherwise.
absl::Status check_slice_lengths(const Importer& im, const ::onnx::NodeProto& n);
// ONNX Reshape's `shape` resolved against x's dims: 0 copies x's dim at
// that index (unless the attribute allowzero is 1), one -1 takes the rest;
// InvalidArgument for another negative value, two -1s, a 0 past x's rank or
// a different element count.
absl::StatusOr<std::vector<int64_t>> resolve_reshape(const ::onnx::NodeProto& n,
                                                     const std::vector<int64_t>& x,
                                                     std::vector<int64_t> shape);
// A list as "[a,b]" for messages.
std::string list_str(const std::vector<int64_t>& v);

// fold.cc: the dims Unsqueeze, Squeeze or Reshape node `n` gives an input of
// `dims` (its axes or shape a constant); InvalidArgument naming the node.
absl::StatusOr<std::vector<int64_t>> reshaped_dims(const Importer& im, const ::onnx::NodeProto& n,
                                                   std::vector<int64_t> dims);
// fold.cc: folds or removes node `n` if it is shape arithmetic on constants
// or an identity; false if it is neither (then map_node must take it).
absl::StatusOr<bool> fold_node(Importer& im, const ::onnx::NodeProto& n);
// import_onnx.cc: offers node `n` to folding, then to mapping; a fused node
// (import_pass.h) goes to its mapper.
absl::Status visit_node(Importer& im, const ::onnx::NodeProto& n);
// Visits the nodes of fused node `fused`'s body in order, in its place: what
// its mapper does when the constants do not allow the fusion.
absl::Status visit_body(Importer& im, const ::onnx::NodeProto& fused);
// The mappers of the lms.fused nodes the fusions write: one gelu node
// (fuse_gelu.cc, Note [GELU chain]) or one attention node (fuse_attention.cc,
// Note [Attention chain]) where the constants allow it, else visit_body.
absl::Status map_fused_gelu(Importer& im, const ::onnx::NodeProto& fused);
absl::Status map_fused_attention(Importer& im, const ::onnx::NodeProto& fused);
class ImportPipeline;
// import_onnx.cc: lms::import_onnx with `fusions` instead of
// import_pipeline's (for tests of the pass list).
absl::StatusOr<ImportedModel> import_onnx_with(std::string_view path,
                                               const OnnxImportOptions& options,
                                               const ImportPipeline& fusions);
// map_ops.cc: maps `n` (of the default domain or lms.fused) onto lms ops,
// or explains why it cannot.
absl::Status map_node(Importer& im, const ::onnx::NodeProto& n);
// The ONNX ops map_node handles, for messages.
std::string_view supported_ops();

}  // namespace lms::onnx_import
