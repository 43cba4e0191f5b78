#include "swap/search.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "graph/internal_checks.h"
#include "lms/status.h"
#include "lms/types.h"
#include "lms/units.h"
#include "swap/pass.h"
#include "swap/reorder.h"

namespace lms::swap {
namespace {

constexpr double kNoBar = std::numeric_limits<double>::infinity();

// Note [Candidate memo]: the jittered and refined candidates of one
// rewrite often repeat a plan already made (on the main job's 3-D U-Net,
// 145 of 317 layouts were of a graph laid out before). Within one
// rewrite_once the source graph, its analysis, the inputs and the budget
// are fixed, so a plan's rewritten graph, its predicted step time and its
// layout are functions of the plan alone: they are kept by the plan's text
// (swap::to_text). A kept layout is used only when its graph fingerprint is
// the rewritten graph's, so a plan text that missed a difference costs a
// layout, never a wrong one.
struct CandidateMemo {
  absl::flat_hash_map<std::string, double> step_time_s;
  absl::flat_hash_map<std::string, std::shared_ptr<const PlannedLayout>> layout;
};

// What every candidate of one rewrite_once shares.
struct Source {
  const Graph& graph;
  const PassInputs& in;
  const Analysis& before;
  const RewriteReport& rep;  // filled before planning (report_before)
  const SearchOptions& options;
  CandidateMemo& memo;
};

// Note [Placement-aware planning]: the auto planner counts bytes; the arena
// also holds what the placement cannot pack (under 1% without swaps, a few
// percent on heavily swapped graphs, Note [Static placement]). So swaps and
// placement are chosen together: plan for the usable budget and lay the
// result out; while persistent + arena exceeds the budget, plan again for a
// usable budget smaller by that excess (at least one alignment unit), so
// the planner swaps more where the arena is decided. After
// SearchOptions::fit_attempts / 2 plans, try the working-set limit itself
// (no plan can go below it): if that fits, bisect between it and the last
// failing budget for the largest usable budget that fits (the fewest
// swaps), fit_attempts / 2 plans more. Other policies are laid out once and
// report whether they fit.
//
// Note [Last-resort placement]: each layout's placement search is bounded
// (PlacementOptions::search_placed_buffers, about 25 ms), which the many
// layouts of a search need. On large activations with large convolution
// workspaces the bounded search can leave the arena far above its lower
// bound: ResNet-50 at batch 84 under 1 GiB on the default kernels laid out
// at an arena of 967 MiB against a lower bound of 774 MiB, and no plan was
// found, although an unbounded search lays the same kind of plan out within
// 5% of its bound. So when even the plan for the floor misses only in its
// layout (persistent + the arena's lower bound fit the budget), it is laid
// out once more with SearchOptions::last_resort_placed_buffers before the
// candidate is given up. This costs time only where the candidate would
// otherwise fail, and "fits" is still decided by the layout found.
//
// Note [Last-resort plan]: the plan for the floor swaps only until every
// position's bytes are within the working-set limit. A tensor whose idle
// interval lies where the profile has room stays resident, at one address
// for its whole live range, and the placement must pack the step's peaks
// around it. At the limit that can defeat any placement search: ResNet-50 at
// batch 89 under 1 GiB (default kernels, AVX2) has 40 positions within 1%
// of its arena's lower bound of 819.7 MiB, each holding three 272.6 MiB
// activations, or one or two beside a convolution's workspace of up to
// 410.9 MiB, and the long search above found no arena under 837.2 MiB
// (836.8 MiB with 30 times as many reorders) against the 828.8 MiB left
// beside the parameters and momentum. So when the floor's plan misses even
// after the long search, the variant is planned once more for the floor
// with AutoOptions::force_swap set for every tensor: each tensor's longest
// idle interval whose copy the compute can hide is swapped first, so only
// the tensors near their uses stay resident, and the greedy plans the rest
// around that. That plan laid out at an arena of 820.4 MiB (0.08% over the
// bound) and batch 89 trained, its measured peak equal to the planned one.
// It copies more than any other plan of the variant (10,106 MiB swapped
// out per step at batch 89), so it is made only where every other plan of
// the variant has failed, and "fits" is decided by its layout as for any other.
//
// Note [Pruned candidates]: the search compares candidates by predicted
// step time, and on a large graph laying a candidate out costs far more
// than planning and simulating it: a layout that misses the budget runs
// the placement search (Note [Squeaky wheel], about 40 ms on the main job's
// 3-D U-Net against 4 ms for a plan), and most candidates of the jittered
// and refined search miss at first and step down. So on graphs of at least
// SearchOptions::prune_nodes nodes a candidate is simulated before it is
// laid out, and given up (Cancelled) when its plan is predicted no faster
// than `bar`, the best fitting candidate so far; the step-down attempts are
// checked the same way. This is a heuristic: the greedy for a smaller
// usable budget may choose other tensors and be faster than its first
// attempt, so a pruned candidate could have won. On the 72^3 U-Net the plan
// is the same with and without pruning (bench/plan_speed_bench.cc); on
// small graphs, where layouts are cheap, nothing is pruned and the plans
// are exactly those of the full search.
// `start_usable` > 0: the first attempt plans for that usable budget (at
// most the report's) instead of the report's (Note [Plan refinement]).
absl::StatusOr<Candidate> fit(const Source& s, const PlanVariant& variant, double bar,
                              uint64_t start_usable) {
  const LmsConfig& config = s.in.config;
  std::optional<Candidate> current;
  // One attempt: plan `v` for `usable`, insert, lay out with a placement
  // search of `placed_buffers`; true when it fits.
  auto attempt_with = [&](const PlanVariant& v, uint64_t usable, bool prune,
                          int64_t placed_buffers) -> absl::StatusOr<bool> {
    RewriteReport rep = s.rep;
    rep.actions = v.actions;
    rep.usable_budget_bytes = usable;
    LMS_ASSIGN_OR_RETURN(SwapPlan plan, make_plan(s.graph, s.in, s.before, usable, v));
    // Note [Candidate memo]; a layout searched longer is kept apart.
    std::string key = to_text(plan, s.graph);
    if (placed_buffers != s.options.layout_placed_buffers) {
      absl::StrAppend(&key, "\nplacement search ", placed_buffers);
    }
    prune = prune && s.graph.num_nodes() >= s.options.prune_nodes;
    auto pruned = [&](double step_time_s) { return prune && step_time_s >= bar; };
    const auto known_time = s.memo.step_time_s.find(key);
    if (known_time != s.memo.step_time_s.end() && pruned(known_time->second)) {
      return absl::CancelledError("lms rewrite: a candidate predicted no faster than the best");
    }
    LMS_ASSIGN_OR_RETURN(current, insert(s.graph, s.in, s.before, std::move(plan), rep));
    if (known_time == s.memo.step_time_s.end() && prune && bar < kNoBar) {
      LMS_ASSIGN_OR_RETURN(const SimResult sim, simulate_step(*current));
      s.memo.step_time_s[key] = sim.step_time_s;
      if (pruned(sim.step_time_s)) {
        return absl::CancelledError("lms rewrite: a candidate predicted no faster than the best");
      }
    }
    std::shared_ptr<const PlannedLayout>& kept = s.memo.layout[key];
    if (kept == nullptr || kept->graph_fingerprint != layout_fingerprint(current->graph)) {
      LMS_ASSIGN_OR_RETURN(
          kept, lay_out(current->graph, current->inputs, rep.budget_bytes, placed_buffers));
    }
    take_layout(*current, kept);
    return current->rep.fits;
  };
  auto attempt = [&](uint64_t usable, bool prune) {
    return attempt_with(variant, usable, prune, s.options.layout_placed_buffers);
  };
  uint64_t usable = s.rep.usable_budget_bytes;
  if (start_usable > 0) usable = std::min(usable, start_usable);
  LMS_ASSIGN_OR_RETURN(bool fitted, attempt(usable, true));
  if (config.policy != SwapPolicy::kAuto || fitted || !current->rep.fit_unknown_reason.empty()) {
    return *std::move(current);
  }
  const int half = s.options.fit_attempts / 2;
  const uint64_t floor = std::min(usable, current->rep.working_set_limit_bytes);
  int plans = 1;
  // Step down by the excess: usually one more plan suffices.
  for (; plans < half && usable > floor; ++plans) {
    const uint64_t excess = std::max<uint64_t>(
        current->rep.peak_bytes_after - current->rep.budget_bytes, config.alignment_bytes);
    usable = std::max(usable - std::min(usable, excess), floor);
    LMS_ASSIGN_OR_RETURN(fitted, attempt(usable, true));
    if (fitted) return *std::move(current);
  }
  // Then the floor itself and, if it fits, bisection for the largest usable
  // budget that fits (fewer swaps), half as many plans more.
  uint64_t lo = floor, hi = usable;
  if (usable != floor) {
    ++plans;
    LMS_ASSIGN_OR_RETURN(fitted, attempt(floor, false));
  }
  // Per Note [Last-resort placement], the plan for the floor is the least any
  // plan of this variant holds; where only its layout misses, search longer
  // for a layout before giving the candidate up.
  auto only_layout_misses = [&] {
    const RewriteReport& last = current->rep;
    return last.fit_unknown_reason.empty() &&
           last.arena_persistent_bytes + last.arena_lower_bound_bytes <= last.budget_bytes;
  };
  if (!fitted && only_layout_misses()) {
    LMS_ASSIGN_OR_RETURN(std::shared_ptr<const PlannedLayout> longer,
                         lay_out(current->graph, current->inputs, current->rep.budget_bytes,
                                 s.options.last_resort_placed_buffers));
    take_layout(*current, std::move(longer));
    fitted = current->rep.fits;
  }
  // Per Note [Last-resort plan], then the floor's plan that swaps every tensor
  // it can hide, which leaves the placement the fewest long-lived buffers.
  if (!fitted && s.options.last_resort_plan && only_layout_misses() &&
      variant.actions != AutoActions::kRecompute) {
    PlanVariant all = variant;
    all.force_swap.assign(s.graph.num_tensors(), true);
    ++plans;
    LMS_ASSIGN_OR_RETURN(fitted,
                         attempt_with(all, floor, false, s.options.last_resort_placed_buffers));
  }
  if (!fitted) {
    const RewriteReport& rep = current->rep;
    return absl::ResourceExhaustedError(absl::StrCat(
        "lms rewrite: no plan found whose static layout fits ", format_bytes(rep.budget_bytes),
        " (", plans, " plans, down to a usable budget of ", format_bytes(floor),
        ", the working-set limit; the last needs ", format_bytes(rep.peak_bytes_after), ": ",
        format_bytes(rep.arena_persistent_bytes), " persistent + an arena of ",
        format_bytes(rep.arena_bytes), " whose lower bound is ",
        format_bytes(rep.arena_lower_bound_bytes), "); raise the budget or lower the batch"));
  }
  Candidate best = *std::move(current);
  for (int k = 0; k < half && hi - lo > config.alignment_bytes; ++k) {
    const uint64_t mid = lo + (hi - lo) / 2;
    LMS_ASSIGN_OR_RETURN(fitted, attempt(mid, false));
    if (fitted) {
      lo = mid;
      best = *std::move(current);
    } else {
      hi = mid;
    }
  }
  return best;
}

// A candidate of `variant`, fitted (fit) and completed (pass.h complete).
// Cancelled where it is predicted no faster than `bar` (Note [Pruned
// candidates]).
absl::StatusOr<Candidate> plan_with(const Source& s, const PlanVariant& variant,
                                    double bar = kNoBar, uint64_t start_usable = 0) {
  LMS_ASSIGN_OR_RETURN(Candidate c, fit(s, variant, bar, start_usable));
  LMS_RETURN_IF_ERROR(complete(s.graph, c));
  return c;
}

// Note [Plan refinement]
// The greedy decides each tensor once, by a score that only estimates what
// the simulator will predict for the whole plan: a swap's stall ignores the
// copies queued before it, and a recompute's chain is costed with the choices
// made so far. After the variants and the jittered search, the best plan is
// improved by local search, judged by the simulator: for each tensor the plan
// swaps, the same variant is planned again with that tensor forbidden to
// swap, and for each it recomputes, once forbidden to recompute and once
// swapped first (AutoOptions::force_swap: a copy the greedy judged too slow
// alone may hide behind compute once the rest of the plan is timed, as for
// VDSR's early activations under deferred releases); the greedy plans the
// rest around that. A neighbour that fits and is predicted faster replaces
// the plan at once, with its constraints (first improvement), and the walk
// goes on through the rest of the round's tensors from it; rounds repeat
// until one improves nothing or LmsConfig::auto_refine_plans plans (and
// SearchOptions::refine_node_plans / nodes) have been made. Taking the
// fastest neighbour of a whole round instead (steepest descent) spent about
// 45 plans per improvement on the main job's 72^3 U-Net and ran out of
// plans while still improving (0.0899 s predicted after 431 plans); first
// improvement converged at 0.0886 s within 190. On the tests' models the
// larger budget matters: with 128 plans the swapped-first moves made some
// plans slower than the search without them, by using the budget up on
// longer rounds; with 512 none was.
//
// Each neighbour is planned first for the usable budget at which the plan
// it starts from fitted, not for the full usable budget (fit's
// `start_usable`). A neighbour differs in one tensor, so its layout misses
// the full budget by about what the plan's did, and each layout that misses
// runs the bounded placement search: about 23 ms on ResNet-50 (781 nodes)
// against 4 ms for one that fits. On ResNet-50 at batch 32 under half its
// peak this cut planning from 1.5-3.4 s to 0.7-0.9 s, the predicted step
// within 0.1%; the plans of VDSR and the 3-D U-Net are the same. A
// neighbour that fits only at a larger budget is missed. Starting the
// jittered plans the same way lost 1-2% (ResNet-50, VDSR): they differ from
// the best plan in more than one tensor, and start from the full budget.
void refine(const Source& s, PlanVariant variant, Candidate& best) {
  const Graph& graph = s.graph;
  int32_t left = std::min<int32_t>(
      s.in.config.auto_refine_plans,
      std::max<int32_t>(1, s.options.refine_node_plans / std::max<int32_t>(1, graph.num_nodes())));
  const size_t tensors = graph.num_tensors();
  if (variant.no_swap.empty()) variant.no_swap.assign(tensors, false);
  if (variant.no_recompute.empty()) variant.no_recompute.assign(tensors, false);
  if (variant.force_swap.empty()) variant.force_swap.assign(tensors, false);
  bool improved = true;
  while (improved && left > 0 && best.rep.fits) {
    improved = false;
    auto consider = [&](PlanVariant v) {
      --left;
      absl::StatusOr<Candidate> p =
          plan_with(s, v, best.rep.step_time_after_s, best.rep.usable_budget_bytes);
      if (!p.ok() || !p->rep.fits || p->rep.step_time_after_s >= best.rep.step_time_after_s) {
        return;
      }
      best = *std::move(p);
      variant = std::move(v);
      improved = true;
    };
    // The round walks the tensors of the plan it starts from; a move made
    // on the way changes `variant`, and the later moves build on it.
    const std::vector<TensorDecision> decisions = best.rep.decisions;
    for (const TensorDecision& d : decisions) {
      if (left <= 0) break;
      const TensorId t = graph.find_tensor(d.tensor);
      if (t == kNoTensor) continue;
      const bool swapped = d.action == DecisionAction::kSwap;
      PlanVariant v = variant;
      std::vector<bool>& forbid = swapped ? v.no_swap : v.no_recompute;
      if (!forbid[t]) {
        forbid[t] = true;
        consider(std::move(v));
      }
      // A recomputed tensor may be cheaper swapped once the copies are
      // timed with the rest of the plan.
      if (!swapped && left > 0 && !variant.force_swap[t] && !variant.no_swap[t]) {
        PlanVariant f = variant;
        f.force_swap[t] = true;
        consider(std::move(f));
      }
    }
  }
}

// Per Note [Weight gradients first], policy auto plans the graph with each
// weights gradient that frees its input run before the data gradient, where
// the unswapped step's layout is not larger. Returns the reordered graph, or
// nullopt to keep the order; `before` and `rep` then describe the reordered
// graph.
absl::StatusOr<std::optional<Graph>> weights_first(const Graph& graph, const PassInputs& in,
                                                   Analysis& before, RewriteReport& rep) {
  LMS_ASSIGN_OR_RETURN(std::vector<NodeId> order,
                       weight_gradients_first_order(graph, in.options.fetched));
  if (order.empty()) return std::nullopt;
  Graph candidate = graph;
  LMS_RETURN_IF_ERROR(candidate.set_order(order));
  LMS_ASSIGN_OR_RETURN(Analysis reordered, analyse(candidate, in));
  // The reorder frees convolution inputs sooner, but a weights kernel's
  // workspace may then be live beside more, or the step may pack worse:
  // keep it only where the unswapped step's layout is not larger.
  const LivenessOptions lo{in.config.alignment_bytes, in.options.fetched, workspaces(in.facts)};
  LMS_ASSIGN_OR_RETURN(StepLayout as_is, layout_step(graph, lo, rep.budget_bytes));
  LMS_ASSIGN_OR_RETURN(StepLayout moved, layout_step(candidate, lo, rep.budget_bytes));
  if (moved.device_bytes() > as_is.device_bytes()) return std::nullopt;
  // The weights nodes that now come earlier than before.
  LMS_ASSIGN_OR_RETURN(std::vector<NodeId> old_order, schedule(graph));
  std::vector<int32_t> old_position(graph.num_nodes(), 0);
  for (size_t p = 0; p < old_order.size(); ++p) {
    old_position[old_order[p]] = static_cast<int32_t>(p);
  }
  for (size_t p = 0; p < order.size(); ++p) {
    const Node& n = graph.node(order[p]);
    if ((n.op == OpKind::kConvBwdWeights || n.op == OpKind::kDeconvBwdWeights) &&
        static_cast<int32_t>(p) < old_position[order[p]]) {
      rep.weight_gradients_first.push_back(n.name);
    }
  }
  before = std::move(reordered);
  fill_working_set(candidate, before, rep);
  return candidate;
}

// Whether `graph` has swap or recompute nodes.
bool holds_lms_nodes(const Graph& graph) {
  for (NodeId id = 0; id < static_cast<NodeId>(graph.num_nodes()); ++id) {
    const Node& n = graph.node(id);
    if (n.origin == NodeOrigin::kSwap || n.origin == NodeOrigin::kRecompute) {
      return true;
    }
  }
  return false;
}

// One planning of `graph` with the kernels its inputs describe: the
// weights-first order, then the plan of the policy, or for auto with joint
// actions the best of the joint comparison, jitter and refinement.
absl::StatusOr<PlannedStep> rewrite_once(const Graph& graph, const PassInputs& in,
                                         const SearchOptions& options) {
  const LmsConfig& config = in.config;
  // Per Note [Internal graph checks]: the lowered graph of a verified one.
  if (internal_checks()) LMS_RETURN_IF_ERROR(verify(graph));
  LMS_ASSIGN_OR_RETURN(Analysis before, analyse(graph, in));
  RewriteReport rep = report_before(graph, in, before);
  if (!config.enabled) return complete_unchanged(graph, in, std::move(rep));
  std::optional<Graph> ordered;
  // A graph that holds LMS decisions already (rewritten before) keeps the
  // order its first rewrite chose: the comparison of two layouts in
  // weights_first could decide otherwise on the graph with its swaps, and a
  // planned graph rewritten again for its own device and budget must stay
  // as it is (lms/rewrite.h).
  if (config.policy == SwapPolicy::kAuto && !holds_lms_nodes(graph)) {
    LMS_ASSIGN_OR_RETURN(ordered, weights_first(graph, in, before, rep));
  }
  CandidateMemo memo;  // Note [Candidate memo]
  const Source s{ordered ? *ordered : graph, in, before, rep, options, memo};

  if (config.policy != SwapPolicy::kAuto || config.auto_actions != AutoActions::kJoint) {
    const AutoActions actions =
        config.policy == SwapPolicy::kAuto ? config.auto_actions : AutoActions::kSwap;
    LMS_ASSIGN_OR_RETURN(Candidate c, plan_with(s, PlanVariant{actions}));
    return PlannedStep{std::move(c.graph), std::move(c.rep), std::move(c.layout)};
  }
  // Per Note [Joint planner], the joint greedy plan with several link shares,
  // with and without deferred releases, and the swap-only and
  // recompute-only plans as well, then on graphs up to
  // SearchOptions::jitter_nodes nodes the best of those with jittered greedy
  // ties (Note [Jittered greedy]); the least predicted step time that fits
  // wins (the first on a tie), so joint is never predicted slower than
  // either. Each candidate is inserted, laid out and simulated, about 15 us
  // per node; past SearchOptions::joint_compare_nodes nodes only the joint
  // greedy plan is made, so planning stays linear.
  const int32_t nodes = s.graph.num_nodes();
  absl::StatusOr<Candidate> best = plan_with(s, PlanVariant{});
  const bool nothing_to_do = best.ok() && best->rep.decisions.empty();
  using V = PlanVariant;
  constexpr AutoActions kJ = AutoActions::kJoint;
  std::vector<PlanVariant> variants = {
      V{kJ, 0.5},       V{kJ, 0.25},           V{kJ, 0.0},
      V{kJ, 1.0, true}, V{kJ, 0.5, true},      V{kJ, 0.25, true},
      V{kJ, 0.0, true}, V{AutoActions::kSwap}, V{AutoActions::kRecompute}};
  const size_t fixed = variants.size();
  PlanVariant best_variant;
  for (size_t i = 0; i < variants.size(); ++i) {
    const PlanVariant v = variants[i];
    if (nothing_to_do || nodes > options.joint_compare_nodes) break;
    // The last fixed variant is never pruned: whether the jittered search
    // follows depends on its plan (Note [Pruned candidates]).
    const double bar =
        best.ok() && best->rep.fits && i + 1 != fixed ? best->rep.step_time_after_s : kNoBar;
    absl::StatusOr<Candidate> p = plan_with(s, v, bar);
    if (!p.ok()) continue;
    const bool better_fit = !best.ok() || (p->rep.fits && !best->rep.fits);
    const bool faster = best.ok() && p->rep.fits == best->rep.fits &&
                        p->rep.step_time_after_s < best->rep.step_time_after_s;
    if (better_fit || faster) {
      best = std::move(p);
      best_variant = v;
    }
    // Then the best of the fixed variants again with its greedy's ties
    // broken at random (Note [Jittered greedy]).
    if (i + 1 == fixed && nodes <= options.jitter_nodes) {
      for (uint64_t seed = 1; seed <= static_cast<uint64_t>(config.auto_search_plans); ++seed) {
        PlanVariant j = best_variant;
        j.jitter_seed = seed;
        variants.push_back(j);
      }
    }
  }
  if (!best.ok()) return best.status();
  if (!nothing_to_do && nodes <= options.jitter_nodes) refine(s, best_variant, *best);
  return PlannedStep{std::move(best->graph), std::move(best->rep), std::move(best->layout)};
}

// Note [Least workspace fallback]: only with LmsConfig::kernel_choice other
// than "default" (the results then round as on the lean kernels, not as
// without LMS on the default ones). A convolution's fastest kernel may need a
// workspace larger than its inputs and outputs; at a tight budget that
// workspace alone can set the working-set limit or keep the layout from
// fitting. When the plan with the fast kernels fails (no plan, or a layout
// that does not fit), and PlanningFacts::least_workspace_bytes says some
// nodes have a kernel with a smaller workspace, plan once more with those
// nodes set to workspace = "least" (lms/types.h; vDNN_dyn's memory-optimal
// algorithms, Rhu et al. 2016) and keep that plan if it fits where the
// first did not.
//
// With auto and joint actions and the lean kernels' times known
// (PlanningFacts::least_node_time_s, measured by the Device overload), the
// lean plan is made even when the fast one fits, and kept when it is
// predicted faster: the memory the lean kernels free can save more
// recomputation or copying than their slower kernels cost. That makes joint
// never slower than a recompute-only or swap-only rewrite that had to fall
// back. Without those times (the roofline knows no kernel choice) the
// lean kernels are used only to fit.
bool tight(const absl::StatusOr<PlannedStep>& r) {
  if (!r.ok()) return absl::IsResourceExhausted(r.status());
  return r->rep.enabled && !r->rep.fits && r->rep.fit_unknown_reason.empty();
}

bool joint(const LmsConfig& config) {
  return config.enabled && config.policy == SwapPolicy::kAuto &&
         config.auto_actions == AutoActions::kJoint;
}

// `graph` with the nodes `ids` set to workspace = "least": the attribute,
// the workspace bytes and, where measured, the time of that kernel.
struct LeanGraph {
  Graph graph;
  PassInputs in;
  std::vector<std::string> names;  // of the switched nodes
};

LeanGraph with_least_workspace(const Graph& graph, const PassInputs& in,
                               const std::vector<NodeId>& ids) {
  LeanGraph lean{graph, in, {}};
  std::vector<uint64_t>& ws = *lean.in.facts.workspace_bytes;
  const std::vector<uint64_t>& least = *in.facts.least_workspace_bytes;
  const std::vector<double>& least_time = in.facts.least_node_time_s;
  for (NodeId id : ids) {
    if (ws.size() <= static_cast<size_t>(id)) ws.resize(id + 1, 0);
    ws[id] = least[id];
    lean.graph.mutable_node(id).attrs[std::string(kWorkspaceAttr)] = std::string(kWorkspaceLeast);
    lean.names.push_back(graph.node(id).name);
    if (id < static_cast<NodeId>(least_time.size()) && least_time[id] >= 0) {
      std::vector<double>& t = lean.in.facts.node_time_s;
      if (t.size() <= static_cast<size_t>(id)) t.resize(id + 1, -1.0);
      t[id] = least_time[id];
    }
  }
  return lean;
}

// Note [Selective least workspace]: a kernel's workspace is allocated only
// while its node runs, so a node needs its least-workspace kernel only where
// the plan leaves too little room at its own position for the fast kernel's
// larger workspace. After a plan with every such kernel wins, the nodes
// whose fast workspace would not fit at their position in that plan (its
// planned bytes there, plus the extra workspace, plus the placement's
// fragmentation gap, over the budget) are kept lean and the rest go back to
// their fast kernels; that graph is planned again (the plan may change
// where the fast workspaces take room) and kept when it fits and is not
// predicted slower. Fewer nodes then run other kernels than the graph
// without LMS, and the others keep their speed.
std::vector<NodeId> least_workspace_needed(const Graph& planned, const RewriteReport& rep,
                                           const PlanningFacts& facts,
                                           const std::vector<NodeId>& lean) {
  absl::StatusOr<std::vector<NodeId>> order = schedule(planned);
  if (!order.ok() || order->size() != rep.device_bytes_by_position.size()) return lean;
  std::vector<int32_t> position(planned.num_nodes(), -1);
  for (size_t p = 0; p < order->size(); ++p) position[(*order)[p]] = static_cast<int32_t>(p);
  const uint64_t gap = rep.arena_bytes - std::min(rep.arena_bytes, rep.arena_lower_bound_bytes);
  std::vector<NodeId> needed;
  for (NodeId id : lean) {
    const uint64_t fast = (*facts.workspace_bytes)[id];
    const uint64_t extra = fast - std::min(fast, (*facts.least_workspace_bytes)[id]);
    const int32_t p = position[id];
    if (p < 0 || rep.device_bytes_by_position[p] + extra + gap > rep.budget_bytes) {
      needed.push_back(id);
    }
  }
  return needed;
}

// The search of Note [Rewrite in four parts], before keep_result.
absl::StatusOr<PlannedStep> search(const Graph& graph, const LmsConfig& config,
                                   const PlanningFacts& facts, const RewriteOptions& options,
                                   const SearchOptions& search_options) {
  const PassInputs in{effective_config(config, facts), facts, options};
  absl::StatusOr<PlannedStep> first = rewrite_once(graph, in, search_options);
  // Whether to plan with the least-workspace kernels too, and keep the
  // faster of the two plans (joint) or the one that fits (otherwise).
  const bool compare = joint(config) && config.kernel_choice == KernelChoice::kLeastWhenFaster &&
                       !facts.least_node_time_s.empty() && first.ok() && first->rep.fits &&
                       !first->rep.decisions.empty() &&
                       graph.num_nodes() <= search_options.joint_compare_nodes;
  if (!config.enabled || config.kernel_choice == KernelChoice::kDefault ||
      !(tight(first) || compare) || !facts.least_workspace_bytes.has_value() ||
      !facts.workspace_bytes.has_value()) {
    return first;
  }
  const std::vector<uint64_t>& ws = *facts.workspace_bytes;
  const std::vector<uint64_t>& least = *facts.least_workspace_bytes;
  std::vector<NodeId> candidates;  // nodes with a kernel of a smaller workspace
  for (NodeId id = 0; id < static_cast<NodeId>(graph.num_nodes()); ++id) {
    if (id >= static_cast<NodeId>(least.size())) break;
    const uint64_t current = id < static_cast<NodeId>(ws.size()) ? ws[id] : 0;
    if (least[id] < current) candidates.push_back(id);
  }
  if (candidates.empty()) return first;
  LeanGraph lean = with_least_workspace(graph, in, candidates);
  absl::StatusOr<PlannedStep> second = rewrite_once(lean.graph, lean.in, search_options);
  if (!first.ok() && !second.ok()) {
    // Neither plans: the second attempt came closer (smaller working sets),
    // so its reason is the one to act on.
    return absl::Status(
        second.status().code(),
        absl::StrCat(second.status().message(), " (with the least-workspace kernels of ",
                     candidates.size(), " nodes; with the fast kernels: ", first.status().message(),
                     ")"));
  }
  const bool lean_wins = second.ok() && !tight(second) &&
                         (!compare || (second->rep.fits && second->rep.step_time_after_s <
                                                               first->rep.step_time_after_s));
  if (!lean_wins) return first;
  second->rep.least_workspace_nodes = lean.names;
  // Note [Selective least workspace].
  const std::vector<NodeId> needed =
      least_workspace_needed(second->graph, second->rep, facts, candidates);
  if (!needed.empty() && needed.size() < candidates.size()) {
    LeanGraph selective = with_least_workspace(graph, in, needed);
    absl::StatusOr<PlannedStep> third = rewrite_once(selective.graph, selective.in, search_options);
    if (third.ok() && !tight(third) && third->rep.fits &&
        third->rep.step_time_after_s <= second->rep.step_time_after_s) {
      third->rep.least_workspace_nodes = std::move(selective.names);
      return third;
    }
  }
  return second;
}

}  // namespace

absl::StatusOr<PlannedStep> plan(const Graph& graph, const LmsConfig& config,
                                 const PlanningFacts& facts, const RewriteOptions& options,
                                 const SearchOptions& search_options) {
  LMS_ASSIGN_OR_RETURN(PlannedStep step, search(graph, config, facts, options, search_options));
  LMS_RETURN_IF_ERROR(keep_result(step));
  return step;
}

}  // namespace lms::swap
