// The importer's fusions, one shape for all (Note [ONNX import]): each is an
// ImportPass, a name and run(GraphProto&) -> changed, rewriting the ONNX
// graph before the walk maps its nodes, and import_pipeline declares which
// run and in what order.
//
//   ImportPipeline fusions = import_pipeline(model_dir);
//   LMS_ASSIGN_OR_RETURN(bool changed, fusions.run(*model.mutable_graph()));
//
// A fusion replaces each chain it matches by one node at the place of the
// chain's last node, where every value the chain reads is defined, so the
// file order stays topological. The node is a standard ONNX op where the
// match alone decides (the opset-14 layer norm becomes LayerNormalization),
// or a node of the private domain kFusedDomain holding the chain's nodes as
// exported in its attribute "body", where the decision needs constants that
// only the walk knows (GELU, attention). The mapper of such a node adds one
// lms node, or, when the constants do not allow it, visits the body's nodes
// in its place, as if nothing had been fused.
//
// After ONNX Runtime's GraphTransformer and XLA's HloPassInterface, as
// GraphPass is for lms graphs (Note [Graph passes]).
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace lms::onnx_import {

// The domain of the nodes a fusion writes for the walk to map; a file's own
// node in it is refused (refuse_fused_domain).
inline constexpr std::string_view kFusedDomain = "lms.fused";

class ImportPass {
 public:
  virtual ~ImportPass() = default;
  // A short, stable name ("fuse_gelu"), used in errors.
  virtual std::string_view name() const = 0;
  // Rewrites `g` in place; true when anything changed. An error fails the
  // import, so the graph may be left half rewritten.
  virtual absl::StatusOr<bool> run(::onnx::GraphProto& g) = 0;
};

class ImportPipeline {
 public:
  void add(std::unique_ptr<ImportPass> pass) { passes_.push_back(std::move(pass)); }
  const std::vector<std::unique_ptr<ImportPass>>& passes() const { return passes_; }

  // Runs every pass in order on `g`, in place (an error fails the import,
  // and a model's initializers can be gigabytes: no copy is kept); true when
  // any changed it. A pass's own error, prefixed "ONNX import pass '<name>'";
  // Internal naming the pass when, after it changed `g`, check_file_order
  // fails where it held on the graph given (a file out of order is the
  // walk's to refuse, with its message).
  absl::StatusOr<bool> run(::onnx::GraphProto& g) const;

 private:
  std::vector<std::unique_ptr<ImportPass>> passes_;
};

// The passes import_onnx runs, in their order (the reason is at the
// definition). `model_dir` is where external data files are read from.
ImportPipeline import_pipeline(const std::string& model_dir);

// OK when every value a node reads is a graph input, an initializer or the
// output of an earlier node, no value is written twice, every graph output
// is written, and each fused node's body reads only values defined before
// the fused node or earlier in the body; InvalidArgument naming the first
// value that is not.
absl::Status check_file_order(const ::onnx::GraphProto& g);

// InvalidArgument naming the first node of `g` in kFusedDomain: only the
// fusions write that domain.
absl::Status refuse_fused_domain(const ::onnx::GraphProto& g);

// The body of a fused node (its chain as exported); nullptr for any other
// node.
const ::onnx::GraphProto* fused_body(const ::onnx::NodeProto& n);

// Calls `f` on the nodes of `g` as exported: in file order, each fused
// node's body in its place. For what reads the file as written (the opset
// check, the default trainable rule).
void for_each_exported_node(const ::onnx::GraphProto& g,
                            const std::function<void(const ::onnx::NodeProto&)>& f);

// One node of kFusedDomain op `op` standing for the nodes `chain` of `g`
// (indices, in chain order, the last writing the chain's result): named
// after the last, reading each value the chain reads from outside it once,
// in order of first read, writing the last's outputs, with copies of the
// chain's nodes as its attribute "body".
::onnx::NodeProto fused_node(const ::onnx::GraphProto& g, const std::vector<int>& chain,
                             std::string_view op);
// Adds an int / ints attribute to `n`.
void add_attr(::onnx::NodeProto& n, std::string_view name, int64_t value);
void add_attr(::onnx::NodeProto& n, std::string_view name, const std::vector<int64_t>& values);

// A matched chain: its node indices (the last one last in file order) and
// the node that replaces it.
struct ChainFusion {
  std::vector<int> nodes;
  ::onnx::NodeProto fused;
};
// Replaces each chain of `fusions` (disjoint) by its fused node at the
// place of its last node; true when there was any.
bool replace_chains(::onnx::GraphProto& g, std::vector<ChainFusion> fusions);

// The passes (fuse_layer_norm.cc, fuse_gelu.cc, fuse_attention.cc).

// PyTorch's opset-14 layer norm decomposition into one LayerNormalization.
class FuseLayerNormPass : public ImportPass {
 public:
  explicit FuseLayerNormPass(std::string model_dir) : model_dir_(std::move(model_dir)) {}
  std::string_view name() const override { return "fuse_layer_norm"; }
  absl::StatusOr<bool> run(::onnx::GraphProto& g) override;

 private:
  std::string model_dir_;
};

// The exported exact GELU into one lms.fused Gelu (Note [GELU chain]).
class FuseGeluPass : public ImportPass {
 public:
  std::string_view name() const override { return "fuse_gelu"; }
  absl::StatusOr<bool> run(::onnx::GraphProto& g) override;
};

// The exported scaled dot-product attention into one lms.fused Attention
// (Note [Attention chain]).
class FuseAttentionPass : public ImportPass {
 public:
  std::string_view name() const override { return "fuse_attention"; }
  absl::StatusOr<bool> run(::onnx::GraphProto& g) override;
};

}  // namespace lms::onnx_import
