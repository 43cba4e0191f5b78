#include "swap/insert.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "graph/internal_checks.h"
#include "graph/op_registry.h"
#include "lms/status.h"

namespace lms::swap {
namespace {

absl::Status check_names_free(const Graph& graph, const SwapPlan& plan) {
  for (const SwapPlan::Item& item : plan.items) {
    const std::string& t = graph.tensor(item.tensor).name;
    std::vector<std::string> names;
    if (copies(item)) names.push_back(absl::StrCat("swap_out/", t));
    for (size_t k = 0; k < item.swap_ins.size(); ++k) {
      names.push_back(
          absl::StrCat(item.swap_ins[k].recompute ? "recompute/" : "swap_in/", t, "/", k));
    }
    for (const std::string& name : names) {
      if (graph.find_node(name) != kNoNode || graph.find_tensor(name) != kNoTensor) {
        return absl::InvalidArgumentError(absl::StrCat(
            "swap insertion: name '", name, "' is already used (was the graph rewritten twice?)"));
      }
    }
  }
  return absl::OkStatus();
}

void rewire(Graph& graph, NodeId consumer, TensorId from, TensorId to) {
  const std::vector<TensorId> inputs = graph.node(consumer).inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == from) graph.replace_input(consumer, static_cast<int>(i), to);
  }
}

// Adds the nodes of one item; records where they go in the preferred order.
absl::Status insert_item(Graph& graph, const SwapPlan::Item& item,
                         std::vector<std::vector<NodeId>>& outs_after,
                         std::vector<std::vector<NodeId>>& ins_after) {
  const Tensor& tensor = graph.tensor(item.tensor);
  const std::string name = tensor.name;
  const TensorRole role = tensor.role == TensorRole::kInput ? TensorRole::kActivation : tensor.role;
  if (!copies(item)) return absl::OkStatus();
  Attrs out_attrs;
  if (item.release_after != kNoNode)
    out_attrs["release_after"] = graph.node(item.release_after).name;
  LMS_ASSIGN_OR_RETURN(std::vector<TensorId> host,
                       graph.add_node(OpKind::kSwapOut, absl::StrCat("swap_out/", name),
                                      {item.tensor}, std::move(out_attrs), TensorRole::kHost));
  const NodeId out_node = graph.tensor(host[0]).producer;
  outs_after[item.swap_out_after].push_back(out_node);
  if (item.sync_before != kNoNode) graph.add_control_edge(out_node, item.sync_before);
  for (size_t k = 0; k < item.swap_ins.size(); ++k) {
    const SwapPlan::SwapIn& in = item.swap_ins[k];
    if (in.recompute) continue;
    LMS_ASSIGN_OR_RETURN(std::vector<TensorId> copy,
                         graph.add_node(OpKind::kSwapIn, absl::StrCat("swap_in/", name, "/", k),
                                        {host[0]}, {}, role));
    const NodeId in_node = graph.tensor(copy[0]).producer;
    graph.add_control_edge(in.trigger, in_node);
    ins_after[in.trigger].push_back(in_node);
    for (NodeId c : in.consumers) rewire(graph, c, item.tensor, copy[0]);
  }
  return absl::OkStatus();
}

// Inserts the clones of Note [Recomputation] for every recompute
// restore, in order of trigger position. Runs after the swap nodes exist, so
// a swap-in's copy can be read by a clone.
class Recomputer {
 public:
  // `original` is the graph before any insertion: producers are cloned with
  // its inputs, which later rewiring (swap-ins serving them) does not change.
  Recomputer(Graph& graph, const Graph& original, const Liveness& live, const SwapPlan& plan,
             std::vector<std::vector<NodeId>>& after)
      : graph_(graph), original_(original), live_(live), plan_(plan), after_(after) {
    for (const SwapPlan::Item& item : plan.items) {
      for (size_t k = 0; k < item.swap_ins.size(); ++k) {
        for (NodeId c : item.swap_ins[k].consumers) served_[{item.tensor, c}] = {&item, k};
      }
    }
  }

