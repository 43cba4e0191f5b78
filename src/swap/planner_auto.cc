// Note [Auto planner]
// The unit of choice is an idle interval ("gap") of a tensor between two uses
// u_a < u_b. Swapping it with trigger g (u_a <= g < u_b) removes the tensor
// from positions u_a+1..g (plan_profile): the original (or the previous copy)
// is freed after u_a and a new copy is allocated after g. A later trigger
// frees more memory; an earlier one hides more of the H2D copy. The latest
// trigger that still hides the copy ("hidden trigger") is found by walking
// back from u_b over predicted compute times until they cover the copy time
// (latency + bytes / h2d bandwidth). Three phases, all on a segment tree that
// holds the exact step-order profile (plan_profile):
//  1. Gaps whose copy can be hidden, largest bytes x freed positions first,
//     are taken whenever their freed range touches a position over the limit.
//  2. While the peak is over the limit, among the gaps covering the peak
//     position q the one with most bytes per added stall second moves its
//     trigger to max(hidden trigger, q) (a stall, since the copy is late).
//  3. Chosen gaps whose bytes fit back under the limit are dropped, latest
//     choice first, so only what the budget requires is swapped.
// The stall estimate ignores queueing on the H2D stream; the simulator
// (simulator.h) predicts the step with it. The final plan is re-checked with
// plan_profile from scratch, so "fits" is never answered for a plan that does
// not fit the usable budget.
#include <algorithm>
#include <cmath>

#include "absl/container/btree_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lms/status.h"
#include "swap/planner.h"
#include "swap/range_max_tree.h"

namespace lms::swap {
namespace {

struct Gap {
  TensorId tensor;
  int32_t after;   // use before the gap
  int32_t before;  // use after the gap
  uint64_t bytes;
  double copy_s;           // H2D time of the tensor
  int32_t hidden_trigger;  // latest trigger that hides the copy (after: none)
  int32_t trigger;         // current trigger; == after while not chosen
  double seconds;          // idle compute time of the gap
};

class AutoPlanner {
 public:
  AutoPlanner(const Graph* graph, const Liveness& live, const std::vector<double>& times,
              const AutoOptions& options, uint64_t limit);
  absl::StatusOr<SwapPlan> run();

 private:
  void collect_gaps();
  double stall(const Gap& gap, int32_t trigger) const {
    if (trigger <= gap.after) return 0;
    return std::max(0.0, gap.copy_s - (prefix_[gap.before] - prefix_[trigger + 1]));
  }
  bool host_allows(const Gap& gap) const;
  void set_trigger(Gap& gap, int32_t trigger);
  void phase_hidden();
  absl::Status phase_stall();
  void phase_drop();
  SwapPlan build_plan() const;
  std::string node_name(int32_t position) const;
  bool over() const { return tree_.global_max() > static_cast<int64_t>(limit_); }

