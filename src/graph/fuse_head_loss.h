// Chunked language-model head: in a training graph, a matmul whose logits
// are read only by softmax_cross_entropy and its backward becomes one
// linear_cross_entropy node, and the backward's matmuls one
// linear_cross_entropy_bwd node, so that no [N,V] logits tensor (nor its
// gradient) exists. See Note [Chunked language-model head].
//
//   pipeline.add(std::make_unique<FuseHeadLossPass>(fetched));
#pragma once

#include <string>
#include <vector>

#include "graph/pass.h"
#include "lms/graph.h"

namespace lms {

class FuseHeadLossPass : public GraphPass {
 public:
  // `fetched` names tensors the host reads back: a fetched logits tensor,
  // or its gradient, is not fused away.
  explicit FuseHeadLossPass(std::vector<std::string> fetched) : fetched_(std::move(fetched)) {}
  std::string_view name() const override { return "fuse_head_loss"; }
  // False (graph unchanged) when no head matches or the graph is planned.
  // InvalidArgument when a fetched name is not a tensor of the graph.
  absl::StatusOr<bool> run(Graph& graph) override;
  std::vector<NodeId> node_map() const override { return node_map_; }

 private:
  std::vector<std::string> fetched_;
  std::vector<NodeId> node_map_;
};

}  // namespace lms
