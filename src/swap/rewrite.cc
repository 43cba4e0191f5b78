#include "lms/rewrite.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lms/status.h"
#include "lms/units.h"
#include "swap/cost_model.h"
#include "swap/insert.h"
#include "swap/liveness.h"
#include "swap/placement.h"
#include "swap/planner.h"
#include "swap/replay.h"
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
  cost.measured_node_time_s = o.node_time_s;
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
  swap::CostModel cost(g, cost_options(c, o));
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

absl::StatusOr<swap::SwapPlan> make_plan(const Graph& g, const LmsConfig& c, const Analysis& a,
                                         uint64_t budget, double reserve) {
  if (c.policy != SwapPolicy::kAuto) return rule_plan(g, c, a);
  if (budget == 0) {
    return absl::InvalidArgumentError(
        "lms rewrite: policy auto needs a device budget: set device_memory_limit or pass "
        "RewriteOptions::device_capacity_bytes");
  }
  swap::AutoOptions ao;
  ao.budget_bytes = budget;
  ao.fragmentation_reserve = reserve;
  ao.host_limit_bytes = c.host_memory_limit;
  ao.min_tensor_bytes = c.min_tensor_bytes;
  ao.h2d_bytes_per_s = c.link.h2d_bytes_per_s;
  ao.copy_latency_s = c.link.copy_latency_s;
  return swap::plan_auto(&g, a.live, a.times, ao);
}

void fill_before(const Graph& g, const Analysis& a, RewriteReport& rep) {
  rep.peak_bytes_before = swap::memory_profile(a.live).peak;
  rep.peak_bytes_after = rep.peak_bytes_before;
  const swap::SimResult sim = swap::simulate(g, a.live, a.times, {});
  rep.step_time_before_s = sim.step_time_s;
  rep.step_time_after_s = sim.step_time_s;
  const swap::WorkingSetLimit ws = swap::working_set_limit(a.live);
  rep.working_set_limit_bytes = ws.bytes;
  if (ws.position >= 0) rep.working_set_node = g.node(a.live.order[ws.position]).name;
}

// Note [Honest fits]: `fits` is decided only by an exact replay of the first
// step's allocations with every fact the executor will have: the budget, the
// allocator alignment, the kernel workspaces and the fetch set (the Device
// overload supplies all of them, and Session::create checks them against the
// plan record). A call that lacks the budget or the workspaces cannot decide,
// so it reports fits = false with the reason, never a guess.
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

// Replays `g`'s allocations on the BFC allocator at the budget
// (swap/replay.h). Returns whether the replay fitted (false without a
// budget) and sets rep.peak_bytes_after to the exact peak when it did; a
// failed replay (fragmentation) counts as not fitting, its message in
// `failure`.
absl::StatusOr<bool> replay_fits(const Graph& g, const LmsConfig& c, const RewriteOptions& o,
                                 RewriteReport& rep, std::string* failure) {
  if (rep.budget_bytes == 0) return false;
  auto replay =
      swap::replay_step(g, {rep.budget_bytes, c.alignment_bytes, workspaces(o), o.fetched});
  if (!replay.ok() && !absl::IsResourceExhausted(replay.status())) return replay.status();
  if (!replay.ok()) {
    *failure = std::string(replay.status().message());
    return false;
  }
  rep.peak_bytes_after = replay->peak_bytes;
  return replay->peak_bytes <= rep.budget_bytes;
}

// Sets rep.fits and rep.fit_unknown_reason from a replay result (Note [Honest fits]).
void decide_fit(bool replayed_fit, const RewriteOptions& o, RewriteReport& rep) {
  rep.fit_unknown_reason = missing_fact(rep, o);
  rep.fits = replayed_fit && rep.fit_unknown_reason.empty();
}

// Note [Fitting with fragmentation]: the planner's profile counts bytes, the
// allocator also loses space to fragmentation. The auto policy plans for
// budget * (1 - fragmentation_reserve), replays the result exactly, and while
// the replay does not fit, plans again for a smaller share of the budget
// (kFitShrink of the budget less each time, kFitAttempts times at most).
// Other policies are replayed once and report whether they fit.
constexpr int kFitAttempts = 8;
constexpr double kFitShrink = 0.03;

