#include "swap/pass.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/align.h"
#include "graph/op_registry.h"
#include "lms/status.h"
#include "lms/units.h"
#include "swap/cost_model.h"
#include "swap/planner.h"

namespace lms::swap {
namespace {

CostOptions cost_options(const PassInputs& in) {
  const LmsConfig& c = in.config;
  CostOptions cost;
  cost.compute_flops_per_s = c.cost_model.compute_flops_per_s;
  cost.memory_bytes_per_s = c.cost_model.memory_bytes_per_s;
  cost.kernel_launch_s = c.cost_model.kernel_launch_s;
  cost.d2h_bytes_per_s = c.link.d2h_bytes_per_s;
  cost.h2d_bytes_per_s = c.link.h2d_bytes_per_s;
  cost.copy_latency_s = c.link.copy_latency_s;
  cost.link_devices = c.link_devices;
  cost.measured_node_time_s = in.facts.node_time_s;
  cost.ranks = in.facts.ranks;
  cost.allreduce_bytes_per_s = in.facts.allreduce_bytes_per_s;
  return cost;
}

// SimOptions::input_upload_s: each fed graph input (not a parameter) over
// the host link, one copy each.
double input_upload_s(const Graph& graph, const Liveness& live, const PassInputs& in) {
  const CostModel cost(graph, cost_options(in));
  double s = 0;
  for (TensorId t = 0; t < static_cast<TensorId>(live.tensors.size()); ++t) {
    const TensorLife& life = live.tensors[t];
    if (life.input && life.on_device && !life.persistent)
      s += cost.h2d_time_s(graph.tensor(t).bytes());
  }
  return s;
}

TflmsOptions tflms_options(const LmsConfig& c) {
  return {c.swapout_threshold, c.swapin_ahead, c.swapin_groupby, c.sync_mode, c.min_tensor_bytes};
}

absl::StatusOr<SwapPlan> rule_plan(const Graph& g, const LmsConfig& c, const Analysis& a) {
  SwapPlan plan;
  switch (c.policy) {
    case SwapPolicy::kTflms:
      plan = plan_tflms(a.live, tflms_options(c));
      break;
    case SwapPolicy::kVdnn:
      plan = plan_vdnn(g, a.live);
      break;
    default:
      LMS_ASSIGN_OR_RETURN(plan, plan_manual(g, a.live, c.tensors, tflms_options(c)));
  }
  clamp_to_commit(a.live, plan);
  return plan;
}

// RewriteReport::time_model: which node times the simulation used, and the
// roofline and link it used for the rest.
std::string time_model_text(const Graph& g, const PassInputs& in) {
  const LmsConfig& c = in.config;
  const std::vector<double>& given = in.facts.node_time_s;
  int64_t compute = 0, timed = 0;
  for (NodeId id = 0; id < static_cast<NodeId>(g.num_nodes()); ++id) {
    if (!has_kernel(g.node(id).op)) continue;
    ++compute;
    if (id < static_cast<NodeId>(given.size()) && given[id] >= 0) ++timed;
  }
  const std::string roofline =
      absl::StrFormat("roofline %.4g GFLOP/s, %.4g GB/s; link d2h %.4g GB/s, h2d %.4g GB/s",
                      c.cost_model.compute_flops_per_s / 1e9, c.cost_model.memory_bytes_per_s / 1e9,
                      c.link.d2h_bytes_per_s / 1e9, c.link.h2d_bytes_per_s / 1e9);
  if (timed == 0) return roofline;
  return absl::StrFormat("%d of %d compute node times given, %s", timed, compute, roofline);
}

// Note [Honest fits]: `fits` is decided only by the step's static layout
// (Note [Step layout]) computed with every fact the executor will have: the
// budget, the allocator alignment, the kernel workspaces and the fetch set
// (the Device overload supplies all of them, and Session::create checks
// them against the plan record). Session::create uses the same layout and
// holds exactly its device_bytes(): the persistent tensors, then the arena,
// allocated one after the other on an otherwise empty device. A call that
// lacks the budget or the workspaces cannot decide, so it reports fits =
// false with the reason, never a guess.
std::string missing_fact(const RewriteReport& rep, const PlanningFacts& facts) {
  if (rep.budget_bytes == 0) {
    return "no device budget known: use the Device overload, set device_memory_limit or "
           "PlanningFacts::device_capacity_bytes";
  }
  if (!facts.workspace_bytes.has_value()) {
    return "kernel workspaces not known: use the Device overload of lms::rewrite or pass "
           "PlanningFacts::workspace_bytes (lms::kernel_workspace_bytes)";
  }
  return "";
}

// What the graph was planned for (Graph::plan_record), checked by
// Session::create.
PlanRecord plan_record(const Graph& g, const PassInputs& in, const RewriteReport& rep,
                       const PlannedLayout& layout) {
  const LmsConfig& c = in.config;
  PlanRecord r;
  r.planned = true;
  r.lms_enabled = c.enabled;
  r.policy = c.policy;
  r.device_kind = in.facts.device_kind;
  r.capacity_bytes =
      align_down(in.facts.device_capacity_bytes, std::max<uint64_t>(c.alignment_bytes, 1));
  r.budget_bytes = rep.budget_bytes;
  r.budget_from_limit = c.device_memory_limit > 0;
  r.alignment_bytes = c.alignment_bytes;
  r.fetched = in.options.fetched;
  if (r.fetched.empty() && g.loss() != kNoTensor) r.fetched.push_back(g.tensor(g.loss()).name);
  std::sort(r.fetched.begin(), r.fetched.end());
  r.fetched.erase(std::unique(r.fetched.begin(), r.fetched.end()), r.fetched.end());
  r.workspaces_known = in.facts.workspace_bytes.has_value();
  r.workspace_bytes = workspaces(in.facts);
  r.placement_search_buffers = layout.search_placed_buffers;
  return r;
}

// The inputs of a rewritten graph, whose recompute clones (CloneOrigin,
// insert.h) get the workspace and the measured time of the node they copy.
PassInputs inputs_after(const PassInputs& in, const std::vector<CloneOrigin>& origins) {
  PassInputs after = in;
  auto extend = [&](auto& by_node, auto missing) {
    for (NodeId n = 0; n < static_cast<NodeId>(origins.size()); ++n) {
      const NodeId copied = origins[n].clone_of;
      if (copied == kNoNode) continue;
      if (by_node.size() <= static_cast<size_t>(n)) by_node.resize(n + 1, missing);
      by_node[n] = copied < static_cast<NodeId>(by_node.size()) ? by_node[copied] : missing;
    }
  };
  if (after.facts.workspace_bytes.has_value()) extend(*after.facts.workspace_bytes, uint64_t{0});
  if (!after.facts.node_time_s.empty()) extend(after.facts.node_time_s, -1.0);
  return after;
}

// The tensors a plan swaps or recomputes, with their predicted costs.
void fill_decisions(const Graph& graph, const LmsConfig& c, const SwapPlan& plan,
                    const std::vector<CloneOrigin>& origins,
                    const std::vector<double>& times_by_node, RewriteReport& rep) {
  const size_t first = rep.decisions.size();  // the decision of plan item i is first + i
  for (const SwapPlan::Item& item : plan.items) {
    const Tensor& t = graph.tensor(item.tensor);
    TensorDecision d;
    d.tensor = t.name;
    d.bytes = t.bytes();
    d.restores = static_cast<int>(item.swap_ins.size());
    const double bytes = static_cast<double>(d.bytes);
    if (copies(item)) {
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

}  // namespace

LmsConfig effective_config(const LmsConfig& config, const PlanningFacts& facts) {
  LmsConfig c = config;
  if (facts.alignment_bytes != 0) c.alignment_bytes = facts.alignment_bytes;
  if (facts.host_pool_bytes != 0) {
    c.host_memory_limit = c.host_memory_limit == 0
                              ? facts.host_pool_bytes
                              : std::min(c.host_memory_limit, facts.host_pool_bytes);
  }
  if (facts.link.has_value()) c.link = *facts.link;
  if (facts.roofline.has_value()) c.cost_model = *facts.roofline;
  return c;
}

const std::vector<uint64_t>& workspaces(const PlanningFacts& facts) {
  static const std::vector<uint64_t>* const kNone = new std::vector<uint64_t>();
  return facts.workspace_bytes.has_value() ? *facts.workspace_bytes : *kNone;
}

absl::StatusOr<Analysis> analyse(const Graph& graph, const PassInputs& in) {
  const LivenessOptions lo{in.config.alignment_bytes, in.options.fetched, workspaces(in.facts)};
  Analysis a;
  LMS_ASSIGN_OR_RETURN(a.live, analyze(graph, lo));
  const CostOptions cost_opts = cost_options(in);
  LMS_RETURN_IF_ERROR(check_cost_options(cost_opts));
  CostModel cost(graph, cost_opts);
  a.times = times_by_position(cost, a.live.order);
  return a;
}

absl::StatusOr<SwapPlan> make_plan(const Graph& graph, const PassInputs& in,
                                   const Analysis& analysis, uint64_t usable,
                                   const PlanVariant& variant) {
  const LmsConfig& c = in.config;
  if (c.policy != SwapPolicy::kAuto) return rule_plan(graph, c, analysis);
  if (usable == 0) {
    return absl::InvalidArgumentError(
        "lms rewrite: policy auto needs a device budget: set device_memory_limit or pass "
        "PlanningFacts::device_capacity_bytes (the Device overload sets it)");
  }
  AutoOptions ao;
  ao.budget_bytes = usable;
  ao.fragmentation_reserve = 0;
  ao.host_limit_bytes = c.host_memory_limit;
  ao.min_tensor_bytes = c.min_tensor_bytes;
  ao.h2d_bytes_per_s = c.link.h2d_bytes_per_s / c.link_devices;  // CostOptions::link_devices
  ao.d2h_bytes_per_s = c.link.d2h_bytes_per_s / c.link_devices;
  ao.copy_latency_s = c.link.copy_latency_s;
  ao.actions = variant.actions;
  ao.link_share = variant.link_share;
  ao.defer_release = variant.defer_release;
  ao.jitter_seed = variant.jitter_seed;
  ao.no_swap = variant.no_swap;
  ao.no_recompute = variant.no_recompute;
  ao.force_swap = variant.force_swap;
  return plan_auto(&graph, analysis.live, analysis.times, ao);
}

absl::StatusOr<Candidate> insert(const Graph& source, const PassInputs& in,
                                 const Analysis& analysis, SwapPlan plan,
                                 const RewriteReport& rep) {
  Candidate c{{}, std::move(plan), {}, {}, rep};
  LMS_ASSIGN_OR_RETURN(c.graph, with_swaps(source, analysis.live, c.plan, &c.origins));
  c.inputs = inputs_after(in, c.origins);
  return c;
}

absl::StatusOr<SimResult> simulate_step(const Candidate& candidate) {
  LMS_ASSIGN_OR_RETURN(Analysis after, analyse(candidate.graph, candidate.inputs));
  return simulate(candidate.graph, after.live, after.times,
                  {candidate.rep.budget_bytes, /*wait_at_release=*/true,
                   input_upload_s(candidate.graph, after.live, candidate.inputs)});
}

absl::StatusOr<std::shared_ptr<const PlannedLayout>> lay_out(const Graph& graph,
                                                             const PassInputs& in,
                                                             uint64_t budget_bytes,
                                                             int64_t search_placed_buffers) {
  auto planned = std::make_shared<PlannedLayout>();
  LMS_ASSIGN_OR_RETURN(
      planned->layout,
      layout_step(graph, {in.config.alignment_bytes, in.options.fetched, workspaces(in.facts)},
                  budget_bytes, search_placed_buffers));
  planned->search_placed_buffers = search_placed_buffers;
  planned->graph_fingerprint = layout_fingerprint(graph);
  return planned;
}

void fill_layout_figures(const PlannedLayout& planned, const PassInputs& in, RewriteReport& rep) {
  const StepLayout& layout = planned.layout;
  rep.arena_bytes = layout.placement.arena_bytes;
  rep.arena_lower_bound_bytes = layout.placement.lower_bound_bytes;
  rep.arena_persistent_bytes = layout.step.persistent_bytes;
  rep.peak_bytes_after = layout.device_bytes();
  rep.device_bytes_by_position.resize(layout.arena_in_use.size());
  for (size_t p = 0; p < layout.arena_in_use.size(); ++p) {
    rep.device_bytes_by_position[p] = layout.step.persistent_bytes + layout.arena_in_use[p];
  }
  rep.fit_unknown_reason = missing_fact(rep, in.facts);
  rep.fits = rep.fit_unknown_reason.empty() && rep.peak_bytes_after <= rep.budget_bytes;
}

void take_layout(Candidate& candidate, std::shared_ptr<const PlannedLayout> planned) {
  fill_layout_figures(*planned, candidate.inputs, candidate.rep);
  candidate.layout = std::move(planned);
}

void fill_working_set(const Graph& graph, const Analysis& analysis, RewriteReport& rep) {
  const WorkingSetLimit ws = working_set_limit(analysis.live);
  rep.working_set_limit_bytes = ws.bytes;
  rep.working_set_node = ws.position >= 0 ? graph.node(analysis.live.order[ws.position]).name : "";
}

RewriteReport report_before(const Graph& graph, const PassInputs& in, const Analysis& analysis) {
  const LmsConfig& c = in.config;
  RewriteReport rep;
  rep.policy = c.policy;
  rep.enabled = c.enabled;
  // Per Note [Capacity units], the budget in whole allocator units, as
  // the device's allocator holds its capacity.
  rep.budget_bytes =
      align_down(c.device_memory_limit ? c.device_memory_limit : in.facts.device_capacity_bytes,
                 std::max<uint64_t>(c.alignment_bytes, 1));
  rep.usable_budget_bytes = usable_budget(rep.budget_bytes, c.fragmentation_reserve);
  rep.peak_bytes_before = memory_profile(analysis.live).peak;
  rep.peak_bytes_after = rep.peak_bytes_before;
  const SimResult sim = simulate(graph, analysis.live, analysis.times,
                                 {.input_upload_s = input_upload_s(graph, analysis.live, in)});
  rep.step_time_before_s = sim.step_time_s;
  rep.step_time_after_s = sim.step_time_s;
  fill_working_set(graph, analysis, rep);
  rep.time_model = time_model_text(graph, in);
  return rep;
}

absl::Status complete(const Graph& source, Candidate& candidate) {
  const LmsConfig& c = candidate.inputs.config;
  RewriteReport& rep = candidate.rep;
  const PlanTraffic traffic = plan_traffic(source, candidate.plan, c.alignment_bytes);
  if (c.host_memory_limit > 0 && traffic.host_bytes > c.host_memory_limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "lms rewrite: the plan holds ", format_bytes(traffic.host_bytes),
        " of pinned host memory, over host_memory_limit ", format_bytes(c.host_memory_limit),
        " (with the Device overload, at most the device's pinned host pool); raise it (or the "
        "device's host pool) or swap fewer tensors (min_tensor_bytes, swapout_threshold)"));
  }
  rep.plan_text = to_text(candidate.plan, source);
  rep.bytes_out_per_step = traffic.bytes_out;
  rep.bytes_in_per_step = traffic.bytes_in;
  rep.host_bytes = traffic.host_bytes;
  LMS_ASSIGN_OR_RETURN(Analysis after, analyse(candidate.graph, candidate.inputs));
  std::vector<double> times_by_node(candidate.graph.num_nodes(), 0);
  for (size_t p = 0; p < after.live.order.size(); ++p) {
    times_by_node[after.live.order[p]] = after.times[p];
  }
  fill_decisions(source, c, candidate.plan, candidate.origins, times_by_node, rep);
  const SimResult sim = simulate(candidate.graph, after.live, after.times,
                                 {rep.budget_bytes, /*wait_at_release=*/true,
                                  input_upload_s(candidate.graph, after.live, candidate.inputs)});
  rep.step_time_after_s = sim.step_time_s;
  rep.stall_s = sim.stall_s;
  candidate.graph.set_plan_record(
      plan_record(candidate.graph, candidate.inputs, rep, *candidate.layout));
  return absl::OkStatus();
}

absl::Status keep_result(PlannedStep& step) {
  if (step.layout == nullptr) return absl::OkStatus();
  auto result = std::make_shared<PlannedLayout>(*step.layout);
  LMS_ASSIGN_OR_RETURN(result->release, release_plan(step.graph, step.graph.plan_record().fetched));
  step.layout = std::move(result);
  return absl::OkStatus();
}

absl::StatusOr<PlannedStep> complete_unchanged(const Graph& graph, const PassInputs& in,
                                               RewriteReport rep) {
  PlannedStep step{graph, std::move(rep), nullptr};
  LMS_ASSIGN_OR_RETURN(step.layout, lay_out(graph, in, step.rep.budget_bytes));
  fill_layout_figures(*step.layout, in, step.rep);
  step.graph.set_plan_record(plan_record(graph, in, step.rep, *step.layout));
  return step;
}

}  // namespace lms::swap
