// Conv + ReLU fusion: a graph in which every relu that is the only reader of
// a conv output is folded into that conv (kActivationAttr = "relu" in
// lms/types.h), so the pre-activation tensor never exists.
//
//   LMS_ASSIGN_OR_RETURN(FusionResult f, fuse_conv_relu(g, {"loss"}));
//   // f.graph computes the same tensors as g, bit for bit, less the fused
//   // convs' outputs; f.node_map[old id] is the node that does its work.
//
// See Note [Conv + ReLU fusion] for the rule.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/pass.h"
#include "lms/graph.h"

namespace lms {

struct FusionResult {
  Graph graph;
  // For each node id of the input graph, the node of `graph` that does its
  // work: a fused conv and its relu both map to the fused node.
  std::vector<NodeId> node_map;
  // The fused nodes' names: each takes its relu's name, so the tensor that
  // consumers, fetches and swap plans name keeps its name.
  std::vector<std::string> fused;
};

// Returns the fused graph (a copy of `g` when nothing fuses). `fetched`
// names tensors read back by the host: a fetched conv output is not fused
// away, nor is the loss. A graph already planned by lms::rewrite is
// returned unchanged. InvalidArgument when a fetched name is not a tensor
// of `g` or `g` does not pass verify().
absl::StatusOr<FusionResult> fuse_conv_relu(const Graph& g,
                                            const std::vector<std::string>& fetched);

// fuse_conv_relu as a GraphPass (Note [Graph passes]): after run, node_map()
// and fused() are those of the FusionResult.
class FuseConvReluPass : public GraphPass {
 public:
  explicit FuseConvReluPass(std::vector<std::string> fetched) : fetched_(std::move(fetched)) {}
  std::string_view name() const override { return "fuse_conv_relu"; }
  absl::StatusOr<bool> run(Graph& graph) override;
  std::vector<NodeId> node_map() const override { return node_map_; }
  const std::vector<std::string>& fused() const { return fused_; }

 private:
  std::vector<std::string> fetched_;
  std::vector<NodeId> node_map_;
  std::vector<std::string> fused_;
};

}  // namespace lms