absl::Status plan_and_replay(const Graph& graph, const LmsConfig& config,
                             const RewriteOptions& options, const Analysis& before,
                             RewriteReport& rep, Graph& rewritten, swap::SwapPlan& plan) {
  // The reserve never grows past the point where the usable budget drops
  // below the working-set limit: no plan could meet that.
  const double max_reserve =
      rep.budget_bytes > 0
          ? 1.0 - static_cast<double>(rep.working_set_limit_bytes) / rep.budget_bytes
          : 0.0;
  double reserve = config.fragmentation_reserve;
  std::string failure;
  for (int attempt = 0;; ++attempt) {
    LMS_ASSIGN_OR_RETURN(plan, make_plan(graph, config, before, rep.budget_bytes, reserve));
    rewritten = graph;
    LMS_RETURN_IF_ERROR(swap::insert_swaps(rewritten, before.live, plan));
    LMS_ASSIGN_OR_RETURN(Analysis after, analyse(rewritten, config, options));
    rep.peak_bytes_after = swap::memory_profile(after.live).peak;
    LMS_ASSIGN_OR_RETURN(bool fitted, replay_fits(rewritten, config, options, rep, &failure));
    decide_fit(fitted, options, rep);
    if (config.policy != SwapPolicy::kAuto || fitted) return absl::OkStatus();
    if (attempt + 1 == kFitAttempts || reserve >= max_reserve) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "lms rewrite: the plan fits ", format_bytes(rep.budget_bytes),
          " in bytes but not in the allocator once fragmentation is counted (replayed ",
          attempt + 1, " plans, down to ", format_bytes(rep.usable_budget_bytes),
          " planned; last replay: ", failure, "); raise the budget or lower the batch"));
    }
    reserve = std::min(reserve + kFitShrink, max_reserve);
    rep.usable_budget_bytes = swap::usable_budget(rep.budget_bytes, reserve);
  }
}

// The static placement figures of the final graph's step (Note [Static
// placement], swap/placement.h), with per-node workspaces when known.
absl::Status fill_arena(const Graph& g, const swap::Liveness& live, const RewriteOptions& o,
                        RewriteReport& rep) {
  LMS_ASSIGN_OR_RETURN(swap::StepBuffers step, swap::step_buffers(g, live, workspaces(o)));
  LMS_ASSIGN_OR_RETURN(
      swap::Placement placement,
      swap::place_buffers(step.buffers, {.alignment_bytes = live.alignment_bytes}));
  rep.arena_bytes = placement.arena_bytes;
  rep.arena_lower_bound_bytes = placement.lower_bound_bytes;
  rep.arena_persistent_bytes = step.persistent_bytes;
  return absl::OkStatus();
}

// What the graph was planned for (Graph::plan_record), checked by Session::create.
PlanRecord plan_record(const Graph& g, const LmsConfig& c, const RewriteOptions& o,
                       const RewriteReport& rep) {
  PlanRecord r;
  r.planned = true;
  r.lms_enabled = c.enabled;
  r.policy = policy_name(c.policy);
  r.capacity_bytes = o.device_capacity_bytes;
  r.budget_bytes = rep.budget_bytes;
  r.budget_from_limit = c.device_memory_limit > 0;
  r.alignment_bytes = c.alignment_bytes;
  r.fetched = o.fetched;
  if (r.fetched.empty() && g.loss() != kNoTensor) r.fetched.push_back(g.tensor(g.loss()).name);
  std::sort(r.fetched.begin(), r.fetched.end());
  r.fetched.erase(std::unique(r.fetched.begin(), r.fetched.end()), r.fetched.end());
  r.workspaces_known = o.workspace_bytes.has_value();
  r.workspace_bytes = workspaces(o);
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
  if (!enabled) {
    return absl::StrFormat(
        "lms: disabled, graph unchanged; peak %s, budget %s: %s\n"
        "  static arena         %s (lower bound %s, gap %s; persistent %s outside)\n",
        format_bytes(peak_bytes_after), format_bytes(budget_bytes), fit_text(*this),
        format_bytes(arena_bytes), format_bytes(arena_lower_bound_bytes), arena_gap_text(*this),
        format_bytes(arena_persistent_bytes));
  }
  return absl::StrFormat(
      "lms: policy %s, %d tensors swapped\n"
      "  device budget        %s (usable %s): %s\n"
      "  predicted peak       %s -> %s (working-set limit %s at %s)\n"
      "  swap traffic / step  %s out, %s in; pinned host %s\n"
      "  predicted step       %.6f s -> %.6f s (stall %.6f s)\n"
      "  static arena         %s (lower bound %s, gap %s; persistent %s outside)\n",
      policy_name(policy), swapped.size(), format_bytes(budget_bytes),
      format_bytes(usable_budget_bytes), fit_text(*this), format_bytes(peak_bytes_before),
      format_bytes(peak_bytes_after), format_bytes(working_set_limit_bytes), working_set_node,
      format_bytes(bytes_out_per_step), format_bytes(bytes_in_per_step), format_bytes(host_bytes),
      step_time_before_s, step_time_after_s, stall_s, format_bytes(arena_bytes),
      format_bytes(arena_lower_bound_bytes), arena_gap_text(*this),
      format_bytes(arena_persistent_bytes));
}