  absl::Status run(std::vector<CloneOrigin>* origins) {
    std::vector<std::pair<const SwapPlan::Item*, size_t>> restores;
    for (const SwapPlan::Item& item : plan_.items) {
      for (size_t k = 0; k < item.swap_ins.size(); ++k) {
        if (item.swap_ins[k].recompute) restores.push_back({&item, k});
      }
    }
    // By trigger, and at one trigger in schedule order of the producers, so
    // a restore that reads another restored there finds it done (Note
    // [Shared recomputation]).
    auto key = [&](const std::pair<const SwapPlan::Item*, size_t>& r) {
      return std::make_pair(live_.position[r.first->swap_ins[r.second].trigger],
                            live_.position[original_.tensor(r.first->tensor).producer]);
    };
    std::stable_sort(restores.begin(), restores.end(),
                     [&](const auto& a, const auto& b) { return key(a) < key(b); });
    for (const auto& [item, k] : restores) {
      const SwapPlan::SwapIn& in = item->swap_ins[k];
      memo_.clear();
      restore_ = {static_cast<int32_t>(item - plan_.items.data()), static_cast<int32_t>(k)};
      base_ = absl::StrCat("recompute/", graph_.tensor(item->tensor).name, "/", k);
      LMS_ASSIGN_OR_RETURN(TensorId out, recompute(item->tensor, live_.position[in.trigger], 0));
      done_[{item, k}] = out;
      for (NodeId c : in.consumers) rewire(graph_, c, item->tensor, out);
    }
    if (origins != nullptr) {
      origins->assign(graph_.num_nodes(), CloneOrigin{});
      for (const auto& [clone, origin] : clones_) (*origins)[clone] = origin;
    }
    return absl::OkStatus();
  }

 private:
  static constexpr int kMaxDepth = 64;

  // The version of `t` live right after position `pos`, or kNoTensor.
  TensorId live_version(TensorId t, int32_t pos) const {
    const TensorLife& life = live_.tensors[t];
    if (life.persistent || life.fetched) return t;
    auto use = std::upper_bound(life.uses.begin(), life.uses.end(), pos);
    if (use == life.uses.end()) return kNoTensor;  // dead after pos
    auto it = served_.find(std::make_pair(t, live_.order[*use]));
    if (it == served_.end()) return t;  // the original is kept until that use
    const auto& [item, k] = it->second;
    const SwapPlan::SwapIn& in = item->swap_ins[k];
    if (live_.position[in.trigger] > pos) return kNoTensor;
    if (!in.recompute) {
      return graph_.find_tensor(absl::StrCat("swap_in/", graph_.tensor(t).name, "/", k));
    }
    auto done = done_.find(std::make_pair(item, k));
    return done == done_.end() ? kNoTensor : done->second;
  }

