// lms::rewrite with the runtime facts taken from a Device (lms/rewrite.h).
// It lives in the runtime layer because it compiles the graph's kernels on
// the device to learn their workspaces, and with time_model "measured"
// profiles them there (lms/profile.h); the pass itself (src/swap) knows no
// device.
#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/blocked_layouts.h"
#include "graph/fusion.h"
#include "lms/device.h"
#include "lms/profile.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/types.h"
#include "lms/units.h"
#include "runtime/capacity.h"

namespace lms {
namespace {

// time_model "measured" (lms/config.h): the link measured on the device
// (or known.link), the node times of facts.node_time_s when given, else
// measured, and a roofline calibrated from those times (or known.roofline)
// for any node without one (a node too big to run alone is left to it: the
// planner then says whether the step can fit).
absl::Status measure_times(const Graph& graph, Device& device, const LmsConfig& config,
                           const PlanningFacts& known, PlanningFacts& facts) {
  ProfileOptions po;
  po.nodes = facts.node_time_s.empty();
  po.skip_nodes_that_do_not_fit = true;
  if (!po.nodes && known.link.has_value() && known.roofline.has_value()) {
    facts.link = known.link;
    facts.roofline = known.roofline;
  } else {
    LMS_ASSIGN_OR_RETURN(StepProfile profile, profile_step(graph, device, po));
    if (!po.nodes) profile.node_time_s = facts.node_time_s;
    facts.link = known.link.value_or(profile.link);
    facts.roofline = known.roofline.value_or(calibrate_cost_model(profile, graph));
    facts.node_time_s = std::move(profile.node_time_s);
  }
  // Joint actions may plan with the least-workspace kernels even when the
  // fast ones fit (Note [Least workspace fallback]): time those kernels
  // too, so the comparison counts their speed.
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
  return absl::OkStatus();
}

// Times by the input graph's NodeId carried over to the fused graph: a
// fused node's is the sum of its nodes', and -1 (the roofline) where one of
// them has none. An entry of `times` < 0 or missing takes `fallback`'s, as
// least_node_time_s falls back to node_time_s.
std::vector<double> fused_times(const FusionResult& f, const std::vector<double>& times,
                                const std::vector<double>& fallback) {
  auto known = [](const std::vector<double>& v, NodeId id) {
    return id < static_cast<NodeId>(v.size()) && v[id] >= 0;
  };
  std::vector<double> out(f.graph.num_nodes(), 0.0);
  std::vector<bool> unknown(f.graph.num_nodes(), false);
  for (NodeId id = 0; id < static_cast<NodeId>(f.node_map.size()); ++id) {
    const NodeId m = f.node_map[id];
    if (known(times, id)) {
      out[m] += times[id];
    } else if (known(fallback, id)) {
      out[m] += fallback[id];
    } else {
      unknown[m] = true;
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (unknown[i]) out[i] = -1;
  }
  return out;
}

// The CPU device runs each conv with its relu as one kernel where the relu
// is the conv output's only reader (Note [Conv + ReLU fusion]), and stores
// activations blocked between ops where every reader can
// (Note [Blocked layouts]). This runs before the kernels are compiled for
// their workspaces, so the plan counts the kernels the session will run, and
// before the swap pass, whose swap copies and rewired consumers keep each
// tensor's layout. Given node times (node_time_s and least_node_time_s)
// follow the nodes: a fused node's is the sum of its two.
absl::StatusOr<std::vector<std::string>> prepare_for(Graph& graph, const Device& device,
                                                     const RewriteOptions& options,
                                                     PlanningFacts& facts) {
  if (device.kind() != "cpu") return std::vector<std::string>();
  std::vector<std::string> fused;
  if (options.fuse_conv_relu) {
    LMS_ASSIGN_OR_RETURN(FusionResult f, fuse_conv_relu(graph, options.fetched));
    if (!facts.least_node_time_s.empty()) {
      facts.least_node_time_s = fused_times(f, facts.least_node_time_s, facts.node_time_s);
    }
    if (!facts.node_time_s.empty()) facts.node_time_s = fused_times(f, facts.node_time_s, {});
    graph = std::move(f.graph);
    fused = std::move(f.fused);
  }
  LMS_RETURN_IF_ERROR(assign_blocked_layouts(graph, options.fetched).status());
  return fused;
}

}  // namespace

absl::StatusOr<std::vector<uint64_t>> least_kernel_workspace_bytes(const Graph& graph,
                                                                   Device& device) {
  Graph lean = graph;
  bool any = false;
  for (NodeId id = 0; id < static_cast<NodeId>(lean.num_nodes()); ++id) {
    if (!is_conv_family(lean.node(id).op)) continue;
    lean.mutable_node(id).attrs[std::string(kWorkspaceAttr)] = std::string(kWorkspaceLeast);
    any = true;
  }
  if (!any) return std::vector<uint64_t>();
  return kernel_workspace_bytes(lean, device);
}

absl::Status use_least_workspace_kernels(Graph& graph, const std::vector<std::string>& nodes) {
  std::vector<NodeId> convs;
  for (const std::string& name : nodes) {
    NodeId id = graph.find_node(name);
    if (id != kNoNode && graph.node(id).op == OpKind::kRelu) {
      const NodeId producer = graph.tensor(graph.node(id).inputs[0]).producer;
      if (producer != kNoNode && graph.node(producer).op == OpKind::kConv) id = producer;
    }
    if (id == kNoNode || !is_conv_family(graph.node(id).op)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "use_least_workspace_kernels: '", name,
          "' is neither a convolution node of the graph nor a relu reading a conv output"));
    }
    convs.push_back(id);
  }
  for (NodeId id : convs) {
    graph.mutable_node(id).attrs[std::string(kWorkspaceAttr)] = std::string(kWorkspaceLeast);
  }
  return absl::OkStatus();
}

