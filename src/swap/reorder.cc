#include "swap/reorder.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "lms/status.h"

namespace lms::swap {
namespace {

// The data op paired with weights op `op`, or nullopt.
std::optional<OpKind> data_op(OpKind op) {
  if (op == OpKind::kConvBwdWeights) return OpKind::kConvBwdData;
  if (op == OpKind::kDeconvBwdWeights) return OpKind::kDeconvBwdData;
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::vector<NodeId>> weight_gradients_first_order(
    const Graph& graph, const std::vector<std::string>& fetched) {
  LMS_ASSIGN_OR_RETURN(const std::vector<NodeId> order, schedule(graph));
  const absl::flat_hash_set<std::string> fetched_set(fetched.begin(), fetched.end());
  std::vector<int32_t> position(graph.num_nodes());
  for (size_t p = 0; p < order.size(); ++p) position[order[p]] = static_cast<int32_t>(p);
  // hoisted[d]: the weights nodes to run right before data node d. Decided on
  // the original order; a node only ever moves earlier, so each condition
  // still holds once every move is made.
  std::vector<std::vector<NodeId>> hoisted(graph.num_nodes());
  std::vector<bool> moves(graph.num_nodes(), false);
  bool moved = false;
  for (NodeId w = 0; w < graph.num_nodes(); ++w) {
    const Node& weights = graph.node(w);
    const std::optional<OpKind> want = data_op(weights.op);
    if (!want || weights.inputs.size() < 2) continue;
    const TensorId x = weights.inputs[0], dy = weights.inputs[1];
    const Tensor& xt = graph.tensor(x);
    if (xt.producer == kNoNode || fetched_set.contains(xt.name)) continue;
    // Only where the weights node frees x.
    int32_t last_reader = -1;
    for (NodeId c : xt.consumers) last_reader = std::max(last_reader, position[c]);
    if (last_reader != position[w]) continue;
    // The data node of the same dy that runs closest before it.
    NodeId d = kNoNode;
    for (NodeId c : graph.tensor(dy).consumers) {
      if (graph.node(c).op != *want || graph.node(c).inputs[0] != dy) continue;
      if (position[c] < position[w] && (d == kNoNode || position[c] > position[d])) d = c;
    }
    if (d == kNoNode) continue;
    bool ready = true;
    for (TensorId in : weights.inputs) {
      const NodeId p = graph.tensor(in).producer;
      ready = ready && (p == kNoNode || position[p] < position[d]);
    }
    for (NodeId c : weights.control_inputs) ready = ready && position[c] < position[d];
    if (!ready) continue;
    hoisted[d].push_back(w);
    moves[w] = true;
    moved = true;
  }
  if (!moved) return std::vector<NodeId>{};
  std::vector<NodeId> reordered;
  reordered.reserve(order.size());
  for (NodeId n : order) {
    if (moves[n]) continue;
    reordered.insert(reordered.end(), hoisted[n].begin(), hoisted[n].end());
    reordered.push_back(n);
  }
  return reordered;
}

}  // namespace lms::swap
