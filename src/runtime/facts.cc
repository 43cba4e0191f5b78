// lms::gather_facts (lms/facts.h): the one place that measures what a plan
// depends on. lms::rewrite's Device overload, lms-bench, the examples and
// the distributed trainers all gather facts here.
#include "lms/facts.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "lms/device.h"
#include "lms/distributed.h"
#include "lms/profile.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/units.h"
#include "runtime/gather.h"
#include "runtime/lowering.h"

namespace lms {
namespace {

bool has_entry(const std::vector<double>& v, NodeId id) {
  return id < static_cast<NodeId>(v.size()) && v[id] >= 0;
}

// Times by the graph's NodeId carried to the lowered graph: a fused node's
// is the sum of its nodes', and -1 (the roofline) where one of them has
// none. An entry of `times` < 0 or missing takes `fallback`'s, as
// least_node_time_s falls back to node_time_s.
std::vector<double> lowered_times(const std::vector<NodeId>& node_map,
                                  const std::vector<double>& times,
                                  const std::vector<double>& fallback, int lowered_nodes) {
  std::vector<double> out(lowered_nodes, 0.0);
  std::vector<bool> unknown(lowered_nodes, false);
  for (NodeId id = 0; id < static_cast<NodeId>(node_map.size()); ++id) {
    const NodeId m = node_map[id];
    if (has_entry(times, id)) {
      out[m] += times[id];
    } else if (has_entry(fallback, id)) {
      out[m] += fallback[id];
    } else {
      unknown[m] = true;
    }
  }
  for (int i = 0; i < lowered_nodes; ++i) {
    if (unknown[i]) out[i] = -1;
  }
  return out;
}

template <typename T>
std::vector<T> first_takes_all(const std::vector<NodeId>& node_map, const std::vector<T>& values) {
  std::vector<T> out(node_map.size(), T{0});
  std::vector<bool> taken(values.size(), false);
  for (size_t id = 0; id < node_map.size(); ++id) {
    const NodeId m = node_map[id];
    if (m < 0 || m >= static_cast<NodeId>(values.size()) || taken[m]) continue;
    taken[m] = true;
    out[id] = values[m];
  }
  return out;
}

std::optional<std::vector<uint64_t>> lowered_workspaces(
    const std::vector<NodeId>& node_map, const std::optional<std::vector<uint64_t>>& ws,
    int lowered_nodes) {
  if (!ws || ws->size() != node_map.size()) return std::nullopt;
  std::vector<uint64_t> out(lowered_nodes, 0);
  for (size_t id = 0; id < node_map.size(); ++id) out[node_map[id]] += (*ws)[id];
  return out;
}

// time_model "measured" (lms/config.h): the link measured on the device
// (or known.link), the node times of known.node_time_s when given, else
// measured, and a roofline calibrated from those times (or known.roofline)
// for any node without one (a node too big to run alone is left to it: the
// planner then says whether the step can fit).
absl::Status measure_times(const Graph& graph, Device& device, const LmsConfig& config,
                           const GatherOptions& options, PlanningFacts& facts) {
  const PlanningFacts& known = options.known;
  ProfileOptions po;
  po.nodes = facts.node_time_s.empty();
  po.skip_nodes_that_do_not_fit = true;
  po.link = options.measure_link && !known.link.has_value();
  if (!po.nodes && !po.link && known.roofline.has_value()) {
    facts.link = known.link;
    facts.roofline = known.roofline;
  } else {
    LMS_ASSIGN_OR_RETURN(StepProfile profile, profile_step(graph, device, po));
    facts.measured_on = device.name();
    if (!po.nodes) profile.node_time_s = facts.node_time_s;
    facts.link = po.link ? std::optional<LinkConfig>(profile.link) : known.link;
    facts.roofline = known.roofline.value_or(calibrate_cost_model(profile, graph));
    facts.node_time_s = std::move(profile.node_time_s);
  }
  // Joint actions may plan with the least-workspace kernels even when the
  // fast ones fit (Note [Least workspace fallback]): time those kernels too,
  // so the comparison counts their speed.
  const bool joint =
      config.policy == SwapPolicy::kAuto && config.auto_actions == AutoActions::kJoint;
  if (!joint || config.kernel_choice != KernelChoice::kLeastWhenFaster ||
      !facts.least_workspace_bytes || !facts.workspace_bytes || !facts.least_node_time_s.empty()) {
    return absl::OkStatus();
  }
  LMS_ASSIGN_OR_RETURN(StepProfile lean_profile,
                       profile_least_workspace_kernels(graph, device, *facts.workspace_bytes,
                                                       *facts.least_workspace_bytes));
  facts.least_node_time_s = std::move(lean_profile.node_time_s);
  facts.measured_on = device.name();
  return absl::OkStatus();
}

// Note [Facts on ranks]
// Every rank must plan the same step (the all-reduce buckets, the swap
// decisions and hence the order of collectives must agree), so measured
// facts come from rank 0 alone and travel as text: the link and roofline in
// the config's TOML (doubles bit for bit), the times as hexadecimal floats.
// Rank 0 sends its error instead when it cannot measure, so that no rank
// waits for facts that will never come. Memory facts (capacity,
// workspaces) are each rank's own device's.
constexpr char kSeparator = '\x1e';

std::string doubles_text(const std::vector<double>& values) {
  std::string text;
  for (double v : values) absl::StrAppend(&text, absl::StrFormat("%a\n", v));
  return text;
}

absl::StatusOr<std::vector<double>> doubles_from(absl::string_view text) {
  std::vector<double> values;
  for (absl::string_view s : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::string copy(s);
    char* end = nullptr;
    values.push_back(std::strtod(copy.c_str(), &end));
    if (end != copy.c_str() + copy.size()) {
      return absl::InternalError(absl::StrCat("gather_facts: rank 0 sent a time '", copy, "'"));
    }
  }
  return values;
}

std::string measured_text(const absl::Status& status, const PlanningFacts& facts) {
  if (!status.ok()) {
    return absl::StrCat("error", std::string(1, kSeparator), static_cast<int>(status.code()),
                        std::string(1, kSeparator), status.message());
  }
  LmsConfig carrier;
  carrier.link = facts.link.value_or(LinkConfig{});
  carrier.cost_model = facts.roofline.value_or(CostModelConfig{});
  const std::string sep(1, kSeparator);
  return absl::StrCat("ok", sep, carrier.to_toml(), sep, doubles_text(facts.node_time_s), sep,
                      doubles_text(facts.least_node_time_s));
}

absl::Status read_measured(const std::string& text, PlanningFacts& facts) {
  std::vector<std::string> parts = absl::StrSplit(text, kSeparator);
  if (parts.size() == 3 && parts[0] == "error") {
    const int code = std::atoi(parts[1].c_str());
    return absl::Status(static_cast<absl::StatusCode>(code),
                        absl::StrCat("rank 0 could not gather the facts: ", parts[2]));
  }
  if (parts.size() != 4 || parts[0] != "ok") {
    return absl::InternalError("gather_facts: rank 0 sent facts this rank cannot read");
  }
  LMS_ASSIGN_OR_RETURN(LmsConfig carrier, LmsConfig::from_toml_string(parts[1]));
  facts.link = carrier.link;
  facts.roofline = carrier.cost_model;
  LMS_ASSIGN_OR_RETURN(facts.node_time_s, doubles_from(parts[2]));
  LMS_ASSIGN_OR_RETURN(facts.least_node_time_s, doubles_from(parts[3]));
  return absl::OkStatus();
}

absl::Status measure_on_ranks(const Graph& graph, Device& device, const LmsConfig& config,
                              const GatherOptions& options, Communicator& comm,
                              PlanningFacts& facts) {
  std::string text;
  if (comm.rank() == 0) {
    const absl::Status s = measure_times(graph, device, config, options, facts);
    text = measured_text(s, facts);
  }
  LMS_ASSIGN_OR_RETURN(std::vector<std::string> all, comm.all_gather(text));
  if (all.empty()) return absl::InternalError("gather_facts: all_gather returned no rank");
  LMS_RETURN_IF_ERROR(read_measured(all[0], facts));
  facts.measured_on =
      absl::StrCat("rank 0 (", device.name(), "), planned alike on all ", comm.size(), " ranks");
  return absl::OkStatus();
}

}  // namespace

absl::Status check_device_empty(const Device& device, std::string_view who) {
  const AllocatorStats mem = device.memory_stats();
  if (mem.bytes_in_use == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      to_absl(who), ": device ", device.name(), " already holds ", format_bytes(mem.bytes_in_use),
      " in ", mem.num_allocs,
      " allocations; a plan assumes an empty device, so plan before creating sessions on it (or "
      "destroy them first)"));
}