  const Graph* graph_;
  const Liveness& live_;
  const AutoOptions& options_;
  const uint64_t limit_;
  std::vector<double> prefix_;  // prefix_[p] = compute time of positions < p
  RangeMaxTree tree_;
  std::vector<Gap> gaps_;
  std::vector<int32_t> chosen_;       // gap indices in order of choice
  std::vector<int32_t> tensor_gaps_;  // chosen gaps per tensor
  uint64_t host_bytes_ = 0;
};

std::vector<int64_t> signed_profile(const Liveness& live) {
  MemoryProfile prof = memory_profile(live);
  return {prof.during.begin(), prof.during.end()};
}

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

void AutoPlanner::collect_gaps() {
  for (const IdleInterval& idle : idle_intervals(live_, {})) {
    const TensorLife& life = live_.tensors[idle.tensor];
    if (life.bytes < options_.min_tensor_bytes) continue;
    Gap gap{idle.tensor, idle.after, idle.before, life.bytes, 0, idle.after, idle.after, 0};
    gap.copy_s = options_.copy_latency_s +
                 static_cast<double>(live_.tensors[idle.tensor].bytes) / options_.h2d_bytes_per_s;
    gap.seconds = prefix_[idle.before] - prefix_[idle.after + 1];
    // Largest g in [after, before - 1] with compute(g+1 .. before-1) >= copy.
    int32_t lo = idle.after, hi = idle.before - 1;
    while (lo < hi) {
      const int32_t mid = lo + (hi - lo + 1) / 2;
      if (prefix_[idle.before] - prefix_[mid + 1] >= gap.copy_s)
        lo = mid;
      else
        hi = mid - 1;
    }
    gap.hidden_trigger = lo;
    gaps_.push_back(gap);
  }
}

bool AutoPlanner::host_allows(const Gap& gap) const {
  if (options_.host_limit_bytes == 0 || tensor_gaps_[gap.tensor] > 0) return true;
  return host_bytes_ + gap.bytes <= options_.host_limit_bytes;
}

void AutoPlanner::set_trigger(Gap& gap, int32_t trigger) {
  const int64_t bytes = static_cast<int64_t>(gap.bytes);
  tree_.add(gap.after + 1, gap.trigger, bytes);  // undo the old freed range
  tree_.add(gap.after + 1, trigger, -bytes);     // apply the new one
  const bool was = gap.trigger > gap.after, is = trigger > gap.after;
  gap.trigger = trigger;
  if (was == is) return;
  int32_t& count = tensor_gaps_[gap.tensor];
  if (is && count++ == 0) host_bytes_ += gap.bytes;
  if (!is && --count == 0) host_bytes_ -= gap.bytes;
}

void AutoPlanner::phase_hidden() {
  std::vector<int32_t> ranked;
  for (int32_t i = 0; i < static_cast<int32_t>(gaps_.size()); ++i) {
    if (gaps_[i].hidden_trigger > gaps_[i].after) ranked.push_back(i);
  }
  auto area = [&](const Gap& g) {
    return static_cast<double>(g.bytes) * (g.hidden_trigger - g.after);
  };
  std::sort(ranked.begin(), ranked.end(), [&](int32_t a, int32_t b) {
    if (area(gaps_[a]) != area(gaps_[b])) return area(gaps_[a]) > area(gaps_[b]);
    if (gaps_[a].seconds != gaps_[b].seconds) return gaps_[a].seconds > gaps_[b].seconds;
    return a < b;
  });
  for (int32_t i : ranked) {
    if (!over()) return;
    Gap& gap = gaps_[i];
    if (tree_.max(gap.after + 1, gap.hidden_trigger) <= static_cast<int64_t>(limit_)) continue;
    if (!host_allows(gap)) continue;
    set_trigger(gap, gap.hidden_trigger);
    chosen_.push_back(i);
  }
}

absl::Status AutoPlanner::phase_stall() {
  while (over()) {
    const int32_t q = tree_.argmax();
    int32_t best = -1;
    double best_score = -1;
    for (int32_t i = 0; i < static_cast<int32_t>(gaps_.size()); ++i) {
      const Gap& gap = gaps_[i];
      if (gap.after >= q || gap.before <= q || gap.trigger >= q || !host_allows(gap)) continue;
      const int32_t trigger = std::max(gap.hidden_trigger, q);
      const double added = stall(gap, trigger) - stall(gap, gap.trigger);
      const double score = static_cast<double>(gap.bytes) / (added + 1e-6);
      if (score > best_score) best = i, best_score = score;
    }
    if (best < 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "lms auto: device bytes during node '", node_name(q), "' stay at ", tree_.global_max(),
          " > usable budget ", limit_,
          " with every tensor idle there swapped out (host_memory_limit may prevent more); "
          "raise device_memory_limit or reduce the batch"));
    }
    Gap& gap = gaps_[best];
    if (gap.trigger == gap.after) chosen_.push_back(best);
    set_trigger(gap, std::max(gap.hidden_trigger, q));
  }
  return absl::OkStatus();
}

