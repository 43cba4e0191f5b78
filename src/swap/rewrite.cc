#include "lms/rewrite.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/align.h"
#include "graph/op_registry.h"
#include "lms/status.h"
#include "lms/types.h"
#include "lms/units.h"
#include "swap/cost_model.h"
#include "swap/insert.h"
#include "swap/liveness.h"
#include "swap/placement.h"
#include "swap/planner.h"
#include "swap/reorder.h"
#include "swap/simulator.h"

namespace lms {
namespace {

struct Analysis {
  swap::Liveness live;
  std::vector<double> times;  // by position
};

swap::CostOptions cost_options(const LmsConfig& c, const RewriteOptions& o) {
  swap::CostOptions cost;
  cost.compute_flops_per_s = c.cost_model.compute_flops_per_s;
  cost.memory_bytes_per_s = c.cost_model.memory_bytes_per_s;
  cost.kernel_launch_s = c.cost_model.kernel_launch_s;
  cost.d2h_bytes_per_s = c.link.d2h_bytes_per_s;
  cost.h2d_bytes_per_s = c.link.h2d_bytes_per_s;
  cost.copy_latency_s = c.link.copy_latency_s;
  cost.link_devices = c.link_devices;
  cost.measured_node_time_s = o.node_time_s;
  cost.ranks = o.ranks;
  cost.allreduce_bytes_per_s = o.allreduce_bytes_per_s;
  return cost;
}

const std::vector<uint64_t>& workspaces(const RewriteOptions& o) {
  static const std::vector<uint64_t>* const kNone = new std::vector<uint64_t>();
  return o.workspace_bytes.has_value() ? *o.workspace_bytes : *kNone;
}

absl::StatusOr<Analysis> analyse(const Graph& g, const LmsConfig& c, const RewriteOptions& o) {
  swap::LivenessOptions lo{c.alignment_bytes, o.fetched, workspaces(o)};
  Analysis a;
  LMS_ASSIGN_OR_RETURN(a.live, swap::analyze(g, lo));
  const swap::CostOptions cost_opts = cost_options(c, o);
  LMS_RETURN_IF_ERROR(swap::check_cost_options(cost_opts));
  swap::CostModel cost(g, cost_opts);
  a.times = swap::times_by_position(cost, a.live.order);
  return a;
}

swap::TflmsOptions tflms_options(const LmsConfig& c) {
  return {c.swapout_threshold, c.swapin_ahead, c.swapin_groupby, c.sync_mode, c.min_tensor_bytes};
}

absl::StatusOr<swap::SwapPlan> rule_plan(const Graph& g, const LmsConfig& c, const Analysis& a) {
  swap::SwapPlan plan;
  switch (c.policy) {
    case SwapPolicy::kTflms:
      plan = swap::plan_tflms(a.live, tflms_options(c));
      break;
    case SwapPolicy::kVdnn:
      plan = swap::plan_vdnn(g, a.live);
      break;
    default:
      LMS_ASSIGN_OR_RETURN(plan, swap::plan_manual(g, a.live, c.tensors, tflms_options(c)));
  }
  swap::clamp_to_commit(a.live, plan);
  return plan;
}

// One plan of the joint comparison (Note [Joint planner]); the defaults are
// the plan of LmsConfig::auto_actions alone.
struct PlanVariant {
  AutoActions actions = AutoActions::kJoint;
  double link_share = 1.0;
  bool defer_release = false;
  uint64_t jitter_seed = 0;        // AutoOptions::jitter_seed; 0: none
  std::vector<bool> no_swap;       // AutoOptions::no_swap
  std::vector<bool> no_recompute;  // AutoOptions::no_recompute
  std::vector<bool> force_swap;    // AutoOptions::force_swap
};

// Plans for `usable` device bytes (the budget less what is kept free).
absl::StatusOr<swap::SwapPlan> make_plan(const Graph& g, const LmsConfig& c, const Analysis& a,
                                         uint64_t usable, const PlanVariant& v) {
  if (c.policy != SwapPolicy::kAuto) return rule_plan(g, c, a);
  if (usable == 0) {
    return absl::InvalidArgumentError(
        "lms rewrite: policy auto needs a device budget: set device_memory_limit or pass "
        "RewriteOptions::device_capacity_bytes");
  }
  swap::AutoOptions ao;
  ao.budget_bytes = usable;
  ao.fragmentation_reserve = 0;
  ao.host_limit_bytes = c.host_memory_limit;
  ao.min_tensor_bytes = c.min_tensor_bytes;
  ao.h2d_bytes_per_s = c.link.h2d_bytes_per_s / c.link_devices;  // CostOptions::link_devices
  ao.d2h_bytes_per_s = c.link.d2h_bytes_per_s / c.link_devices;
  ao.copy_latency_s = c.link.copy_latency_s;
  ao.actions = v.actions;
  ao.link_share = v.link_share;
  ao.defer_release = v.defer_release;
  ao.jitter_seed = v.jitter_seed;
  ao.no_swap = v.no_swap;
  ao.no_recompute = v.no_recompute;
  ao.force_swap = v.force_swap;
  return swap::plan_auto(&g, a.live, a.times, ao);
}

// RewriteReport::time_model: which node times the simulation used, and the
// roofline and link it used for the rest.
std::string time_model_text(const Graph& g, const LmsConfig& c, const RewriteOptions& o) {
  int64_t compute = 0, timed = 0;
  for (NodeId id = 0; id < static_cast<NodeId>(g.num_nodes()); ++id) {
    if (!has_kernel(g.node(id).op)) continue;
    ++compute;
    if (id < static_cast<NodeId>(o.node_time_s.size()) && o.node_time_s[id] >= 0) ++timed;
  }
  const std::string roofline =
      absl::StrFormat("roofline %.4g GFLOP/s, %.4g GB/s; link d2h %.4g GB/s, h2d %.4g GB/s",
                      c.cost_model.compute_flops_per_s / 1e9, c.cost_model.memory_bytes_per_s / 1e9,
                      c.link.d2h_bytes_per_s / 1e9, c.link.h2d_bytes_per_s / 1e9);
  if (timed == 0) return roofline;
  return absl::StrFormat("%d of %d compute node times given, %s", timed, compute, roofline);
}

void fill_working_set(const Graph& g, const Analysis& a, RewriteReport& rep) {
  const swap::WorkingSetLimit ws = swap::working_set_limit(a.live);
  rep.working_set_limit_bytes = ws.bytes;
  rep.working_set_node = ws.position >= 0 ? g.node(a.live.order[ws.position]).name : "";
}

void fill_before(const Graph& g, const Analysis& a, RewriteReport& rep) {
  rep.peak_bytes_before = swap::memory_profile(a.live).peak;
  rep.peak_bytes_after = rep.peak_bytes_before;
  const swap::SimResult sim = swap::simulate(g, a.live, a.times, {});
  rep.step_time_before_s = sim.step_time_s;
  rep.step_time_after_s = sim.step_time_s;
  fill_working_set(g, a, rep);
}

// Note [Honest fits]: `fits` is decided only by the step's static layout
// (Note [Step layout], swap/placement.h) computed with every fact the
// executor will have: the budget, the allocator alignment, the kernel
// workspaces and the fetch set (the Device overload supplies all of them,
// and Session::create checks them against the plan record). Session::create
// computes the same layout and holds exactly its device_bytes(): the
// persistent tensors, then the arena, allocated one after the other on an
// otherwise empty device. A call that lacks the budget or the workspaces
// cannot decide, so it reports fits = false with the reason, never a guess.
std::string missing_fact(const RewriteReport& rep, const RewriteOptions& o) {
  if (rep.budget_bytes == 0) {
    return "no device budget known: use the Device overload, set device_memory_limit or "
           "RewriteOptions::device_capacity_bytes";
  }
  if (!o.workspace_bytes.has_value()) {
    return "kernel workspaces not known: use the Device overload of lms::rewrite or pass "
           "RewriteOptions::workspace_bytes (lms::kernel_workspace_bytes)";
  }
  return "";
}

// Lays out `g`'s step (Note [Step layout]).
absl::StatusOr<std::shared_ptr<const PlannedLayout>> lay_out(const Graph& g, const LmsConfig& c,
                                                             const RewriteOptions& o,
                                                             uint64_t budget_bytes) {
  auto planned = std::make_shared<PlannedLayout>();
  LMS_ASSIGN_OR_RETURN(
      planned->layout,
      swap::layout_step(g, {c.alignment_bytes, o.fetched, workspaces(o)}, budget_bytes));
  planned->graph_fingerprint = swap::layout_fingerprint(g);
  return planned;
}

// Fills the arena figures, peak_bytes_after (the device bytes the session
// will hold), fits and fit_unknown_reason from `planned`, the layout of
// `g`'s step, and keeps it in g's plan record (PlanRecord::layout), so the
// session uses this very layout.
void take_layout(Graph& g, std::shared_ptr<const PlannedLayout> planned, const RewriteOptions& o,
                 RewriteReport& rep) {
  const swap::StepLayout& layout = planned->layout;
  rep.arena_bytes = layout.placement.arena_bytes;
  rep.arena_lower_bound_bytes = layout.placement.lower_bound_bytes;
  rep.arena_persistent_bytes = layout.step.persistent_bytes;
  rep.peak_bytes_after = layout.device_bytes();
  rep.device_bytes_by_position.resize(layout.arena_in_use.size());
  for (size_t p = 0; p < layout.arena_in_use.size(); ++p) {
    rep.device_bytes_by_position[p] = layout.step.persistent_bytes + layout.arena_in_use[p];
  }
  rep.fit_unknown_reason = missing_fact(rep, o);
  rep.fits = rep.fit_unknown_reason.empty() && rep.peak_bytes_after <= rep.budget_bytes;
  PlanRecord record = g.plan_record();
  record.layout = std::move(planned);
  g.set_plan_record(std::move(record));
}

// Lays out `g`'s step and takes that layout (take_layout).
absl::Status layout_fits(Graph& g, const LmsConfig& c, const RewriteOptions& o,
                         RewriteReport& rep) {
  LMS_ASSIGN_OR_RETURN(std::shared_ptr<const PlannedLayout> planned,
                       lay_out(g, c, o, rep.budget_bytes));
  take_layout(g, std::move(planned), o, rep);
  return absl::OkStatus();
}

// Note [Candidate memo]: the jittered and refined candidates of one
// rewrite often repeat a plan already made (on the main job's 3-D U-Net,
// 145 of 317 layouts were of a graph laid out before). Within one
// rewrite_once the source graph, its analysis, the options and the budget
// are fixed, so a plan's rewritten graph, its predicted step time and its
// layout are functions of the plan alone: they are kept by the plan's text
// (swap::to_text). A kept layout is used only when its graph fingerprint is
// the rewritten graph's, so a plan text that missed a difference costs a
// layout, never a wrong one.
struct CandidateMemo {
  absl::flat_hash_map<std::string, double> step_time_s;
  absl::flat_hash_map<std::string, std::shared_ptr<const PlannedLayout>> layout;
};

// Note [Placement-aware planning]: the auto planner counts bytes; the arena
// also holds what the placement cannot pack (under 1% without swaps, a few
// percent on heavily swapped graphs, Note [Static placement]). So swaps and
// placement are chosen together: plan for the usable budget and lay the
// result out; while persistent + arena exceeds the budget, plan again for a
// usable budget smaller by that excess (at least one alignment unit), so
// the planner swaps more where the arena is decided. After kFitAttempts / 2
// plans, try the working-set limit itself (no plan can go below it): if
// that fits, bisect between it and the last failing budget for the largest
// usable budget that fits (the fewest swaps), kFitAttempts / 2 plans more.
// Other policies are laid out once and report whether they fit.
constexpr int kFitAttempts = 16;

// The options of `rewritten`, whose recompute clones (NodeOrigin, insert.h)
// get the workspace and the measured time of the node they copy.
RewriteOptions options_after(const RewriteOptions& o,
                             const std::vector<swap::NodeOrigin>& origins) {
  RewriteOptions after = o;
  auto extend = [&](auto& by_node, auto missing) {
    for (NodeId n = 0; n < static_cast<NodeId>(origins.size()); ++n) {
      const NodeId copied = origins[n].clone_of;
      if (copied == kNoNode) continue;
      if (by_node.size() <= static_cast<size_t>(n)) by_node.resize(n + 1, missing);
      by_node[n] = copied < static_cast<NodeId>(by_node.size()) ? by_node[copied] : missing;
    }
  };
  if (after.workspace_bytes.has_value()) extend(*after.workspace_bytes, uint64_t{0});
  if (!after.node_time_s.empty()) extend(after.node_time_s, -1.0);
  return after;
}

// Note [Pruned candidates]: the search compares candidates by predicted
// step time, and on a large graph laying a candidate out costs far more
// than planning and simulating it: a layout that misses the budget runs
// the placement search (Note [Squeaky wheel], about 40 ms on the main job's
// 3-D U-Net against 4 ms for a plan), and most candidates of the jittered
// and refined search miss at first and step down. So on graphs of at least
// kPruneNodes nodes a candidate is simulated before it is laid out, and
// given up (Cancelled) when its plan is predicted no faster than `bar`, the
// best fitting candidate so far; the step-down attempts are checked the
// same way. This is a heuristic: the greedy for a smaller usable budget
// may choose other tensors and be faster than its first attempt, so a
// pruned candidate could have won. On the 72^3 U-Net the plan is the same
// with and without pruning (bench/plan_speed_bench.cc); on small graphs,
// where layouts are cheap, nothing is pruned and the plans are exactly
// those of the full search.
constexpr int32_t kPruneNodes = 256;

absl::Status plan_and_place(const Graph& graph, const LmsConfig& config,
                            const RewriteOptions& options, const Analysis& before,
                            const PlanVariant& variant, double bar, CandidateMemo& memo,
                            RewriteReport& rep, Graph& rewritten, swap::SwapPlan& plan,
                            RewriteOptions& rewritten_options,
                            std::vector<swap::NodeOrigin>& origins) {
  // One attempt: plan for `usable`, insert, lay out; true when it fits.
  auto attempt = [&](uint64_t usable, bool prune) -> absl::StatusOr<bool> {
    rep.usable_budget_bytes = usable;
    LMS_ASSIGN_OR_RETURN(plan, make_plan(graph, config, before, usable, variant));
    // Note [Candidate memo].
    const std::string key = swap::to_text(plan, graph);
    prune = prune && graph.num_nodes() >= kPruneNodes;
    auto pruned = [&](double step_time_s) { return prune && step_time_s >= bar; };
    const auto known_time = memo.step_time_s.find(key);
    if (known_time != memo.step_time_s.end() && pruned(known_time->second)) {
      return absl::CancelledError("lms rewrite: a candidate predicted no faster than the best");
    }
    rewritten = graph;
    LMS_RETURN_IF_ERROR(swap::insert_swaps(rewritten, before.live, plan, &origins));
    rewritten_options = options_after(options, origins);
    if (known_time == memo.step_time_s.end() && prune &&
        bar < std::numeric_limits<double>::infinity()) {
      LMS_ASSIGN_OR_RETURN(Analysis after, analyse(rewritten, config, rewritten_options));
      const swap::SimResult sim = swap::simulate(rewritten, after.live, after.times,
                                                 {rep.budget_bytes, /*wait_at_release=*/true});
      memo.step_time_s[key] = sim.step_time_s;
      if (pruned(sim.step_time_s)) {
        return absl::CancelledError("lms rewrite: a candidate predicted no faster than the best");
      }
    }
    std::shared_ptr<const PlannedLayout>& kept = memo.layout[key];
    if (kept == nullptr || kept->graph_fingerprint != swap::layout_fingerprint(rewritten)) {
      LMS_ASSIGN_OR_RETURN(kept, lay_out(rewritten, config, rewritten_options, rep.budget_bytes));
    }
    take_layout(rewritten, kept, rewritten_options, rep);
    return rep.fits;
  };
  uint64_t usable = rep.usable_budget_bytes;
  LMS_ASSIGN_OR_RETURN(bool fitted, attempt(usable, true));
  if (config.policy != SwapPolicy::kAuto || fitted || !rep.fit_unknown_reason.empty()) {
    return absl::OkStatus();
  }
  const uint64_t floor = std::min(usable, rep.working_set_limit_bytes);
  int plans = 1;
  // Step down by the excess: usually one more plan suffices.
  for (; plans < kFitAttempts / 2 && usable > floor; ++plans) {
    const uint64_t excess =
        std::max<uint64_t>(rep.peak_bytes_after - rep.budget_bytes, config.alignment_bytes);
    usable = std::max(usable - std::min(usable, excess), floor);
    LMS_ASSIGN_OR_RETURN(fitted, attempt(usable, true));
    if (fitted) return absl::OkStatus();
  }
  // Then the floor itself and, if it fits, bisection for the largest usable
  // budget that fits (fewer swaps), kFitAttempts / 2 plans more.
  uint64_t lo = floor, hi = usable;
  if (usable != floor) {
    ++plans;
    LMS_ASSIGN_OR_RETURN(fitted, attempt(floor, false));
  }
  if (!fitted) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "lms rewrite: no plan found whose static layout fits ", format_bytes(rep.budget_bytes),
        " (", plans, " plans, down to a usable budget of ", format_bytes(floor),
        ", the working-set limit; the last needs ", format_bytes(rep.peak_bytes_after), ": ",
        format_bytes(rep.arena_persistent_bytes), " persistent + an arena of ",
        format_bytes(rep.arena_bytes), " whose lower bound is ",
        format_bytes(rep.arena_lower_bound_bytes), "); raise the budget or lower the batch"));
  }
  Graph best_graph = rewritten;
  swap::SwapPlan best_plan = plan;
  RewriteReport best_rep = rep;
  RewriteOptions best_options = rewritten_options;
  for (int k = 0; k < kFitAttempts / 2 && hi - lo > config.alignment_bytes; ++k) {
    const uint64_t mid = lo + (hi - lo) / 2;
    LMS_ASSIGN_OR_RETURN(fitted, attempt(mid, false));
    if (fitted) {
      lo = mid;
      best_graph = rewritten;
      best_plan = plan;
      best_rep = rep;
      best_options = rewritten_options;
    } else {
      hi = mid;
    }
  }
  rewritten = std::move(best_graph);
  plan = std::move(best_plan);
  rep = std::move(best_rep);
  rewritten_options = std::move(best_options);
  return absl::OkStatus();
}

