#include "swap/plan.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/align.h"
#include "graph/op_registry.h"
#include "lms/status.h"

namespace lms::swap {
namespace {

absl::Status item_error(const Graph& g, TensorId t, absl::string_view why) {
  std::string name = t >= 0 && t < g.num_tensors() ? g.tensor(t).name : absl::StrCat("#", t);
  return absl::InvalidArgumentError(absl::StrCat("swap plan: tensor '", name, "': ", why));
}

bool valid_node(const Graph& g, NodeId n) { return n >= 0 && n < g.num_nodes(); }

absl::Status validate_swap_in(const Graph& g, const Liveness& live, const SwapPlan::Item& item,
                              const SwapPlan::SwapIn& in, absl::flat_hash_set<NodeId>& served) {
  const Tensor& t = g.tensor(item.tensor);
  if (!valid_node(g, in.trigger))
    return item_error(g, item.tensor, "a swap-in has no valid trigger");
  if (live.position[in.trigger] >= live.commit) {
    return item_error(g, item.tensor,
                      absl::StrCat("swap-in trigger '", g.node(in.trigger).name,
                                   "' is at or after the first persistent update; a swap-in "
                                   "there could fail after the step has begun to commit "
                                   "(Note [Step commit])"));
  }
  if (live.position[in.trigger] < live.position[item.swap_out_after]) {
    return item_error(
        g, item.tensor,
        absl::StrCat("trigger '", g.node(in.trigger).name, "' comes before the swap-out"));
  }
  if (in.consumers.empty()) return item_error(g, item.tensor, "a swap-in serves no consumer");
  for (NodeId c : in.consumers) {
    if (!valid_node(g, c) ||
        std::find(t.consumers.begin(), t.consumers.end(), c) == t.consumers.end()) {
      return item_error(g, item.tensor, "a swap-in serves a node that does not read the tensor");
    }
    if (live.position[c] <= live.position[in.trigger]) {
      return item_error(
          g, item.tensor,
          absl::StrCat("consumer '", g.node(c).name, "' does not come after trigger '",
                       g.node(in.trigger).name, "'"));
    }
    if (!served.insert(c).second) {
      return item_error(g, item.tensor,
                        absl::StrCat("consumer '", g.node(c).name, "' is served by two swap-ins"));
    }
  }
  return absl::OkStatus();
}

absl::Status validate_item(const Graph& g, const Liveness& live, const SwapPlan::Item& item) {
  if (item.tensor >= 0 && item.tensor < g.num_tensors()) {
    for (const SwapPlan::SwapIn& in : item.swap_ins) {
      if (in.recompute && !recomputable(g, g.tensor(item.tensor).producer)) {
        return item_error(g, item.tensor,
                          "its producer cannot be recomputed (only forward ops whose outputs "
                          "depend on their inputs alone: see swap::recomputable)");
      }
    }
  }
  if (item.tensor < 0 || item.tensor >= g.num_tensors()) {
    return item_error(g, item.tensor, "not a tensor of the graph");
  }
  const TensorLife& life = live.tensors[item.tensor];
  if (!life.on_device || life.persistent || life.fetched) {
    return item_error(g, item.tensor,
                      "only non-persistent, non-fetched device tensors can be swapped");
  }
  if (!valid_node(g, item.swap_out_after) || live.position[item.swap_out_after] < life.first) {
    return item_error(g, item.tensor, "swap_out_after must be at or after its producer");
  }
  if (item.sync_before != kNoNode &&
      (!valid_node(g, item.sync_before) ||
       live.position[item.sync_before] <= live.position[item.swap_out_after])) {
    return item_error(g, item.tensor, "sync_before must come after swap_out_after");
  }
  absl::flat_hash_set<NodeId> served;
  for (const SwapPlan::SwapIn& in : item.swap_ins) {
    LMS_RETURN_IF_ERROR(validate_swap_in(g, live, item, in, served));
  }
  return absl::OkStatus();
}

}  // namespace

bool recomputable(const Graph& graph, NodeId node) {
  if (node < 0 || node >= graph.num_nodes()) return false;
  const Node& n = graph.node(node);
  if (!op_def(n.op).recomputable) return false;
  for (TensorId out : n.outputs) {
    if (graph.tensor(out).role != TensorRole::kActivation) return false;
  }
  return true;
}

bool copies(const SwapPlan::Item& item) {
  for (const SwapPlan::SwapIn& in : item.swap_ins) {
    if (!in.recompute) return true;
  }
  return false;
}

std::string to_text(const SwapPlan& plan, const Graph& graph) {
  std::string out;
  for (const SwapPlan::Item& item : plan.items) {
    std::vector<std::string> ins;
    for (const SwapPlan::SwapIn& in : item.swap_ins) {
      std::vector<std::string> cs;
      for (NodeId c : in.consumers) cs.push_back(graph.node(c).name);
      ins.push_back(absl::StrCat(in.recompute ? "recompute" : graph.node(in.trigger).name, "@{",
                                 absl::StrJoin(cs, ", "), "}"));
    }
    if (!copies(item)) {
      absl::StrAppend(&out, "recompute ", graph.tensor(item.tensor).name, " in=[",
                      absl::StrJoin(ins, ", "), "]\n");
      continue;
    }
    absl::StrAppend(&out, "swap ", graph.tensor(item.tensor).name,
                    " out_after=", graph.node(item.swap_out_after).name, " in=[",
                    absl::StrJoin(ins, ", "), "] sync_before=",
                    item.sync_before == kNoNode ? "-" : graph.node(item.sync_before).name, "\n");
  }
  return out;
}

absl::Status validate_plan(const Graph& graph, const Liveness& live, const SwapPlan& plan) {
  absl::flat_hash_set<TensorId> seen;
  for (const SwapPlan::Item& item : plan.items) {
    LMS_RETURN_IF_ERROR(validate_item(graph, live, item));
    if (!seen.insert(item.tensor).second) return item_error(graph, item.tensor, "listed twice");
  }
  return absl::OkStatus();
}

MemoryProfile plan_profile(const Liveness& live, const SwapPlan& plan) {
  Liveness changed = live;
  // Model each copy as an extra tensor with its own interval.
  for (const SwapPlan::Item& item : plan.items) {
    const TensorLife& life = live.tensors[item.tensor];
    absl::flat_hash_set<int32_t> served;
    for (const SwapPlan::SwapIn& in : item.swap_ins) {
      TensorLife copy;
      copy.on_device = true;
      copy.bytes = life.bytes;
      copy.first = live.position[in.trigger] + 1;
      for (NodeId c : in.consumers) {
        copy.last = std::max(copy.last, live.position[c]);
        served.insert(live.position[c]);
      }
      changed.tensors.push_back(copy);
    }
    int32_t kept_last = live.position[item.swap_out_after];
    for (int32_t use : life.uses) {
      if (!served.contains(use)) kept_last = std::max(kept_last, use);
    }
    changed.tensors[item.tensor].last = kept_last;
  }
  return memory_profile(changed);
}

PlanTraffic plan_traffic(const Graph& graph, const SwapPlan& plan, uint64_t host_alignment) {
  PlanTraffic traffic;
  for (const SwapPlan::Item& item : plan.items) {
    if (!copies(item)) continue;
    uint64_t bytes = graph.tensor(item.tensor).bytes();
    traffic.bytes_out += bytes;
    traffic.host_bytes += rounded_size(bytes, host_alignment);
    for (const SwapPlan::SwapIn& in : item.swap_ins) {
      if (!in.recompute) traffic.bytes_in += bytes;
    }
  }
  return traffic;
}

// Per Note [Step commit], a swap-in triggered at or after the commit would
// allocate in the update stretch; trigger it right before the commit instead.
void clamp_to_commit(const Liveness& live, SwapPlan& plan) {
  if (live.commit <= 0 || live.commit >= live.size()) return;
  const NodeId last_before = live.order[live.commit - 1];
  for (SwapPlan::Item& item : plan.items) {
    for (SwapPlan::SwapIn& in : item.swap_ins) {
      if (live.position[in.trigger] >= live.commit) in.trigger = last_before;
    }
  }
}

}  // namespace lms::swap
