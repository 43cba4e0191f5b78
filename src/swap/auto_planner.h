// The auto planner's greedy (Note [Auto planner] and
// Note [Joint planner]), internal to src/swap, in three files along the
// seams of the rewrite (Note [Rewrite in four parts]):
// - auto_candidates.cc: what the greedy chooses from, the facts of one
//   plan: the idle intervals (gaps) of every tensor, the triggers that hide
//   their copies, and the recompute chains with their costs;
// - auto_phases.cc: the search, the phases that choose and drop gaps on the
//   exact profile (RangeMaxTree), and the state each choice updates;
// - planner_auto.cc: the sequence of the phases (run), the plan they leave
//   (build_plan) and its check against the profile, and plan_auto.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/graph.h"
#include "swap/liveness.h"
#include "swap/plan.h"
#include "swap/planner.h"
#include "swap/range_max_tree.h"

namespace lms::swap {

struct Gap {
  TensorId tensor;
  int32_t after;   // use before the gap
  int32_t before;  // use after the gap
  uint64_t bytes;
  double copy_s;           // H2D time of the tensor
  int32_t hidden_trigger;  // latest trigger that hides the copy (after: none)
  int32_t trigger;         // current trigger; == after while not chosen
  double seconds;          // idle compute time of the gap
  // First position a swap frees: after + 1, or with joint actions and
  // defer_release the first position by which the tensor's swap-out is
  // predicted done (its release is deferred there, Note [Joint planner]).
  int32_t free_from = 0;
  bool recompute = false;  // chosen, and restored by recomputation
  bool forced = false;     // swapped by phase_forced (AutoOptions::force_swap)
  int32_t cap = 0;         // latest swap trigger a chosen recompute allows
  double recompute_s = 0;  // the chain's compute seconds when chosen
};

// What recomputing a tensor right after a position needs, with the current
// choices (Note [Joint planner]).
struct Chain {
  bool ok = false;
  double seconds = 0;
  uint64_t transient = 0;          // bytes of the chain's intermediates
  std::vector<int32_t> leaf_gaps;  // gaps of the inputs read live there
  // Chosen recompute gaps of intermediates the chain computes again, whose
  // own restore comes later (Note [Shared recomputation]).
  std::vector<int32_t> inner_gaps;
};

class AutoPlanner {
 public:
  AutoPlanner(const Graph* graph, const Liveness& live, const std::vector<double>& times,
              const AutoOptions& options, uint64_t limit);
  absl::StatusOr<SwapPlan> run();

 private:
  void collect_gaps();
  bool joint() const { return options_.actions == AutoActions::kJoint && graph_ != nullptr; }
  bool may_swap() const { return options_.actions != AutoActions::kRecompute || graph_ == nullptr; }
  bool may_recompute() const { return options_.actions != AutoActions::kSwap && graph_ != nullptr; }
  int32_t covering_gap(TensorId t, int32_t pos) const;
  bool chain(TensorId t, int32_t pos, int depth, Chain& out) const;
  bool live_leaves(TensorId t, int32_t pos, std::vector<int32_t>& out) const;
  int32_t hiding_trigger(int32_t lowest, int32_t use, double copy_s) const;
  std::vector<int32_t> recomputes_by_restore() const;
  void prefetch_leaf(Gap& leaf, int32_t pos);
  Chain recompute_chain(const Gap& gap) const;
  void choose_recompute(int32_t index, const Chain& c);
  void drop_recompute(int32_t index);
  double link_penalty(const Gap& gap) const {
    if (!joint() || gap.trigger > gap.after) return 0;
    const double t = options_.link_share * prefix_.back();
    return std::max(0.0, link_s_ + gap.copy_s - t) - std::max(0.0, link_s_ - t);
  }
  double stall(const Gap& gap, int32_t trigger) const {
    if (trigger <= gap.after) return 0;
    return std::max(0.0, gap.copy_s - (prefix_[gap.before] - prefix_[trigger + 1]));
  }
  bool host_allows(const Gap& gap) const;
  bool swap_allowed(const Gap& gap) const {
    return gap.tensor >= static_cast<TensorId>(options_.no_swap.size()) ||
           !options_.no_swap[gap.tensor];
  }
  bool recompute_allowed(const Gap& gap) const {
    return gap.tensor >= static_cast<TensorId>(options_.no_recompute.size()) ||
           !options_.no_recompute[gap.tensor];
  }
  void set_trigger(Gap& gap, int32_t trigger);
  // The first position the gap's choice frees.
  int32_t freed_from(const Gap& gap) const { return gap.recompute ? gap.after + 1 : gap.free_from; }
  void phase_forced();
  void phase_hidden();
  absl::Status phase_stall();
  absl::Status phase_stall_batched();
  absl::Status stuck(int32_t q) const;
  void phase_drop();
  void phase_share();
  absl::Status phase_leaves();
  void phase_queue();
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
  std::vector<int32_t> chosen_;                // gap indices in order of choice
  std::vector<int32_t> tensor_gaps_;           // chosen gaps per tensor
  std::vector<std::vector<int32_t>> gaps_of_;  // by tensor, ascending `after`
  // By gap: chosen recomputes reading its tensor live in it, and, for a
  // chosen recompute, the gaps it reads live.
  std::vector<int32_t> dependents_;
  std::vector<std::vector<int32_t>> leaves_;
  uint64_t host_bytes_ = 0;
  double link_s_ = 0;  // chosen copies' H2D seconds
};

}  // namespace lms::swap