absl::StatusOr<RewriteReport> rewrite(Graph& graph, const LmsConfig& config, Device& device,
                                      const RewriteOptions& options, const PlanningFacts& known) {
  const AllocatorStats mem = device.memory_stats();
  if (mem.bytes_in_use != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lms rewrite: device ", device.name(), " already holds ", format_bytes(mem.bytes_in_use),
        " in ", mem.num_allocs,
        " allocations; a plan assumes an empty device, so rewrite before creating sessions on "
        "it (or destroy them first)"));
  }
  // Note [Capacity units].
  if (absl::Status s = check_within_capacity("device_memory_limit", config.device_memory_limit, mem,
                                             device.name());
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("lms rewrite: ", s.message()));
  }
  LMS_RETURN_IF_ERROR(verify(graph));
  // The graph changes only when the whole rewrite succeeds.
  Graph laid_out = graph;
  PlanningFacts facts;
  facts.node_time_s = known.node_time_s;
  facts.least_node_time_s = known.least_node_time_s;
  facts.ranks = known.ranks;
  facts.allreduce_bytes_per_s = known.allreduce_bytes_per_s;
  LMS_ASSIGN_OR_RETURN(std::vector<std::string> fused,
                       prepare_for(laid_out, device, options, facts));
  // The swapped tensors' blocks come from the device's pinned host pool: a
  // plan that needs more would run out of it mid-step. The planner rounds
  // each block to the device alignment, which must be at least the pool's.
  const AllocatorStats host = device.host_stats();
  if (host.alignment_bytes > mem.alignment_bytes) {
    return absl::InternalError(absl::StrCat("lms rewrite: device ", device.name(),
                                            ": pinned host alignment ", host.alignment_bytes,
                                            " exceeds the device alignment ", mem.alignment_bytes));
  }
  facts.device_capacity_bytes = mem.capacity_bytes;
  facts.alignment_bytes = mem.alignment_bytes;
  facts.host_pool_bytes = host.capacity_bytes;
  facts.device_kind = device.kind();
  LMS_ASSIGN_OR_RETURN(facts.workspace_bytes, kernel_workspace_bytes(laid_out, device));
  if (config.enabled && config.kernel_choice != KernelChoice::kDefault) {
    LMS_ASSIGN_OR_RETURN(facts.least_workspace_bytes,
                         least_kernel_workspace_bytes(laid_out, device));
  }
  const bool measured = config.enabled && config.time_model == TimeModel::kMeasured;
  if (measured) {
    LMS_RETURN_IF_ERROR(measure_times(laid_out, device, config, known, facts));
  } else {
    facts.link = known.link;
    facts.roofline = known.roofline;
  }
  LMS_ASSIGN_OR_RETURN(RewriteReport report, rewrite(laid_out, config, facts, options));
  report.fused = std::move(fused);
  graph = std::move(laid_out);
  if (measured) {
    report.time_model = absl::StrCat("measured on ", device.name(), ": ", report.time_model,
                                     " (calibrated on the device, for nodes without a time)");
  }
  return report;
}

}  // namespace lms
