// The search of lms::rewrite: which candidate plans to make, and which to
// keep.
//
// Note [Rewrite in four parts]
// - Facts (lms::PlanningFacts, lms/rewrite.h): what the device and the run
//   are (capacity, alignment, pinned host pool, workspaces, node times,
//   link). The Device overload gathers them once (src/runtime/
//   device_rewrite.cc); the pass never asks a device.
// - Pass (swap/pass.h): for one candidate, the straight sequence verify ->
//   analyse -> plan -> insert -> lay out -> simulate.
// - Search (here): the weights-first order, the variants of the joint
//   planner, the jittered greedy, local refinement, the step-down and
//   bisection of the usable budget until the layout fits, and the
//   least-workspace fallback. It works on Candidate values (pass.h); its
//   limits are the named options of SearchOptions.
// - Result: the candidate kept, as a PlannedStep: the graph with its plan
//   record (Graph::plan_record: what it was planned for), the report, and
//   the step layout with the release plan (PlannedLayout). The public
//   lms::StepPlan (lms/plan.h) holds these three, immutable, and
//   Session::create runs it on that layout with no search of its own. A
//   graph alone keeps no layout: Session::create lays it out again from its
//   plan record, with the same facts and placement search bound, which gives
//   the same layout.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "lms/graph.h"
#include "lms/plan.h"
#include "swap/pass.h"
#include "swap/placement.h"

namespace lms::swap {

// The search's limits. Each trades planning time for plan quality on large
// graphs; the defaults keep a rewrite within about a second on the
// benchmarks' models (bench/plan_speed_bench.cc) and change no plan of the
// tests' models.
struct SearchOptions {
  // Per Note [Placement-aware planning], plans made for one candidate until its
  // layout fits: half stepping the usable budget down by the layout's
  // excess, half bisecting between the working-set limit and the last
  // budget that failed.
  int fit_attempts = 16;
  // Past this many nodes, auto with joint actions makes only the joint
  // greedy plan (Note [Joint planner]) and does not plan with the
  // least-workspace kernels unless it must (Note [Least workspace
  // fallback]), so planning stays linear in the graph.
  int32_t joint_compare_nodes = 20000;
  // After the fixed variants of the joint comparison, LmsConfig::
  // auto_search_plans jittered greedy plans (Note [Jittered greedy]) and the
  // local refinement (Note [Plan refinement]) on graphs of at most this many
  // nodes.
  int32_t jitter_nodes = 2000;
  // The local refinement makes at most this many plans divided by the
  // graph's nodes (and LmsConfig::auto_refine_plans): one plan costs about
  // 15 us per node, so about 2 s of planning on any graph.
  int32_t refine_node_plans = 131072;
  // Per Note [Pruned candidates], on graphs of at least this many nodes a
  // candidate predicted no faster than the best fitting one is not laid out.
  int32_t prune_nodes = 256;
  // The placement search of each layout a candidate makes places at most
  // this many buffers (PlacementOptions::search_placed_buffers).
  int64_t layout_placed_buffers = PlacementOptions{}.search_placed_buffers;
  // Per Note [Last-resort placement], when the plan for the working-set limit
  // itself misses only in its layout (its arena's lower bound fits), that
  // plan is laid out again with a placement search of at most this many
  // placed buffers (PlacementOptions::search_placed_buffers) before the
  // candidate is given up.
  int64_t last_resort_placed_buffers = int64_t{1} << 21;
  // Per Note [Last-resort plan], when that still misses, the candidate's variant
  // is planned once more for the working-set limit with every tensor it can
  // hide swapped (AutoOptions::force_swap) and laid out with the same long
  // search before the candidate is given up. false only to compare.
  bool last_resort_plan = true;
};

// Plans `graph` with `config` and `facts` (lms::rewrite's contract,
// lms/rewrite.h) and replaces it by the graph of the candidate kept.
// `config` is the user's; the facts override parts of it (effective_config
// in pass.h).
// The planned step of `graph` (Note [Rewrite in four parts]): the search's
// best candidate, its layout with the release plan of the fetch set.
// Errors: those of lms::rewrite (lms/rewrite.h).
absl::StatusOr<PlannedStep> plan(const Graph& graph, const LmsConfig& config,
                                 const PlanningFacts& facts, const RewriteOptions& options,
                                 const SearchOptions& search_options = {});

}  // namespace lms::swap