// What the graph was planned for (Graph::plan_record), checked by Session::create.
PlanRecord plan_record(const Graph& g, const LmsConfig& c, const RewriteOptions& o,
                       const RewriteReport& rep) {
  PlanRecord r;
  r.planned = true;
  r.lms_enabled = c.enabled;
  r.policy = policy_name(c.policy);
  r.capacity_bytes = align_down(o.device_capacity_bytes, std::max<uint64_t>(c.alignment_bytes, 1));
  r.budget_bytes = rep.budget_bytes;
  r.budget_from_limit = c.device_memory_limit > 0;
  r.alignment_bytes = c.alignment_bytes;
  r.fetched = o.fetched;
  if (r.fetched.empty() && g.loss() != kNoTensor) r.fetched.push_back(g.tensor(g.loss()).name);
  std::sort(r.fetched.begin(), r.fetched.end());
  r.fetched.erase(std::unique(r.fetched.begin(), r.fetched.end()), r.fetched.end());
  r.workspaces_known = o.workspace_bytes.has_value();
  r.workspace_bytes = workspaces(o);
  r.layout = g.plan_record().layout;  // layout_fits's, for `g` as it is now
  return r;
}

// arena - lower bound, in bytes and as a share of the lower bound.
std::string arena_gap_text(const RewriteReport& r) {
  const uint64_t gap = r.arena_bytes - std::min(r.arena_bytes, r.arena_lower_bound_bytes);
  if (r.arena_lower_bound_bytes == 0) return format_bytes(gap);
  return absl::StrFormat(
      "%s = %.2f%%", format_bytes(gap),
      100.0 * static_cast<double>(gap) / static_cast<double>(r.arena_lower_bound_bytes));
}

