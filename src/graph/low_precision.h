// The graph pass that lets a device run a low-precision op it has no kernel
// for (Note [Low-precision lowering]):
//
//   pipeline.add(std::make_unique<WidenLowPrecisionPass>());
//   // every bf16 / f16 node that follows its inputs' dtype now computes in
//   // float32 between casts; node_map()[old id] is the node doing its work
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/pass.h"
#include "lms/graph.h"

namespace lms {

// Whether a node of `graph` computes in bf16 or f16 (a node that follows
// its inputs' dtype with a 2-byte float input or output).
bool has_low_precision_nodes(const Graph& graph);

class WidenLowPrecisionPass : public GraphPass {
 public:
  std::string_view name() const override { return "widen_low_precision"; }
  // Errors: those of the graph builder (a name it cannot place), and
  // InvalidArgument for a cyclic graph.
  absl::StatusOr<bool> run(Graph& graph) override;
  std::vector<NodeId> node_map() const override { return node_map_; }

 private:
  std::vector<NodeId> node_map_;
};

}  // namespace lms
