// Rebuild: the one place where a pass that makes a new graph node by node
// copies the old one's tensors (conv + relu fusion, lms::autocast, the
// widening pass of graph/low_precision.h).
//
//   Rebuild rb(g);
//   LMS_RETURN_IF_ERROR(rb.copy_leaves());     // inputs and persistent tensors
//   for (each node N of g, in an order its inputs allow) {
//     ... rb.out().add_node(N.op, ..., inputs mapped by rb.mapped(t), ...);
//     rb.map(N's output, the new output);    // new nodes may go in between
//   }
//   LMS_ASSIGN_OR_RETURN(Graph out, rb.finish(node_map));
//
// Every leaf keeps its name, dtype, shape, role and initial values
// (Graph::leaf_like); a node's outputs take their dtypes and shapes from
// the op's rules, so what a rebuilt graph may lose is only what the caller
// drops. finish() carries the control edges (through node_map), the loss
// and the plan record, and verifies the result when internal checks are on
// (Note [Internal graph checks]).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/graph.h"

namespace lms {

class Rebuild {
 public:
  explicit Rebuild(const Graph& g) : g_(g), map_(g.num_tensors(), kNoTensor) {}

  // Copies every tensor without a producer (InvalidArgument, naming the
  // tensor and `pass`, for one that is neither an input nor persistent).
  absl::Status copy_leaves(std::string_view pass);

  Graph& out() { return out_; }
  TensorId mapped(TensorId t) const { return map_[t]; }
  void map(TensorId t, TensorId to) { map_[t] = to; }

  // `base`, else base_1, base_2 ...: a name neither graph uses.
  std::string fresh(const std::string& base) const;

  // A cast node of `origin` named `name` turning `x` (of the new graph)
  // into `to`.
  absl::StatusOr<TensorId> cast(TensorId x, DType to, const std::string& name, TensorRole role,
                                NodeOrigin origin);

  // After every node: control edges through `node_map` (node id of the old
  // graph -> node of the new; two nodes merged into one lose the edge
  // between them), then `order` as the preferred order (empty: the
  // creation order), the loss and the plan record.
  absl::StatusOr<Graph> finish(const std::vector<NodeId>& node_map, std::vector<NodeId> order = {});

 private:
  const Graph& g_;
  Graph out_;
  std::vector<TensorId> map_;
};

}  // namespace lms