std::string fit_text(const RewriteReport& r) {
  if (!r.fit_unknown_reason.empty()) return "cannot say whether it fits: " + r.fit_unknown_reason;
  return r.fits ? "fits" : "DOES NOT FIT";
}

}  // namespace

std::string RewriteReport::summary() const {
  const std::string fused_text =
      fused.empty()
          ? std::string()
          : absl::StrFormat("  fused                %d conv + relu pairs, one kernel each\n",
                            fused.size());
  if (!enabled) {
    return absl::StrFormat(
               "lms: disabled, graph unchanged; peak %s, budget %s: %s\n"
               "  static arena         %s (lower bound %s, gap %s; persistent %s outside)\n",
               format_bytes(peak_bytes_after), format_bytes(budget_bytes), fit_text(*this),
               format_bytes(arena_bytes), format_bytes(arena_lower_bound_bytes),
               arena_gap_text(*this), format_bytes(arena_persistent_bytes)) +
           fused_text;
  }
  return absl::StrFormat(
             "lms: policy %s, %d tensors swapped, %d recomputed (%.6f s of compute)\n"
             "  device budget        %s (usable %s): %s\n"
             "  predicted peak       %s -> %s (working-set limit %s at %s)\n"
             "  swap traffic / step  %s out, %s in; pinned host %s\n"
             "  predicted step       %.6f s -> %.6f s (stall %.6f s)\n"
             "  time model           %s\n"
             "  static arena         %s (lower bound %s, gap %s; persistent %s outside)\n",
             policy == SwapPolicy::kAuto ? absl::StrCat("auto (", auto_actions_name(actions), ")")
                                         : std::string(policy_name(policy)),
             swapped.size(), recomputed.size(), recompute_s, format_bytes(budget_bytes),
             format_bytes(usable_budget_bytes), fit_text(*this), format_bytes(peak_bytes_before),
             format_bytes(peak_bytes_after), format_bytes(working_set_limit_bytes),
             working_set_node, format_bytes(bytes_out_per_step), format_bytes(bytes_in_per_step),
             format_bytes(host_bytes), step_time_before_s, step_time_after_s, stall_s, time_model,
             format_bytes(arena_bytes), format_bytes(arena_lower_bound_bytes),
             arena_gap_text(*this), format_bytes(arena_persistent_bytes)) +
         (least_workspace_nodes.empty()
              ? std::string()
              : absl::StrFormat(
                    "  least workspace      %d convolutions moved to least-workspace kernels "
                    "(kernel_choice; the plan with the default ones did not fit or was predicted "
                    "slower): results round differently from a run on the default kernels, and "
                    "equal a run without LMS on these: %s\n",
                    least_workspace_nodes.size(), absl::StrJoin(least_workspace_nodes, ", "))) +
         (weight_gradients_first.empty()
              ? std::string()
              : absl::StrFormat("  weights first        %d weight gradients run before their "
                                "data gradient (frees the convolution's input sooner)\n",
                                weight_gradients_first.size())) +
         fused_text;
}

