// The rewrite pass for one candidate plan (Note [Rewrite in four parts]):
// verify -> analyse -> plan -> insert -> lay out -> simulate, each step a
// function of its inputs. The search (search.h) decides which candidates
// to make and keeps the best; lms::rewrite (rewrite.cc) is the public
// entry point.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "lms/graph.h"
#include "lms/plan.h"
#include "swap/insert.h"
#include "swap/liveness.h"
#include "swap/placement.h"
#include "swap/plan.h"
#include "swap/simulator.h"

namespace lms::swap {

// What one rewrite plans from: the config with the facts applied
// (alignment, host limit, link and roofline: effective_config), the facts
// by NodeId of the graph being planned, and the user's options.
struct PassInputs {
  LmsConfig config;
  PlanningFacts facts;
  RewriteOptions options;
};

// `config` with the facts that override it: alignment_bytes, the host
// limit (the least of the config's and the pinned host pool), link and
// roofline.
LmsConfig effective_config(const LmsConfig& config, const PlanningFacts& facts);

// The facts' workspaces, or none (every node 0) when not known.
const std::vector<uint64_t>& workspaces(const PlanningFacts& facts);

// A graph's schedule analysed: live ranges, and predicted seconds by
// schedule position.
struct Analysis {
  Liveness live;
  std::vector<double> times;  // by position
};
absl::StatusOr<Analysis> analyse(const Graph& graph, const PassInputs& in);

// One plan of the joint comparison (Note [Joint planner]); the
// defaults are the plan of LmsConfig::auto_actions alone.
struct PlanVariant {
  AutoActions actions = AutoActions::kJoint;
  double link_share = 1.0;
  bool defer_release = false;
  uint64_t jitter_seed = 0;        // AutoOptions::jitter_seed; 0: none
  std::vector<bool> no_swap;       // AutoOptions::no_swap
  std::vector<bool> no_recompute;  // AutoOptions::no_recompute
  std::vector<bool> force_swap;    // AutoOptions::force_swap
};

// The plan of the config's policy for `usable` device bytes (the budget
// less what is kept free). InvalidArgument when auto has no budget.
absl::StatusOr<SwapPlan> make_plan(const Graph& graph, const PassInputs& in,
                                   const Analysis& analysis, uint64_t usable,
                                   const PlanVariant& variant);

// A candidate: `plan` inserted into a copy of the source graph, with the
// inputs for that graph (its recompute clones get the workspace and time of
// the node they copy) and the report filled as far as the candidate got.
struct Candidate {
  Graph graph;
  SwapPlan plan;
  PassInputs inputs;
  std::vector<CloneOrigin> origins;
  RewriteReport rep;
  std::shared_ptr<const PlannedLayout> layout;  // take_layout's; null before
};

// A plan ready to run (Note [Rewrite in four parts]): the planned graph
// (with its plan record), its report and its step layout with the release
// plan (keep_result). The layout is null only where none was made.
struct PlannedStep {
  Graph graph;
  RewriteReport rep;
  std::shared_ptr<const PlannedLayout> layout;
};

// Inserts `plan` into a copy of `source` (analysed as `analysis`).
absl::StatusOr<Candidate> insert(const Graph& source, const PassInputs& in,
                                 const Analysis& analysis, SwapPlan plan, const RewriteReport& rep);

// The candidate's step simulated at the budget (Note [Stall]).
absl::StatusOr<SimResult> simulate_step(const Candidate& candidate);

// Lays out `graph`'s step (Note [Step layout]) for
// `budget_bytes`, with a placement search of at most
// `search_placed_buffers` placed buffers.
absl::StatusOr<std::shared_ptr<const PlannedLayout>> lay_out(
    const Graph& graph, const PassInputs& in, uint64_t budget_bytes,
    int64_t search_placed_buffers = PlacementOptions{}.search_placed_buffers);

// Fills the arena figures, peak_bytes_after (the device bytes the session
// will hold), fits and fit_unknown_reason of `rep` from `planned`.
void fill_layout_figures(const PlannedLayout& planned, const PassInputs& in, RewriteReport& rep);

// fill_layout_figures for the candidate's report from `planned`, the layout
// of its graph's step, which the candidate keeps (Candidate::layout).
void take_layout(Candidate& candidate, std::shared_ptr<const PlannedLayout> planned);

// The report before any plan: budget, working-set limit, the unchanged
// graph's peak and simulated step, and the time model text.
RewriteReport report_before(const Graph& graph, const PassInputs& in, const Analysis& analysis);

// Sets the working-set limit of `rep` from `analysis` (of `graph`).
void fill_working_set(const Graph& graph, const Analysis& analysis, RewriteReport& rep);

// The last part of a laid-out candidate: refuses a plan over the host
// limit (ResourceExhausted), then fills its traffic, decisions and
// simulated step, and records what the graph was planned for
// (Graph::plan_record, checked by Session::create).
absl::Status complete(const Graph& source, Candidate& candidate);

// The result (Note [Rewrite in four parts]): adds to the step's layout the
// release plan of the fetch set it was planned for, so that Session::create
// takes both as they are. InvalidArgument as release_plan.
absl::Status keep_result(PlannedStep& step);

// The graph unchanged (LMS disabled): laid out, recorded, reported.
absl::StatusOr<PlannedStep> complete_unchanged(const Graph& graph, const PassInputs& in,
                                               RewriteReport rep);

}  // namespace lms::swap
