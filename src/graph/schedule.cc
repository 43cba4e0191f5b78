#include <functional>
#include <queue>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lms/graph.h"

namespace lms {
namespace {

// Nodes that must run before `id`: producers of its inputs and its control inputs.
template <typename Fn>
void for_each_predecessor(const Graph& g, NodeId id, Fn fn) {
  const Node& n = g.node(id);
  for (TensorId t : n.inputs) {
    NodeId p = g.tensor(t).producer;
    if (p != kNoNode) fn(p);
  }
  for (NodeId c : n.control_inputs) fn(c);
}

}  // namespace

absl::StatusOr<std::vector<NodeId>> schedule(const Graph& graph) {
  const int32_t n = graph.num_nodes();
  std::vector<int32_t> position(n);
  for (int32_t i = 0; i < n; ++i) position[graph.order()[i]] = i;
  std::vector<int32_t> pending(n, 0);
  std::vector<std::vector<NodeId>> successors(n);
  for (NodeId id = 0; id < n; ++id) {
    for_each_predecessor(graph, id, [&](NodeId p) {
      ++pending[id];
      successors[p].push_back(id);
    });
  }
  // Min-heap of positions in the preferred order.
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<>> ready;
  for (NodeId id = 0; id < n; ++id) {
    if (pending[id] == 0) ready.push(position[id]);
  }
  std::vector<NodeId> result;
  result.reserve(n);
  while (!ready.empty()) {
    NodeId id = graph.order()[ready.top()];
    ready.pop();
    result.push_back(id);
    for (NodeId s : successors[id]) {
      if (--pending[s] == 0) ready.push(position[s]);
    }
  }
  if (static_cast<int32_t>(result.size()) != n) {
    for (NodeId id = 0; id < n; ++id) {
      if (pending[id] > 0) {
        return absl::InvalidArgumentError(absl::StrCat("the graph has a cycle through node '",
                                                       graph.node(id).name,
                                                       "': no topological order exists"));
      }
    }
  }
  return result;
}

}  // namespace lms