std::string RewriteReport::decisions_text() const {
  std::string out;
  for (const TensorDecision& d : decisions) {
    absl::StrAppendFormat(&out, "  %-9s %s  %s x%d  %.6f s\n", decision_action_name(d.action),
                          d.tensor, format_bytes(d.bytes), d.restores, d.seconds);
  }
  return out;
}

namespace {

// The tensors a plan swaps or recomputes, with their predicted costs.
void fill_decisions(const Graph& graph, const LmsConfig& c, const swap::SwapPlan& plan,
                    const std::vector<swap::NodeOrigin>& origins,
                    const std::vector<double>& times_by_node, RewriteReport& rep) {
  const size_t first = rep.decisions.size();  // the decision of plan item i is first + i
  for (const swap::SwapPlan::Item& item : plan.items) {
    const Tensor& t = graph.tensor(item.tensor);
    TensorDecision d;
    d.tensor = t.name;
    d.bytes = t.bytes();
    d.restores = static_cast<int>(item.swap_ins.size());
    const double bytes = static_cast<double>(d.bytes);
    if (swap::copies(item)) {
      d.action = DecisionAction::kSwap;
      const double d2h = c.link.d2h_bytes_per_s / c.link_devices;
      const double h2d = c.link.h2d_bytes_per_s / c.link_devices;
      d.seconds = c.link.copy_latency_s + bytes / d2h;
      for (const auto& in : item.swap_ins) {
        if (!in.recompute) d.seconds += c.link.copy_latency_s + bytes / h2d;
      }
      rep.swapped.push_back(t.name);
    } else {
      d.action = DecisionAction::kRecompute;
      rep.recomputed.push_back(t.name);
    }
    rep.decisions.push_back(std::move(d));
  }
  // Each clone's time goes to the decision of the restore it serves.
  for (NodeId n = graph.num_nodes(); n < static_cast<NodeId>(origins.size()); ++n) {
    if (origins[n].item < 0) continue;
    const double seconds = n < static_cast<NodeId>(times_by_node.size()) ? times_by_node[n] : 0;
    rep.recompute_s += seconds;
    rep.decisions[first + static_cast<size_t>(origins[n].item)].seconds += seconds;
  }
}

struct Planned {
  Graph graph;
  RewriteReport rep;
};

// Plans with `actions`, inserts the plan into a copy of `graph` and predicts
// the step; `rep` holds what was filled before planning. Cancelled where the
// candidate is predicted no faster than `bar` (Note [Pruned candidates]).
absl::StatusOr<Planned> plan_with(const Graph& graph, const LmsConfig& config,
                                  const RewriteOptions& options, const Analysis& before,
                                  RewriteReport rep, const PlanVariant& variant,
                                  CandidateMemo& memo,
                                  double bar = std::numeric_limits<double>::infinity()) {
  rep.actions = variant.actions;
  Graph rewritten = graph;
  swap::SwapPlan plan;
  RewriteOptions rewritten_options = options;
  std::vector<swap::NodeOrigin> origins;
  LMS_RETURN_IF_ERROR(plan_and_place(graph, config, options, before, variant, bar, memo, rep,
                                     rewritten, plan, rewritten_options, origins));
  const swap::PlanTraffic traffic = swap::plan_traffic(graph, plan, config.alignment_bytes);
  if (config.host_memory_limit > 0 && traffic.host_bytes > config.host_memory_limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "lms rewrite: the plan holds ", format_bytes(traffic.host_bytes),
        " of pinned host memory, over host_memory_limit ", format_bytes(config.host_memory_limit),
        " (with the Device overload, at most the device's pinned host pool); raise it (or the "
        "device's host pool) or swap fewer tensors (min_tensor_bytes, swapout_threshold)"));
  }
  rep.plan_text = swap::to_text(plan, graph);
  rep.bytes_out_per_step = traffic.bytes_out;
  rep.bytes_in_per_step = traffic.bytes_in;
  rep.host_bytes = traffic.host_bytes;
  LMS_ASSIGN_OR_RETURN(Analysis after, analyse(rewritten, config, rewritten_options));
  std::vector<double> times_by_node(rewritten.num_nodes(), 0);
  for (size_t p = 0; p < after.live.order.size(); ++p)
    times_by_node[after.live.order[p]] = after.times[p];
  fill_decisions(graph, config, plan, origins, times_by_node, rep);
  const swap::SimResult sim = swap::simulate(rewritten, after.live, after.times,
                                             {rep.budget_bytes, /*wait_at_release=*/true});
  rep.step_time_after_s = sim.step_time_s;
  rep.stall_s = sim.stall_s;
  rewritten.set_plan_record(plan_record(rewritten, config, rewritten_options, rep));
  return Planned{std::move(rewritten), std::move(rep)};
}

