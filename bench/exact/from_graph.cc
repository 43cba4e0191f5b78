#include "from_graph.h"

#include <algorithm>
#include <map>

#include "fmt/format.h"

namespace lms::exact {

absl::StatusOr<Problem> problem_from(const Graph& graph, const swap::Liveness& live,
                                     const std::vector<double>& times,
                                     const swap::AutoOptions& options) {
  if (times.size() != live.order.size()) {
    return absl::InvalidArgumentError(
        fmt::format("exact plan: {} node times for {} positions", times.size(), live.order.size()));
  }
  Problem pr;
  pr.nodes.resize(live.order.size());
  for (int32_t p = 0; p < live.size(); ++p) {
    const NodeId id = live.order[p];
    pr.nodes[p].seconds = times[p];
    pr.nodes[p].recomputable = swap::recomputable(graph, id);
    for (TensorId t : graph.node(id).inputs) pr.nodes[p].inputs.push_back(t);
  }
  pr.tensors.resize(live.tensors.size());
  for (TensorId t = 0; t < static_cast<TensorId>(live.tensors.size()); ++t) {
    const swap::TensorLife& life = live.tensors[t];
    Problem::Tensor& x = pr.tensors[t];
    x.bytes = life.bytes;
    x.uses = life.uses;
    const NodeId producer = graph.tensor(t).producer;
    x.producer =
        life.on_device && !life.input && producer != kNoNode ? live.position[producer] : -1;
    x.always_present = !life.on_device || life.persistent || life.fetched;
    x.in_s = options.copy_latency_s + static_cast<double>(life.bytes) / options.h2d_bytes_per_s;
    x.out_s = options.copy_latency_s + static_cast<double>(life.bytes) / options.d2h_bytes_per_s;
    if (life.input && life.on_device && !life.persistent) {
      pr.upload_s += options.copy_latency_s +
                     static_cast<double>(graph.tensor(t).bytes()) / options.h2d_bytes_per_s;
    }
  }
  for (const swap::IdleInterval& idle : swap::idle_intervals(live, times)) {
    if (live.tensors[idle.tensor].bytes < options.min_tensor_bytes) continue;
    pr.gaps.push_back({idle.tensor, idle.after, idle.before});
  }
  const swap::MemoryProfile profile = swap::memory_profile(live);
  pr.base_bytes.assign(profile.during.begin(), profile.during.end());
  pr.limit_bytes = static_cast<int64_t>(
      swap::usable_budget(options.budget_bytes, options.fragmentation_reserve));
  pr.link_share = options.link_share;
  pr.host_limit_bytes = options.host_limit_bytes;
  return pr;
}

swap::SwapPlan to_swap_plan(const Problem& pr, const swap::Liveness& live,
                            const std::vector<Choice>& choices) {
  std::map<int32_t, std::vector<int32_t>> by_tensor;  // chosen gaps
  for (int32_t j = 0; j < static_cast<int32_t>(pr.gaps.size()); ++j) {
    if (choices[j].kind != Choice::kKeep) by_tensor[pr.gaps[j].tensor].push_back(j);
  }
  swap::SwapPlan plan;
  for (auto& [t, gaps] : by_tensor) {
    const swap::TensorLife& life = live.tensors[t];
    std::sort(gaps.begin(), gaps.end(),
              [&](int32_t a, int32_t b) { return pr.gaps[a].after < pr.gaps[b].after; });
    swap::SwapPlan::Item item;
    item.tensor = t;
    item.swap_out_after = live.order[life.input ? life.uses.front() : life.first];
    for (size_t k = 0; k < gaps.size(); ++k) {
      const int32_t end = k + 1 < gaps.size() ? pr.gaps[gaps[k + 1]].after : life.uses.back();
      swap::SwapPlan::SwapIn in;
      in.trigger = live.order[choices[gaps[k]].trigger];
      in.recompute = choices[gaps[k]].kind == Choice::kRecompute;
      for (int32_t use : life.uses) {
        if (use >= pr.gaps[gaps[k]].before && use <= end) in.consumers.push_back(live.order[use]);
      }
      item.swap_ins.push_back(std::move(in));
    }
    plan.items.push_back(std::move(item));
  }
  return plan;
}

absl::StatusOr<std::vector<Choice>> choices_from(const Problem& pr, const swap::Liveness& live,
                                                 const swap::SwapPlan& plan) {
  std::vector<Choice> choices(pr.gaps.size());
  for (const swap::SwapPlan::Item& item : plan.items) {
    for (const swap::SwapPlan::SwapIn& in : item.swap_ins) {
      int32_t first = live.size();
      for (NodeId c : in.consumers) first = std::min(first, live.position[c]);
      const auto it = std::find_if(pr.gaps.begin(), pr.gaps.end(), [&](const Problem::Gap& g) {
        return g.tensor == item.tensor && g.before == first;
      });
      if (it == pr.gaps.end()) {
        return absl::InvalidArgumentError(
            fmt::format("exact plan: the swap-in of tensor {} before position {} serves no gap",
                        item.tensor, first));
      }
      choices[it - pr.gaps.begin()] = {in.recompute ? Choice::kRecompute : Choice::kSwap,
                                       live.position[in.trigger]};
    }
  }
  return choices;
}

}  // namespace lms::exact
