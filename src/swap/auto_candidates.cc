// The auto planner's candidates: gaps, hiding triggers and recompute chains
// (swap/auto_planner.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lms/status.h"
#include "swap/auto_planner.h"

namespace lms::swap {
namespace {

std::vector<int64_t> signed_profile(const Liveness& live) {
  MemoryProfile prof = memory_profile(live);
  return {prof.during.begin(), prof.during.end()};
}

}  // namespace

AutoPlanner::AutoPlanner(const Graph* graph, const Liveness& live, const std::vector<double>& times,
                         const AutoOptions& options, uint64_t limit)
    : graph_(graph),
      live_(live),
      options_(options),
      limit_(limit),
      prefix_(live.size() + 1, 0),
      tree_(signed_profile(live)),
      tensor_gaps_(live.tensors.size(), 0) {
  for (int32_t p = 0; p < live.size(); ++p) {
    prefix_[p + 1] = prefix_[p] + (p < static_cast<int32_t>(times.size()) ? times[p] : 0);
  }
}

std::string AutoPlanner::node_name(int32_t position) const {
  if (graph_ == nullptr) return absl::StrCat("#", live_.order[position]);
  return graph_->node(live_.order[position]).name;
}

// The latest trigger g in [lowest, use - 1] whose compute g+1 .. use-1
// covers `copy_s`; `lowest` when none does.
int32_t AutoPlanner::hiding_trigger(int32_t lowest, int32_t use, double copy_s) const {
  int32_t lo = lowest, hi = use - 1;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo + 1) / 2;
    if (prefix_[use] - prefix_[mid + 1] >= copy_s)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// The chosen recomputes, in order of restore.
std::vector<int32_t> AutoPlanner::recomputes_by_restore() const {
  std::vector<int32_t> work;
  for (int32_t i : chosen_) {
    if (gaps_[i].recompute && gaps_[i].trigger > gaps_[i].after) work.push_back(i);
  }
  std::stable_sort(work.begin(), work.end(),
                   [&](int32_t a, int32_t b) { return gaps_[a].trigger < gaps_[b].trigger; });
  return work;
}

void AutoPlanner::collect_gaps() {
  for (const IdleInterval& idle : idle_intervals(live_, {})) {
    const TensorLife& life = live_.tensors[idle.tensor];
    if (life.bytes < options_.min_tensor_bytes) continue;
    Gap gap{idle.tensor, idle.after, idle.before, life.bytes, 0, idle.after, idle.after, 0};
    gap.copy_s = options_.copy_latency_s +
                 static_cast<double>(live_.tensors[idle.tensor].bytes) / options_.h2d_bytes_per_s;
    gap.seconds = prefix_[idle.before] - prefix_[idle.after + 1];
    gap.hidden_trigger = hiding_trigger(idle.after, idle.before, gap.copy_s);
    gap.cap = idle.before - 1;
    gap.free_from = idle.after + 1;
    if (joint() && options_.defer_release) {
      const double out_s =
          options_.copy_latency_s + static_cast<double>(life.bytes) / options_.d2h_bytes_per_s;
      const int32_t issued = std::max(life.input ? life.uses.front() : life.first, 0);
      // Smallest p in [after + 1, before] with compute(issued+1 .. p-1) >= out_s.
      int32_t a = idle.after + 1, b = idle.before;
      while (a < b) {
        const int32_t mid = a + (b - a) / 2;
        if (prefix_[mid] - prefix_[std::min(issued + 1, mid)] >= out_s)
          b = mid;
        else
          a = mid + 1;
      }
      gap.free_from = a;
    }
    gaps_.push_back(gap);
  }
  dependents_.assign(gaps_.size(), 0);
  leaves_.assign(gaps_.size(), {});
  gaps_of_.assign(live_.tensors.size(), {});
  for (int32_t i = 0; i < static_cast<int32_t>(gaps_.size()); ++i) {
    gaps_of_[gaps_[i].tensor].push_back(i);
  }
  for (auto& list : gaps_of_) {
    std::sort(list.begin(), list.end(),
              [&](int32_t a, int32_t b) { return gaps_[a].after < gaps_[b].after; });
  }
}

// The gap of `t` idle right after `pos` (after <= pos < before), or -1.
int32_t AutoPlanner::covering_gap(TensorId t, int32_t pos) const {
  const std::vector<int32_t>& list = gaps_of_[t];
  auto it = std::upper_bound(list.begin(), list.end(), pos,
                             [&](int32_t p, int32_t g) { return p < gaps_[g].after; });
  if (it == list.begin()) return -1;
  const Gap& gap = gaps_[*(it - 1)];
  return gap.before > pos ? *(it - 1) : -1;
}

// Adds what recomputing `t` right after `pos` costs to `out`; false when
// some input is neither live there nor recomputable.
bool AutoPlanner::chain(TensorId t, int32_t pos, int depth, Chain& out) const {
  constexpr int kMaxDepth = 8;
  const NodeId producer = graph_->tensor(t).producer;
  if (depth > kMaxDepth || !recomputable(*graph_, producer)) return false;
  const int32_t p = live_.position[producer];
  out.seconds += prefix_[p + 1] - prefix_[p];
  for (TensorId in : graph_->node(producer).inputs) {
    const TensorLife& life = live_.tensors[in];
    if (life.persistent || life.fetched) continue;
    const bool used_later = !life.uses.empty() && life.uses.back() > pos;
    const int32_t g = used_later ? covering_gap(in, pos) : -1;
    // A recompute restored at or before pos is live there too (Note
    // [Shared recomputation]).
    if (used_later && (g < 0 || !gaps_[g].recompute || gaps_[g].trigger <= pos)) {
      if (g >= 0) out.leaf_gaps.push_back(g);
      continue;
    }
    if (g >= 0) out.inner_gaps.push_back(g);
    out.transient += life.bytes;
    if (!chain(in, pos, depth + 1, out)) return false;
  }
  return true;
}

// The gaps of the inputs that recomputing `t` right after `pos` reads live
// there, each once, however deep the chain: chain() stops at its depth, for
// costing, and a chain can grow past it when tensors it read live are chosen
// for recomputation later. False when some input is neither live there nor
// recomputable (a graph input, say).
bool AutoPlanner::live_leaves(TensorId t, int32_t pos, std::vector<int32_t>& out) const {
  absl::flat_hash_set<TensorId> seen;
  std::vector<TensorId> stack = {t};
  while (!stack.empty()) {
    const NodeId producer = graph_->tensor(stack.back()).producer;
    stack.pop_back();
    if (!recomputable(*graph_, producer)) return false;
    for (TensorId in : graph_->node(producer).inputs) {
      if (!seen.insert(in).second) continue;
      const TensorLife& life = live_.tensors[in];
      if (life.persistent || life.fetched) continue;
      const bool used_later = !life.uses.empty() && life.uses.back() > pos;
      const int32_t g = used_later ? covering_gap(in, pos) : -1;
      if (used_later && (g < 0 || !gaps_[g].recompute || gaps_[g].trigger <= pos)) {
        if (g >= 0) out.push_back(g);
        continue;
      }
      stack.push_back(in);
    }
  }
  return true;
}

Chain AutoPlanner::recompute_chain(const Gap& gap) const {
  Chain c;
  c.ok = chain(gap.tensor, gap.before - 1, 0, c);
  return c;
}

bool AutoPlanner::host_allows(const Gap& gap) const {
  if (options_.host_limit_bytes == 0 || tensor_gaps_[gap.tensor] > 0) return true;
  return host_bytes_ + gap.bytes <= options_.host_limit_bytes;
}

}  // namespace lms::swap