// Past this many nodes auto with joint actions makes only the joint greedy
// plan (Note [Joint planner]) and does not plan with the least-workspace
// kernels unless it must (Note [Least workspace fallback]).
constexpr int32_t kJointCompareNodes = 20000;
// After the fixed plans of the joint comparison, LmsConfig::auto_search_plans
// jittered greedy plans for graphs of at most kJitterNodes nodes.
constexpr int32_t kJitterNodes = 2000;

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
// rest around that. The fastest predicted of these that fits replaces the
// plan when it is faster, its constraints are kept, and the search goes on
// from it, until no neighbour is faster or LmsConfig::auto_refine_plans
// plans (and kRefineNodePlans / nodes) have been made. On the tests' models
// the larger budget matters: with 128 plans the swapped-first moves made
// some plans slower than the search without them, by using the budget up on
// longer rounds; with 512 none was.
// The local search makes at most this many plans times nodes: one plan
// costs about 15 us per node, so about 2 s of planning on any graph.
constexpr int32_t kRefineNodePlans = 131072;

void refine(const Graph& graph, const LmsConfig& config, const RewriteOptions& options,
            const Analysis& before, const RewriteReport& rep, PlanVariant variant,
            CandidateMemo& memo, Planned& best) {
  int32_t left = std::min<int32_t>(
      config.auto_refine_plans,
      std::max<int32_t>(1, kRefineNodePlans / std::max<int32_t>(1, graph.num_nodes())));
  const size_t tensors = graph.num_tensors();
  if (variant.no_swap.empty()) variant.no_swap.assign(tensors, false);
  if (variant.no_recompute.empty()) variant.no_recompute.assign(tensors, false);
  if (variant.force_swap.empty()) variant.force_swap.assign(tensors, false);
  while (left > 0 && best.rep.fits) {
    std::optional<Planned> round_best;
    PlanVariant round_variant;
    auto consider = [&](PlanVariant v) {
      --left;
      const double bar =
          round_best ? round_best->rep.step_time_after_s : best.rep.step_time_after_s;
      absl::StatusOr<Planned> p = plan_with(graph, config, options, before, rep, v, memo, bar);
      if (!p.ok() || !p->rep.fits) return;
      if (p->rep.step_time_after_s < bar) {
        round_best = std::move(*p);
        round_variant = std::move(v);
      }
    };
    for (const TensorDecision& d : best.rep.decisions) {
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
    if (!round_best) return;
    best = std::move(*round_best);
    variant = std::move(round_variant);
  }
}

absl::StatusOr<RewriteReport> rewrite_once(Graph& graph, const LmsConfig& config,
                                           const RewriteOptions& options) {
  LMS_RETURN_IF_ERROR(verify(graph));
  LMS_ASSIGN_OR_RETURN(Analysis before, analyse(graph, config, options));
  RewriteReport rep;
  rep.policy = config.policy;
  rep.enabled = config.enabled;
  // Note [Capacity units] (src/runtime/capacity.h): the budget in whole
  // allocator units, as the device's allocator holds its capacity.
  rep.budget_bytes = align_down(
      config.device_memory_limit ? config.device_memory_limit : options.device_capacity_bytes,
      std::max<uint64_t>(config.alignment_bytes, 1));
  rep.usable_budget_bytes = swap::usable_budget(rep.budget_bytes, config.fragmentation_reserve);
  fill_before(graph, before, rep);
  rep.time_model = time_model_text(graph, config, options);
  if (!config.enabled) {
    LMS_RETURN_IF_ERROR(layout_fits(graph, config, options, rep));
    graph.set_plan_record(plan_record(graph, config, options, rep));
    return rep;
  }
  // Note [Weight gradients first] (swap/reorder.h): auto plans the graph with
  // each weights gradient that frees its input run before the data gradient.
  Graph ordered;
  bool reordered = false;
  if (config.policy == SwapPolicy::kAuto) {
    LMS_ASSIGN_OR_RETURN(std::vector<NodeId> order,
                         swap::weight_gradients_first_order(graph, options.fetched));
    std::optional<Analysis> reordered_analysis;
    if (!order.empty()) {
      Graph candidate = graph;
      LMS_RETURN_IF_ERROR(candidate.set_order(order));
      LMS_ASSIGN_OR_RETURN(reordered_analysis, analyse(candidate, config, options));
      // The reorder frees convolution inputs sooner, but a weights kernel's
      // workspace may then be live beside more, or the step may pack worse:
      // keep it only where the unswapped step's layout is not larger.
      const swap::LivenessOptions lo{config.alignment_bytes, options.fetched, workspaces(options)};
      LMS_ASSIGN_OR_RETURN(swap::StepLayout as_is, swap::layout_step(graph, lo, rep.budget_bytes));
      LMS_ASSIGN_OR_RETURN(swap::StepLayout moved,
                           swap::layout_step(candidate, lo, rep.budget_bytes));
      if (moved.device_bytes() > as_is.device_bytes()) order.clear();
    }
    if (!order.empty()) {
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
      ordered = graph;
      LMS_RETURN_IF_ERROR(ordered.set_order(std::move(order)));
      before = *std::move(reordered_analysis);
      fill_working_set(ordered, before, rep);
      reordered = true;
    }
  }
  const Graph& source = reordered ? ordered : graph;
  CandidateMemo memo;  // Note [Candidate memo]

  if (config.policy != SwapPolicy::kAuto || config.auto_actions != AutoActions::kJoint) {
    const AutoActions actions =
        config.policy == SwapPolicy::kAuto ? config.auto_actions : AutoActions::kSwap;
    LMS_ASSIGN_OR_RETURN(
        Planned p, plan_with(source, config, options, before, rep, PlanVariant{actions}, memo));
    graph = std::move(p.graph);
    return p.rep;
  }
  // Note [Joint planner]: the joint greedy plan with several link shares,
  // with and without deferred releases, and the swap-only and
  // recompute-only plans as well, then on graphs up to kJitterNodes nodes
  // the best of those with jittered greedy ties (Note [Jittered greedy]);
  // the least predicted
  // step time that fits wins (the first on a tie), so joint is never
  // predicted slower than either. Each candidate is inserted, laid out and
  // simulated, about 15 us per node; past kJointCompareNodes nodes only the
  // joint greedy plan is made, so planning stays linear.
  absl::StatusOr<Planned> best =
      plan_with(source, config, options, before, rep, PlanVariant{}, memo);
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
    if (nothing_to_do || source.num_nodes() > kJointCompareNodes) break;
    // The last fixed variant is never pruned: whether the jittered search
    // follows depends on its plan (Note [Pruned candidates]).
    const double bar = best.ok() && best->rep.fits && i + 1 != fixed
                           ? best->rep.step_time_after_s
                           : std::numeric_limits<double>::infinity();
    absl::StatusOr<Planned> p = plan_with(source, config, options, before, rep, v, memo, bar);
    if (!p.ok()) continue;
    const bool better_fit = !best.ok() || (p->rep.fits && !best->rep.fits);
    const bool faster = best.ok() && p->rep.fits == best->rep.fits &&
                        p->rep.step_time_after_s < best->rep.step_time_after_s;
    if (better_fit || faster) {
      best = std::move(p);
      best_variant = v;
    }
    // Then the best of the fixed variants again with its greedy's ties
    // broken at random (Note [Jittered greedy] in planner_auto.cc).
    if (i + 1 == fixed && source.num_nodes() <= kJitterNodes) {
      for (uint64_t seed = 1; seed <= static_cast<uint64_t>(config.auto_search_plans); ++seed) {
        PlanVariant j = best_variant;
        j.jitter_seed = seed;
        variants.push_back(j);
      }
    }
  }
  if (!best.ok()) return best.status();
  if (!nothing_to_do && source.num_nodes() <= kJitterNodes) {
    refine(source, config, options, before, rep, best_variant, memo, *best);
  }
  graph = std::move(best->graph);
  return best->rep;
}