PlanningFacts facts_to_lowered(const PlanningFacts& facts, const std::vector<NodeId>& node_map,
                               int lowered_nodes) {
  PlanningFacts out = facts;
  out.node_time_s.clear();
  out.least_node_time_s.clear();
  if (!facts.node_time_s.empty()) {
    out.node_time_s = lowered_times(node_map, facts.node_time_s, {}, lowered_nodes);
  }
  if (!facts.least_node_time_s.empty()) {
    out.least_node_time_s =
        lowered_times(node_map, facts.least_node_time_s, facts.node_time_s, lowered_nodes);
  }
  out.workspace_bytes = lowered_workspaces(node_map, facts.workspace_bytes, lowered_nodes);
  out.least_workspace_bytes =
      lowered_workspaces(node_map, facts.least_workspace_bytes, lowered_nodes);
  return out;
}

PlanningFacts facts_from_lowered(const PlanningFacts& facts, const std::vector<NodeId>& node_map) {
  PlanningFacts out = facts;
  if (!facts.node_time_s.empty()) out.node_time_s = first_takes_all(node_map, facts.node_time_s);
  if (!facts.least_node_time_s.empty()) {
    out.least_node_time_s = first_takes_all(node_map, facts.least_node_time_s);
  }
  if (facts.workspace_bytes)
    out.workspace_bytes = first_takes_all(node_map, *facts.workspace_bytes);
  if (facts.least_workspace_bytes) {
    out.least_workspace_bytes = first_takes_all(node_map, *facts.least_workspace_bytes);
  }
  return out;
}

