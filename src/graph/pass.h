// One shape for every graph transformation (Note [Graph passes]): a pass has
// a name and run(Graph&) -> changed, and a PassPipeline runs passes in order,
// verifying the graph and checking that every tensor keeps its dtype, shape,
// role and name between them.
//
//   PassPipeline pipeline;
//   pipeline.add(std::make_unique<FuseConvReluPass>(fetched));  // then the next passes
//   LMS_ASSIGN_OR_RETURN(PipelineResult r, pipeline.run(graph));
//   // r.node_map[id of the graph given] = the node of the result doing its work
//
// After XLA's HloPassInterface / HloPassPipeline (a name, StatusOr<bool>
// Run(module), an invariant checker between passes) and ONNX Runtime's
// GraphTransformer (ApplyImpl(Graph&, bool& modified)).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/graph.h"

namespace lms {

class GraphPass {
 public:
  virtual ~GraphPass() = default;
  // A short, stable name ("fuse_conv_relu"), used in errors.
  virtual std::string_view name() const = 0;
  // Rewrites `graph` in place; true when anything changed. On an error the
  // graph may be half rewritten: PassPipeline::run rewrites a copy.
  virtual absl::StatusOr<bool> run(Graph& graph) = 0;
  // For a pass that renumbers nodes: after run, for each node id of the
  // graph it was given, the node of the result that does its work. Empty:
  // node ids are unchanged.
  virtual std::vector<NodeId> node_map() const { return {}; }
};

struct PipelineResult {
  bool changed = false;
  // For each node id of the graph given to PassPipeline::run, the node of
  // the result that does its work (the passes' node maps composed).
  std::vector<NodeId> node_map;
};

struct PipelineOptions {
  // Check between passes that every tensor still present keeps its dtype,
  // shape and role, and that no input, parameter or optimizer state
  // disappears (check_tensors_kept): linear in the tensors, so on by default
  // in every build. Where internal checks are on (Note [Internal graph
  // checks]), also that the graph verifies.
  bool check_between_passes = true;
};

class PassPipeline {
 public:
  explicit PassPipeline(PipelineOptions options = {}) : options_(options) {}
  void add(std::unique_ptr<GraphPass> pass) { passes_.push_back(std::move(pass)); }
  const std::vector<std::unique_ptr<GraphPass>>& passes() const { return passes_; }

  // Runs every pass in order on a copy of `graph`, which changes only when
  // all of them succeed. `graph` must verify (the caller checks it at its
  // entry); with internal checks on, InvalidArgument when it does not;
  // a pass's own error, prefixed with its name; Internal naming the pass
  // when the check after it fails (a pass that breaks the graph is a bug).
  absl::StatusOr<PipelineResult> run(Graph& graph) const;

 private:
  PipelineOptions options_;
  std::vector<std::unique_ptr<GraphPass>> passes_;
};

// What check_tensors_kept compares: each tensor's name, dtype, shape and
// role, taken before a pass.
struct TensorSnapshot {
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    TensorRole role;
  };
  std::vector<Entry> tensors;  // by TensorId of the graph snapped
};
TensorSnapshot snapshot_tensors(const Graph& graph);

// OK when every tensor of `before` that `after` still holds by name has the
// same dtype, shape and role, and every input, parameter and optimizer state
// of `before` is still there; otherwise Internal naming `pass`, the tensor
// and what changed.
absl::Status check_tensors_kept(const TensorSnapshot& before, const Graph& after,
                                std::string_view pass);

}  // namespace lms