// Note [Least workspace fallback]: only with LmsConfig::kernel_choice other
// than "default" (the results then round as on the lean kernels, not as
// without LMS on the default ones). A convolution's fastest kernel may need a
// workspace larger than its inputs and outputs; at a tight budget that
// workspace alone can set the working-set limit or keep the layout from
// fitting. When the plan with the fast kernels fails (no plan, or a layout
// that does not fit), and RewriteOptions::least_workspace_bytes says some
// nodes have a kernel with a smaller workspace, plan once more with those
// nodes set to workspace = "least" (lms/types.h; vDNN_dyn's memory-optimal
// algorithms, Rhu et al. 2016) and keep that plan if it fits where the
// first did not.
//
// With auto and joint actions and the lean kernels' times known
// (RewriteOptions::least_node_time_s, measured by the Device overload), the
// lean plan is made even when the fast one fits, and kept when it is
// predicted faster: the memory the lean kernels free can save more
// recomputation or copying than their slower kernels cost. That makes joint
// never slower than a recompute-only or swap-only rewrite that had to fall
// back. Without those times (the roofline knows no kernel choice) the
// lean kernels are used only to fit, so results stay bit-identical to the
// graph without LMS wherever the fast kernels fit.
bool tight(const absl::StatusOr<RewriteReport>& r) {
  if (!r.ok()) return absl::IsResourceExhausted(r.status());
  return r->enabled && !r->fits && r->fit_unknown_reason.empty();
}