absl::StatusOr<RewriteReport> rewrite(Graph& graph, const LmsConfig& config,
                                      const RewriteOptions& options) {
  LMS_RETURN_IF_ERROR(verify(graph));
  LMS_ASSIGN_OR_RETURN(Analysis before, analyse(graph, config, options));
  RewriteReport rep;
  rep.policy = config.policy;
  rep.enabled = config.enabled;
  rep.budget_bytes =
      config.device_memory_limit ? config.device_memory_limit : options.device_capacity_bytes;
  rep.usable_budget_bytes = swap::usable_budget(rep.budget_bytes, config.fragmentation_reserve);
  fill_before(graph, before, rep);
  if (!config.enabled) {
    std::string failure;
    LMS_ASSIGN_OR_RETURN(bool fitted, replay_fits(graph, config, options, rep, &failure));
    decide_fit(fitted, options, rep);
    LMS_RETURN_IF_ERROR(fill_arena(graph, before.live, options, rep));
    graph.set_plan_record(plan_record(graph, config, options, rep));
    return rep;
  }

  Graph rewritten = graph;
  swap::SwapPlan plan;
  LMS_RETURN_IF_ERROR(plan_and_replay(graph, config, options, before, rep, rewritten, plan));
  const swap::PlanTraffic traffic = swap::plan_traffic(graph, plan);
  if (config.host_memory_limit > 0 && traffic.host_bytes > config.host_memory_limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "lms rewrite: the plan holds ", format_bytes(traffic.host_bytes),
        " of pinned host memory, over host_memory_limit ", format_bytes(config.host_memory_limit),
        "; raise host_memory_limit or swap fewer tensors (min_tensor_bytes, swapout_threshold)"));
  }
  rep.plan_text = swap::to_text(plan, graph);
  for (const auto& item : plan.items) rep.swapped.push_back(graph.tensor(item.tensor).name);
  rep.bytes_out_per_step = traffic.bytes_out;
  rep.bytes_in_per_step = traffic.bytes_in;
  rep.host_bytes = traffic.host_bytes;
  LMS_ASSIGN_OR_RETURN(Analysis after, analyse(rewritten, config, options));
  LMS_RETURN_IF_ERROR(fill_arena(rewritten, after.live, options, rep));
  const swap::SimResult sim = swap::simulate(rewritten, after.live, after.times,
                                             {rep.budget_bytes, /*wait_at_release=*/true});
  rep.step_time_after_s = sim.step_time_s;
  rep.stall_s = sim.stall_s;
  rewritten.set_plan_record(plan_record(graph, config, options, rep));
  graph = std::move(rewritten);
  return rep;
}

absl::StatusOr<RewriteReport> rewrite(Graph& graph, const LmsConfig& config) {
  return rewrite(graph, config, RewriteOptions{});
}

}  // namespace lms
