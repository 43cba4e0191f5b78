// Planners: pure functions from an analysed schedule (liveness.h) and, for
// `auto`, predicted node times, to a SwapPlan (plan.h). They work on schedule
// positions, so each can be tested on hand-written live ranges.
//
//   LMS_ASSIGN_OR_RETURN(swap::Liveness live, swap::analyze(graph, {}));
//   swap::SwapPlan plan = swap::plan_tflms(live, {.swapout_threshold = 3});
//   LMS_ASSIGN_OR_RETURN(plan, swap::plan_auto(&graph, live, times, {.budget_bytes = 1 << 30}));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "lms/graph.h"
#include "swap/liveness.h"
#include "swap/plan.h"

namespace lms::swap {

// TFLMS v2 rules (Le et al., arXiv 1807.02037, section 3; IBM TFLMS docs).
struct TflmsOptions {
  // A consumer more than this many positions after the producer is served by
  // a swap-in; nearer consumers read the original.
  int32_t swapout_threshold = 1;
  // The swap-in is triggered this many positions before its first consumer
  // (clamped to the producer).
  int32_t swapin_ahead = 1;
  // Far consumers at most this many positions after the previous one share
  // one swap-in.
  int32_t swapin_groupby = 5;
  // 0: async both ways. 1: sync swap-out: the node right after the producer
  // gets a control input from the swap-out (waits for the D2H copy).
  // 2: sync swap-in: the trigger is the consumer's immediate predecessor
  // (swapin_ahead ignored). 3: both.
  int32_t sync_mode = 0;
  uint64_t min_tensor_bytes = 0;  // smaller tensors are not swapped
};

// Candidates: forward activations (role kActivation) with a producer, not
// fetched, of at least min_tensor_bytes, with a consumer beyond the threshold.
SwapPlan plan_tflms(const Liveness& live, const TflmsOptions& options);

// The TFLMS rule applied to the named tensors only (no role or size filter; a
// graph input is anchored at its first read). InvalidArgument naming the
// tensor if it is unknown, persistent, fetched, a host tensor, or has no
// consumer beyond swapout_threshold.
absl::StatusOr<SwapPlan> plan_manual(const Graph& graph, const Liveness& live,
                                     const std::vector<std::string>& tensors,
                                     const TflmsOptions& options);

// vDNN_conv (Rhu et al., MICRO 2016, section III-C): swap out the input
// activation of every forward `conv` right after that conv; one swap-in for
// its later (backward) uses, triggered by the nearest preceding backward node
// (an op named *_bwd*), else by the first later use's predecessor.
SwapPlan plan_vdnn(const Graph& graph, const Liveness& live);

struct AutoOptions {
  uint64_t budget_bytes = 0;           // device bytes available to the step
  double fragmentation_reserve = 0.0;  // fraction of the budget never planned
  uint64_t host_limit_bytes = 0;       // pinned host bytes; 0 = unlimited
  uint64_t min_tensor_bytes = 0;
  double h2d_bytes_per_s = 12e9;
  double d2h_bytes_per_s = 12e9;  // with defer_release
  double copy_latency_s = 5e-6;
  // What a gap may be relieved by (Note [Joint planner]); recomputation needs
  // the graph (plan_auto's `graph` non-null), without it only swaps are used.
  AutoActions actions = AutoActions::kSwap;
  // Joint: the share of the step's compute time the planner lets copies
  // occupy the link before it charges them (Note [Joint planner]), [0, 1].
  double link_share = 1.0;
  // Joint: a swapped tensor is released only once its swap-out is predicted
  // done (SwapPlan::Item::release_after), so the compute stream does not
  // wait for the copy at the release, but the memory is freed later (Note
  // [Joint planner]).
  bool defer_release = false;
  // Recompute or joint: a recompute whose chain computes again a tensor
  // that has a later recompute of its own restores that tensor with it
  // where the profile has room, so it is computed once (Note [Shared
  // recomputation]). false only to compare.
  bool share_recompute = true;
  // Joint: a swapped tensor that a recompute's chain reads is swapped in
  // early enough to hide its copy before that recompute, where the profile
  // has room (Note [Prefetch for recomputation]). false only to compare.
  bool prefetch_for_recompute = true;
  // Not 0: phase 2 multiplies each candidate's score by a fixed factor in
  // [1 - kJitter, 1 + kJitter] drawn from this seed, to break its near-ties
  // another way (Note [Jittered greedy]).
  uint64_t jitter_seed = 0;
  // By TensorId (empty: none): tensors the plan must not swap, and tensors
  // it must not recompute (Note [Plan refinement]).
  std::vector<bool> no_swap;
  std::vector<bool> no_recompute;
  // By TensorId (empty: none): tensors whose longest idle interval the plan
  // swaps, with the latest trigger that hides the copy, before it chooses
  // anything else (Note [Plan refinement]).
  std::vector<bool> force_swap;
};

// Candidates are the idle intervals (idle_intervals) of every non-persistent,
// non-fetched device tensor of at least min_tensor_bytes: activations,
// gradients, and graph inputs after their first read.
// Least predicted stall plan whose exact profile (plan_profile) stays within
// budget_bytes * (1 - fragmentation_reserve); the empty plan if the graph
// already fits. `node_time_s` is by position. See Note [Auto planner] and,
// for recompute restores, Note [Joint planner].
// ResourceExhausted naming the node and its bytes when a working set
// (working_sets) exceeds the usable budget, or when no swap can relieve a
// position; InvalidArgument for a budget of 0 or a reserve outside [0, 1).
// `graph` (may be null) only names nodes in messages.
absl::StatusOr<SwapPlan> plan_auto(const Graph* graph, const Liveness& live,
                                   const std::vector<double>& node_time_s,
                                   const AutoOptions& options);

// budget * (1 - reserve), rounded down: the bytes the planner may use.
uint64_t usable_budget(uint64_t budget_bytes, double fragmentation_reserve);

}  // namespace lms::swap