bool joint(const LmsConfig& config) {
  return config.enabled && config.policy == SwapPolicy::kAuto &&
         config.auto_actions == AutoActions::kJoint;
}

// `graph` with the nodes `ids` set to workspace = "least": the attribute,
// the workspace bytes and, where measured, the time of that kernel.
struct LeanGraph {
  Graph graph;
  RewriteOptions options;
  std::vector<std::string> names;  // of the switched nodes
};

LeanGraph with_least_workspace(const Graph& graph, const RewriteOptions& options,
                               const std::vector<NodeId>& ids) {
  LeanGraph lean{graph, options, {}};
  std::vector<uint64_t>& ws = *lean.options.workspace_bytes;
  const std::vector<uint64_t>& least = *options.least_workspace_bytes;
  for (NodeId id : ids) {
    if (ws.size() <= static_cast<size_t>(id)) ws.resize(id + 1, 0);
    ws[id] = least[id];
    lean.graph.mutable_node(id).attrs[std::string(kWorkspaceAttr)] = std::string(kWorkspaceLeast);
    lean.names.push_back(graph.node(id).name);
    if (id < static_cast<NodeId>(options.least_node_time_s.size()) &&
        options.least_node_time_s[id] >= 0) {
      std::vector<double>& t = lean.options.node_time_s;
      if (t.size() <= static_cast<size_t>(id)) t.resize(id + 1, -1.0);
      t[id] = options.least_node_time_s[id];
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
                                           const RewriteOptions& options,
                                           const std::vector<NodeId>& lean) {
  absl::StatusOr<std::vector<NodeId>> order = schedule(planned);
  if (!order.ok() || order->size() != rep.device_bytes_by_position.size()) return lean;
  std::vector<int32_t> position(planned.num_nodes(), -1);
  for (size_t p = 0; p < order->size(); ++p) position[(*order)[p]] = static_cast<int32_t>(p);
  const uint64_t gap = rep.arena_bytes - std::min(rep.arena_bytes, rep.arena_lower_bound_bytes);
  std::vector<NodeId> needed;
  for (NodeId id : lean) {
    const uint64_t fast = (*options.workspace_bytes)[id];
    const uint64_t extra = fast - std::min(fast, (*options.least_workspace_bytes)[id]);
    const int32_t p = position[id];
    if (p < 0 || rep.device_bytes_by_position[p] + extra + gap > rep.budget_bytes) {
      needed.push_back(id);
    }
  }
  return needed;
}

}  // namespace

absl::StatusOr<RewriteReport> rewrite(Graph& graph, const LmsConfig& config,
                                      const RewriteOptions& options) {
  Graph fast = graph;
  absl::StatusOr<RewriteReport> first = rewrite_once(fast, config, options);
  // Whether to plan with the least-workspace kernels too, and keep the
  // faster of the two plans (joint) or the one that fits (otherwise).
  const bool compare = joint(config) && config.kernel_choice == KernelChoice::kLeastWhenFaster &&
                       !options.least_node_time_s.empty() && first.ok() && first->fits &&
                       !first->decisions.empty() && graph.num_nodes() <= kJointCompareNodes;
  if (!config.enabled || config.kernel_choice == KernelChoice::kDefault ||
      !(tight(first) || compare) || !options.least_workspace_bytes.has_value() ||
      !options.workspace_bytes.has_value()) {
    if (first.ok()) graph = std::move(fast);
    return first;
  }
  const std::vector<uint64_t>& ws = *options.workspace_bytes;
  const std::vector<uint64_t>& least = *options.least_workspace_bytes;
  std::vector<NodeId> candidates;  // nodes with a kernel of a smaller workspace
  for (NodeId id = 0; id < static_cast<NodeId>(graph.num_nodes()); ++id) {
    if (id >= static_cast<NodeId>(least.size())) break;
    const uint64_t current = id < static_cast<NodeId>(ws.size()) ? ws[id] : 0;
    if (least[id] < current) candidates.push_back(id);
  }
  if (candidates.empty()) {
    if (first.ok()) graph = std::move(fast);
    return first;
  }
  LeanGraph lean = with_least_workspace(graph, options, candidates);
  absl::StatusOr<RewriteReport> second = rewrite_once(lean.graph, config, lean.options);
  if (!first.ok() && !second.ok()) {
    // Neither plans: the second attempt came closer (smaller working sets),
    // so its reason is the one to act on.
    return absl::Status(
        second.status().code(),
        absl::StrCat(second.status().message(), " (with the least-workspace kernels of ",
                     candidates.size(), " nodes; with the fast kernels: ", first.status().message(),
                     ")"));
  }
  const bool lean_wins =
      second.ok() && !tight(second) &&
      (!compare || (second->fits && second->step_time_after_s < first->step_time_after_s));
  if (!lean_wins) {
    if (first.ok()) graph = std::move(fast);
    return first;
  }
  second->least_workspace_nodes = lean.names;
  // Note [Selective least workspace].
  const std::vector<NodeId> needed =
      least_workspace_needed(lean.graph, *second, options, candidates);
  if (!needed.empty() && needed.size() < candidates.size()) {
    LeanGraph selective = with_least_workspace(graph, options, needed);
    absl::StatusOr<RewriteReport> third = rewrite_once(selective.graph, config, selective.options);
    if (third.ok() && !tight(third) && third->fits &&
        third->step_time_after_s <= second->step_time_after_s) {
      third->least_workspace_nodes = std::move(selective.names);
      graph = std::move(selective.graph);
      return third;
    }
  }
  graph = std::move(lean.graph);
  return second;
}

absl::StatusOr<RewriteReport> rewrite(Graph& graph, const LmsConfig& config) {
  return rewrite(graph, config, RewriteOptions{});
}

}  // namespace lms
