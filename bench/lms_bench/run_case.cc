#include "run_case.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "fmt/format.h"
#include "lms/device.h"
#include "lms/facts.h"
#include "lms/profile.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/units.h"

namespace lms::bench {
namespace {

double mean_after_first(const std::vector<double>& v) {
  if (v.empty()) return 0;
  size_t first = v.size() > 1 ? 1 : 0;
  double sum = 0;
  for (size_t i = first; i < v.size(); ++i) sum += v[i];
  return sum / static_cast<double>(v.size() - first);
}

void mark_oom(CaseResult& row, const absl::Status& s) {
  row.ok = false;
  row.error = std::string(to_std(s.message()));
  row.status = oom_status(s);
}

// The planner's figures for the graph as it is (no swaps), on the device
// the LMS plan is made on (plan_figures_without_lms).
absl::Status fill_planner_before(const Graph& train, const CaseSpec& spec, Device& device,
                                 const std::string& loss, CaseResult& row) {
  const PlanningFacts known{.node_time_s = spec.node_time_s};
  LMS_ASSIGN_OR_RETURN(RewriteReport rep,
                       plan_figures_without_lms(train, spec.config, device, loss, known));
  row.budget_bytes = rep.budget_bytes;
  row.predicted_peak_before_bytes = rep.peak_bytes_before;
  // The unchanged graph's layout: persistent tensors plus its arena, what
  // the session holds (RewriteReport::peak_bytes_after).
  row.predicted_peak_after_bytes = rep.peak_bytes_after;
  row.working_set_limit_bytes = rep.working_set_limit_bytes;
  row.working_set_node = rep.working_set_node;
  row.predicted_step_s = rep.step_time_before_s;
  row.planned_bytes_by_position = std::move(rep.device_bytes_by_position);
  return absl::OkStatus();
}

// Plans LMS with the Device overload of lms::rewrite, which takes every fact
// from `device`: its capacity, workspaces and pinned host pool (a plan
// never holds more than the pool) and, with time_model "measured", the
// link and node times measured on it. A ResourceExhausted plan marks the
// row planner-OOM (returns false: nothing to run).
absl::StatusOr<bool> apply_lms(Graph& train, const CaseSpec& spec, Device& device,
                               const std::string& loss, CaseResult& row) {
  const PlanningFacts known{.node_time_s = spec.node_time_s,
                            .least_node_time_s = spec.least_node_time_s};
  absl::StatusOr<RewriteReport> rep =
      rewrite(train, spec.config, device, {.fetched = {loss}}, known);
  if (absl::IsResourceExhausted(rep.status())) {
    row.planner_oom = true;
    row.error = std::string(to_std(rep.status().message()));
    row.status =
        row.working_set_limit_bytes > row.budget_bytes
            ? fmt::format("OOM (planner: working set {} > {})",
                          format_bytes(row.working_set_limit_bytes), format_bytes(row.budget_bytes))
            : "OOM (planner: no plan fits)";
    return false;
  }
  LMS_RETURN_IF_ERROR(rep.status());
  row.swapped_tensors = rep->swapped.size();
  row.recomputed_tensors = rep->recomputed.size();
  row.plan_actions = rep->actions;
  row.plan_signature = rep->plan_text;
  for (const std::string& n : rep->least_workspace_nodes) row.plan_signature += "\nleast " + n;
  row.time_model = rep->time_model;
  row.predicted_peak_after_bytes = rep->peak_bytes_after;
  row.predicted_step_s = rep->step_time_after_s;
  row.predicted_stall_s = rep->stall_s;
  row.planned_bytes_by_position = std::move(rep->device_bytes_by_position);
  return true;
}

// Runs the steps; an out-of-memory step ends the run as a row status.
absl::Status run_steps(const ModelFactory& f, const CaseSpec& spec, Session& session,
                       CaseResult& row) {
  for (int step = 0; step < spec.steps; ++step) {
    LMS_ASSIGN_OR_RETURN(Feeds feeds, f.feeds(spec.size, step));
    Int64Feeds int64_feeds;
    if (f.int64_feeds) {
      LMS_ASSIGN_OR_RETURN(int64_feeds, f.int64_feeds(spec.size, step));
    }
    StepResult r;
    ++row.steps_attempted;
    absl::Status s = session.run(feeds, int64_feeds, &r);
    if (absl::IsResourceExhausted(s)) {
      mark_oom(row, s);
      return absl::OkStatus();
    }
    LMS_RETURN_IF_ERROR(s);
    row.step_s.push_back(r.step_s);
    row.mean_stall_s += step > 0 || spec.steps == 1 ? r.stall_s : 0;
    row.mean_host_wait_s += step > 0 || spec.steps == 1 ? r.host_wait_s : 0;
    auto loss = r.fetched.begin();
    if (loss != r.fetched.end() && !loss->second.empty()) row.losses.push_back(loss->second[0]);
    row.peak_device_bytes = std::max(row.peak_device_bytes, r.peak_device_bytes);
    row.peak_pinned_host_bytes = std::max(row.peak_pinned_host_bytes, r.peak_pinned_host_bytes);
    row.bytes_d2h_per_step = r.bytes_d2h;
    row.bytes_h2d_per_step = r.bytes_h2d;
    row.measured_bytes_by_position = std::move(r.device_bytes_by_position);
  }
  row.ok = true;
  row.status = "ok";
  row.mean_step_s = mean_after_first(row.step_s);
  row.mean_stall_s /= spec.steps > 1 ? spec.steps - 1 : 1;
  row.mean_host_wait_s /= spec.steps > 1 ? spec.steps - 1 : 1;
  return absl::OkStatus();
}

// The facts a prediction of the step without LMS needs under time_model
// "measured" (the default on --device cuda): lms::rewrite measures nothing
// with LMS off, so its roofline would be the config's, not the device's
// (on an H100 it predicted VDSR batch 292 at 2.85 s for a 0.129 s step).
absl::StatusOr<PlanningFacts> measured_facts_without_lms(const Graph& train,
                                                         const LmsConfig& config, Device& device,
                                                         const std::string& loss) {
  LmsConfig whole = config;
  whole.device_memory_limit = 0;
  return gather_facts(train, whole, device, nullptr, {.rewrite = {.fetched = {loss}}});
}

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> make_device(const DeviceSetup& d) {
  if (d.cuda) {
    return make_cuda_device(
        {.capacity_bytes = d.capacity_bytes, .host_pool_bytes = d.host_pool_bytes});
  }
  return make_cpu_device({.capacity_bytes = d.capacity_bytes,
                          .host_pool_bytes = d.host_pool_bytes,
                          .d2h_bytes_per_s = d.d2h_bytes_per_s,
                          .h2d_bytes_per_s = d.h2d_bytes_per_s,
                          .copy_latency_s = d.copy_latency_s,
                          .compute_threads = d.compute_threads});
}

std::string oom_status(const absl::Status& status) {
  const std::optional<FailureSite> site = failure_site(status);
  if (!site.has_value()) return "OOM";
  if (site->stage == kStageNode) return "OOM at " + site->name;
  if (site->stage == kStagePersistent) return "OOM at persistent " + site->name;
  if (site->stage == kStageArena) return "OOM at arena";
  return "OOM";
}

namespace {

// The convolutions of `graph` whose least-workspace kernel needs less
// workspace on `device` than their default one, by name.
absl::StatusOr<std::vector<std::string>> smaller_least_workspace_nodes(const Graph& graph,
                                                                       Device& device) {
  LMS_ASSIGN_OR_RETURN(std::vector<uint64_t> ws, kernel_workspace_bytes(graph, device));
  LMS_ASSIGN_OR_RETURN(std::vector<uint64_t> least, least_kernel_workspace_bytes(graph, device));
  std::vector<std::string> smaller;
  for (size_t id = 0; id < least.size() && id < ws.size(); ++id) {
    if (least[id] < ws[id]) smaller.push_back(graph.node(static_cast<NodeId>(id)).name);
  }
  return smaller;
}

}  // namespace

absl::StatusOr<RewriteReport> plan_without_lms(Graph& graph, const LmsConfig& config,
                                               Device& device, const std::string& loss,
                                               const PlanningFacts& known) {
  LmsConfig off = config;
  off.enabled = false;
  off.device_memory_limit = 0;  // a run without LMS has the whole device
  const RewriteOptions o{.fetched = {loss}};
  Graph fast = graph;
  LMS_ASSIGN_OR_RETURN(RewriteReport rep, rewrite(fast, off, device, o, known));
  if (!rep.fits && config.kernel_choice != KernelChoice::kDefault) {
    LMS_ASSIGN_OR_RETURN(std::vector<std::string> smaller,
                         smaller_least_workspace_nodes(graph, device));
    if (!smaller.empty()) {
      Graph lean = graph;
      LMS_RETURN_IF_ERROR(use_least_workspace_kernels(lean, smaller));
      LMS_ASSIGN_OR_RETURN(RewriteReport lean_rep, rewrite(lean, off, device, o, known));
      if (lean_rep.fits) {
        lean_rep.least_workspace_nodes = std::move(smaller);
        graph = std::move(lean);
        return lean_rep;
      }
    }
  }
  graph = std::move(fast);
  return rep;
}

absl::StatusOr<RewriteReport> plan_figures_without_lms(const Graph& graph, const LmsConfig& config,
                                                       Device& device, const std::string& loss,
                                                       const PlanningFacts& known) {
  LmsConfig off = config;
  off.enabled = false;
  const RewriteOptions o{.fetched = {loss}};
  Graph copy = graph;
  LMS_ASSIGN_OR_RETURN(RewriteReport rep, rewrite(copy, off, device, o, known));
  if (config.kernel_choice == KernelChoice::kDefault) return rep;
  // The smallest working set any plan may reach when kernel_choice lets it
  // move convolutions: each with the kernel of the smaller workspace (Note
  // [Least workspace fallback]).
  LMS_ASSIGN_OR_RETURN(std::vector<std::string> smaller,
                       smaller_least_workspace_nodes(graph, device));
  if (smaller.empty()) return rep;
  Graph lean = graph;
  LMS_RETURN_IF_ERROR(use_least_workspace_kernels(lean, smaller));
  LMS_ASSIGN_OR_RETURN(RewriteReport lean_rep, rewrite(lean, off, device, o));
  if (lean_rep.working_set_limit_bytes < rep.working_set_limit_bytes) {
    rep.working_set_limit_bytes = lean_rep.working_set_limit_bytes;
    rep.working_set_node = std::move(lean_rep.working_set_node);
  }
  return rep;
}

absl::StatusOr<CaseResult> run_case(const ModelFactory& f, const CaseSpec& spec) {
  if (spec.steps < 1) {
    return absl::InvalidArgumentError(fmt::format("steps {} must be >= 1", spec.steps));
  }
  CaseResult row;
  row.size = spec.size;
  row.lms = spec.lms;
  if (spec.record) row.recorder = std::make_shared<Recorder>();
  LMS_ASSIGN_OR_RETURN(Graph train, f.build(spec.size));
  // Declared after the recorder it reports to, so it is destroyed first.
  LMS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, make_device(spec.device));
  const std::string loss = train.tensor(train.loss()).name;
  if (!spec.lms) {
    // Note [Fair baseline].
    // The ideal's prediction by the node times the plans get (CaseSpec).
    PlanningFacts known{.node_time_s = spec.node_time_s};
    if (known.node_time_s.empty() && spec.config.time_model == TimeModel::kMeasured) {
      LMS_ASSIGN_OR_RETURN(known, measured_facts_without_lms(train, spec.config, *device, loss));
    }
    LMS_ASSIGN_OR_RETURN(RewriteReport rep,
                         plan_without_lms(train, spec.config, *device, loss, known));
    row.budget_bytes = rep.budget_bytes;
    row.predicted_peak_before_bytes = rep.peak_bytes_before;
    row.predicted_peak_after_bytes = rep.peak_bytes_after;
    row.working_set_limit_bytes = rep.working_set_limit_bytes;
    row.working_set_node = rep.working_set_node;
    row.predicted_step_s = rep.step_time_before_s;
    row.planned_bytes_by_position = std::move(rep.device_bytes_by_position);
    for (const std::string& n : rep.least_workspace_nodes)
      row.plan_signature += "least " + n + "\n";
  } else {
    LMS_RETURN_IF_ERROR(fill_planner_before(train, spec, *device, loss, row));
    LMS_ASSIGN_OR_RETURN(bool runnable, apply_lms(train, spec, *device, loss, row));
    if (!runnable) return row;
  }
  SessionOptions so{.fetches = {loss}, .sink = row.recorder.get()};
  absl::StatusOr<std::unique_ptr<Session>> session = Session::create(train, *device, so);
  if (absl::IsResourceExhausted(session.status())) {
    mark_oom(row, session.status());
    return row;
  }
  LMS_RETURN_IF_ERROR(session.status());
  LMS_RETURN_IF_ERROR(run_steps(f, spec, **session, row));
  return row;
}

}  // namespace lms::bench