void AutoPlanner::phase_drop() {
  for (auto it = chosen_.rbegin(); it != chosen_.rend(); ++it) {
    Gap& gap = gaps_[*it];
    const int64_t with = tree_.max(gap.after + 1, gap.trigger) + static_cast<int64_t>(gap.bytes);
    if (with <= static_cast<int64_t>(limit_)) set_trigger(gap, gap.after);
  }
}

SwapPlan AutoPlanner::build_plan() const {
  absl::btree_map<TensorId, std::vector<const Gap*>> by_tensor;
  for (const Gap& gap : gaps_) {
    if (gap.trigger > gap.after) by_tensor[gap.tensor].push_back(&gap);
  }
  SwapPlan plan;
  for (auto& [t, gaps] : by_tensor) {
    const TensorLife& life = live_.tensors[t];
    std::sort(gaps.begin(), gaps.end(),
              [](const Gap* a, const Gap* b) { return a->after < b->after; });
    SwapPlan::Item item;
    item.tensor = t;
    item.swap_out_after = live_.order[life.input ? life.uses.front() : life.first];
    for (size_t k = 0; k < gaps.size(); ++k) {
      const int32_t end = k + 1 < gaps.size() ? gaps[k + 1]->after : life.uses.back();
      SwapPlan::SwapIn in;
      in.trigger = live_.order[gaps[k]->trigger];
      for (int32_t use : life.uses) {
        if (use >= gaps[k]->before && use <= end) in.consumers.push_back(live_.order[use]);
      }
      item.swap_ins.push_back(std::move(in));
    }
    plan.items.push_back(std::move(item));
  }
  return plan;
}

absl::StatusOr<SwapPlan> AutoPlanner::run() {
  if (!over()) return SwapPlan{};
  collect_gaps();
  phase_hidden();
  LMS_RETURN_IF_ERROR(phase_stall());
  phase_drop();
  SwapPlan plan = build_plan();
  const MemoryProfile check = plan_profile(live_, plan);
  if (check.peak > limit_) {
    return absl::InternalError(absl::StrCat("lms auto: planned profile peaks at ", check.peak,
                                            " > usable budget ", limit_, " (planner bug)"));
  }
  return plan;
}

}  // namespace

uint64_t usable_budget(uint64_t budget_bytes, double fragmentation_reserve) {
  return static_cast<uint64_t>(
      std::floor(static_cast<double>(budget_bytes) * (1.0 - fragmentation_reserve)));
}

absl::StatusOr<SwapPlan> plan_auto(const Graph* graph, const Liveness& live,
                                   const std::vector<double>& node_time_s,
                                   const AutoOptions& options) {
  if (options.budget_bytes == 0) {
    return absl::InvalidArgumentError("lms auto: the device budget must be positive");
  }
  if (!(options.fragmentation_reserve >= 0 && options.fragmentation_reserve < 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "lms auto: fragmentation_reserve %g is outside [0, 1)", options.fragmentation_reserve));
  }
  const uint64_t limit = usable_budget(options.budget_bytes, options.fragmentation_reserve);
  const WorkingSetLimit ws = working_set_limit(live);
  if (ws.position >= 0 && ws.bytes > limit) {
    std::string name = graph != nullptr ? graph->node(live.order[ws.position]).name
                                        : absl::StrCat("#", live.order[ws.position]);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "lms auto: node '%s' needs %d bytes (its inputs, outputs and workspace, persistent and "
        "fetched tensors, unread graph inputs) but the usable device budget is %d bytes "
        "(%d minus fragmentation_reserve %g); raise device_memory_limit or reduce the batch",
        name, ws.bytes, limit, options.budget_bytes, options.fragmentation_reserve));
  }
  AutoPlanner planner(graph, live, node_time_s, options, limit);
  return planner.run();
}

}  // namespace lms::swap
