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
//
// Note [Joint planner]
// With recomputation (AutoOptions::actions recompute or joint) a gap may also
// be relieved by dropping the tensor after u_a and recomputing it right
// before u_b (Note [Recomputation]): the same freed range as a
// swap triggered at u_b - 1, at the cost of running its producer again, plus
// the producers of any input not live there (a chain, costed with the
// current choices: an input is live unless its own gap there is recomputed,
// or swapped in later, which the chain forbids from then on by capping that
// gap's trigger). Copies are not free once the link is busy: the joint
// planner keeps the sum of chosen copy times (link seconds) and in phase 1
// takes a hidden swap only while that sum stays within the step's compute
// time (times link_share); in phase 2 a swap costs its added stall plus the link seconds it adds
// past the compute time, a recompute the seconds of its chain, and among the
// gaps covering the peak the one with most bytes per added second wins,
// swap or recompute. The copies' stall estimate ignores queueing, so the
// link's real capacity is less than the compute time: AutoOptions::link_share
// scales it, and the rewrite plans with several shares and keeps the plan the
// simulator predicts fastest. Recompute-only skips phase 1 and offers only
// recomputes; swap-only is Note [Auto planner] unchanged. The chain's
// intermediates live only between u_b - 1 and u_b, where node u_b's outputs
// and workspace are not allocated yet, so the profile at the positions does
// not count them; the rewritten graph's layout decides `fits` (Note [Honest
// fits]), and where the intermediates do not fit the rewrite plans again for
// less (Note [Placement-aware planning]).
//
// A swapped tensor's original is released after its last reader, and the
// compute stream waits there for its swap-out (Note [Swap-out release]):
// when the link is slow against one layer's compute, every swap costs that
// wait. With AutoOptions::defer_release the planner instead frees a swap's
// memory only from the position by which its swap-out is predicted done
// (Gap::free_from) and has the original released there (the swap_out's
// release_after), trading that stall for memory held a few positions
// longer; the rewrite plans both ways and keeps the faster prediction.
// Each free_from assumes its swap-out has the D2H stream to itself; once
// the choices are made the swap-outs are replayed in issue order and a
// release that would come before its queued copy is done moves later where
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
    // The original, released in the first chosen gap, waits there for the
    // swap-out's predicted end (joint; Note [Joint planner]).
    const Gap& first = *gaps.front();
    if (!first.recompute && first.free_from > first.after + 1) {
      item.release_after = live_.order[first.free_from - 1];
    }
    for (size_t k = 0; k < gaps.size(); ++k) {
      const int32_t end = k + 1 < gaps.size() ? gaps[k + 1]->after : life.uses.back();
      SwapPlan::SwapIn in;
      in.trigger = live_.order[gaps[k]->trigger];
      in.recompute = gaps[k]->recompute;
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
  phase_forced();
  phase_hidden();
  LMS_RETURN_IF_ERROR(phase_stall());
  phase_drop();
  phase_share();
  LMS_RETURN_IF_ERROR(phase_leaves());
  phase_queue();
  SwapPlan plan = build_plan();
  const MemoryProfile check = plan_profile(live_, plan);
  if (check.peak > limit_) {
    return absl::InternalError(absl::StrCat("lms auto: planned profile peaks at ", check.peak,
                                            " > usable budget ", limit_, " (planner bug)"));
  }
  return plan;
}

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