  // Clones the producer of `t` after position `pos` (and, first, of every
  // input without a live version); returns the clone's output for `t`.
  absl::StatusOr<TensorId> recompute(TensorId t, int32_t pos, int depth) {
    if (auto it = memo_.find(t); it != memo_.end()) return it->second;
    const NodeId producer = original_.tensor(t).producer;
    if (depth > kMaxDepth || !recomputable(original_, producer)) {
      return absl::InvalidArgumentError(
          absl::StrCat("recompute insertion: ", base_, " needs tensor '", graph_.tensor(t).name,
                       "', which is not live after '", graph_.node(live_.order[pos]).name,
                       "' and cannot be recomputed"));
    }
    const Node& original = original_.node(producer);
    std::vector<TensorId> inputs;
    for (TensorId in : original.inputs) {
      TensorId version = live_version(in, pos);
      if (version == kNoTensor) {
        LMS_ASSIGN_OR_RETURN(version, recompute(in, pos, depth + 1));
      }
      inputs.push_back(version);
    }
    const std::string name = depth == 0 ? base_ : absl::StrCat(base_, "/", original.name);
    LMS_ASSIGN_OR_RETURN(std::vector<TensorId> outs,
                         graph_.add_node(original.op, name, inputs, original.attrs));
    const NodeId clone = graph_.tensor(outs[0]).producer;
    graph_.add_control_edge(live_.order[pos], clone);
    // Like the original, the clone reads each parameter before its update.
    for (TensorId in : inputs) {
      if (!is_persistent(graph_.tensor(in).role)) continue;
      for (NodeId writer : graph_.tensor(in).consumers) {
        for (int i : op_def(graph_.node(writer).op).mutated_inputs) {
          if (i < static_cast<int>(graph_.node(writer).inputs.size()) &&
              graph_.node(writer).inputs[i] == in) {
            graph_.add_control_edge(clone, writer);
          }
        }
      }
    }
    after_[live_.order[pos]].push_back(clone);
    graph_.mutable_node(clone).origin = NodeOrigin::kRecompute;
    clones_.push_back({clone, {producer, restore_.first, restore_.second}});
    TensorId result = kNoTensor;
    for (size_t i = 0; i < outs.size(); ++i) {
      memo_[original.outputs[i]] = outs[i];
      if (original.outputs[i] == t) result = outs[i];
    }
    return result;
  }

  Graph& graph_;
  const Graph& original_;
  const Liveness& live_;
  const SwapPlan& plan_;
  std::vector<std::vector<NodeId>>& after_;
  absl::flat_hash_map<std::pair<TensorId, NodeId>, std::pair<const SwapPlan::Item*, size_t>>
      served_;
  absl::flat_hash_map<std::pair<const SwapPlan::Item*, size_t>, TensorId> done_;
  absl::flat_hash_map<TensorId, TensorId> memo_;
  std::vector<std::pair<NodeId, CloneOrigin>> clones_;
  std::pair<int32_t, int32_t> restore_{-1, -1};  // (item, restore) being inserted
  std::string base_;
};

}  // namespace

absl::StatusOr<Graph> with_swaps(const Graph& original, const Liveness& live, const SwapPlan& plan,
                                 std::vector<CloneOrigin>* origins) {
  LMS_RETURN_IF_ERROR(validate_plan(original, live, plan));
  LMS_RETURN_IF_ERROR(check_names_free(original, plan));
  const int32_t old_nodes = original.num_nodes();
  Graph graph = original;
  std::vector<std::vector<NodeId>> outs_after(old_nodes), ins_after(old_nodes),
      recomputes_after(old_nodes);
  for (const SwapPlan::Item& item : plan.items) {
    LMS_RETURN_IF_ERROR(insert_item(graph, item, outs_after, ins_after));
  }
  Recomputer recomputer(graph, original, live, plan, recomputes_after);
  LMS_RETURN_IF_ERROR(recomputer.run(origins));
  std::vector<NodeId> order;
  order.reserve(graph.num_nodes());
  for (NodeId n : live.order) {
    order.push_back(n);
    order.insert(order.end(), outs_after[n].begin(), outs_after[n].end());
    order.insert(order.end(), ins_after[n].begin(), ins_after[n].end());
    order.insert(order.end(), recomputes_after[n].begin(), recomputes_after[n].end());
  }
  LMS_RETURN_IF_ERROR(graph.set_order(std::move(order)));
  // Per Note [Internal graph checks]: one candidate of many.
  if (internal_checks()) LMS_RETURN_IF_ERROR(verify(graph));
  return graph;
}

absl::Status insert_swaps(Graph& graph, const Liveness& live, const SwapPlan& plan,
                          std::vector<CloneOrigin>* origins) {
  LMS_ASSIGN_OR_RETURN(Graph result, with_swaps(graph, live, plan, origins));
  graph = std::move(result);
  return absl::OkStatus();
}

}  // namespace lms::swap