absl::StatusOr<PlanningFacts> gather_lowered_facts(const Graph& lowered, const LmsConfig& config,
                                                   Device& device, Communicator* communicator,
                                                   const GatherOptions& options) {
  LMS_RETURN_IF_ERROR(check_device_empty(device, "gather_facts"));
  const PlanningFacts& known = options.known;
  // The swapped tensors' blocks come from the device's pinned host pool: a
  // plan that needs more would run out of it mid-step. The planner rounds
  // each block to the device alignment, which must be at least the pool's.
  const AllocatorStats mem = device.memory_stats();
  const AllocatorStats host = device.host_stats();
  if (host.alignment_bytes > mem.alignment_bytes) {
    return absl::InternalError(absl::StrCat("gather_facts: device ", device.name(),
                                            ": pinned host alignment ", host.alignment_bytes,
                                            " exceeds the device alignment ", mem.alignment_bytes));
  }
  PlanningFacts facts;
  facts.node_time_s = known.node_time_s;
  facts.least_node_time_s = known.least_node_time_s;
  facts.ranks = communicator != nullptr ? communicator->size() : known.ranks;
  facts.allreduce_bytes_per_s = known.allreduce_bytes_per_s;
  facts.device_capacity_bytes = mem.capacity_bytes;
  facts.alignment_bytes = mem.alignment_bytes;
  facts.host_pool_bytes = host.capacity_bytes;
  facts.device_kind = device.kind();
  facts.measured_on = known.measured_on;
  const size_t n = lowered.num_nodes();
  if (known.workspace_bytes && known.workspace_bytes->size() == n) {
    facts.workspace_bytes = known.workspace_bytes;
  } else {
    LMS_ASSIGN_OR_RETURN(facts.workspace_bytes, kernel_workspace_bytes(lowered, device));
  }
  if (options.least_workspace_kernels && config.kernel_choice != KernelChoice::kDefault) {
    if (known.least_workspace_bytes && known.least_workspace_bytes->size() == n) {
      facts.least_workspace_bytes = known.least_workspace_bytes;
    } else {
      LMS_ASSIGN_OR_RETURN(facts.least_workspace_bytes,
                           least_kernel_workspace_bytes(lowered, device));
    }
  }
  if (!options.measure_times || config.time_model != TimeModel::kMeasured) {
    facts.link = known.link;
    facts.roofline = known.roofline;
    return facts;
  }
  if (communicator != nullptr && communicator->size() > 1) {
    LMS_RETURN_IF_ERROR(measure_on_ranks(lowered, device, config, options, *communicator, facts));
  } else {
    LMS_RETURN_IF_ERROR(measure_times(lowered, device, config, options, facts));
  }
  return facts;
}

absl::StatusOr<PlanningFacts> gather_facts(const Graph& graph, const LmsConfig& config,
                                           Device& device, Communicator* communicator,
                                           const GatherOptions& options) {
  LMS_RETURN_IF_ERROR(check_device_empty(device, "gather_facts"));
  LMS_RETURN_IF_ERROR(verify(graph));
  if (!options.lower) {
    return gather_lowered_facts(graph, config, device, communicator, options);
  }
  Graph lowered = graph;
  LMS_ASSIGN_OR_RETURN(Lowering low,
                       lower_for(device.device_kind(), lowered, options.rewrite, config));
  GatherOptions on_lowered = options;
  on_lowered.known = facts_to_lowered(options.known, low.node_map, lowered.num_nodes());
  LMS_ASSIGN_OR_RETURN(PlanningFacts facts,
                       gather_lowered_facts(lowered, config, device, communicator, on_lowered));
  return facts_from_lowered(facts, low.node_map);
}

}  // namespace lms
