// vDNN_conv (Rhu et al., "vDNN: Virtualized Deep Neural Networks for Scalable,
// Memory-Efficient Neural Network Design", MICRO 2016, section III-C).
#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "graph/op_registry.h"
#include "swap/planner.h"

namespace lms::swap {
namespace {

// vDNN prefetches layer n's input when the backward pass of the layer before
// it (in backward order) starts: the nearest backward node before `use`.
int32_t vdnn_trigger(const Graph& graph, const Liveness& live, const TensorLife& life,
                     int32_t anchor, int32_t use) {
  for (int32_t p = use - 1; p > anchor; --p) {
    if (std::binary_search(life.uses.begin(), life.uses.end(), p)) continue;
    if (op_def(graph.node(live.order[p]).op).backward) return p;
  }
  return use - 1;
}

}  // namespace

SwapPlan plan_vdnn(const Graph& graph, const Liveness& live) {
  SwapPlan plan;
  absl::flat_hash_set<TensorId> planned;
  for (int32_t p = 0; p < live.size(); ++p) {
    const Node& node = graph.node(live.order[p]);
    if (node.op != OpKind::kConv || node.inputs.empty()) continue;
    const TensorId x = node.inputs[0];
    const TensorLife& life = live.tensors[x];
    if (!life.on_device || life.persistent || life.fetched || planned.contains(x)) continue;
    SwapPlan::SwapIn in;
    for (int32_t use : life.uses) {
      if (use > p) in.consumers.push_back(live.order[use]);
    }
    if (in.consumers.empty()) continue;
    const int32_t first_later = live.position[in.consumers.front()];
    in.trigger = live.order[vdnn_trigger(graph, live, life, p, first_later)];
    planned.insert(x);
    plan.items.push_back({x, live.order[p], {in}, kNoNode});
  }
  return plan;
}

}  // namespace lms::swap
