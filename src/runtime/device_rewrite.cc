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
#include "lms/device.h"
#include "lms/profile.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/types.h"
#include "lms/units.h"

namespace lms {
namespace {

// time_model "measured" (lms/config.h): the link measured on the device
// replaces config.link; the node times of options.node_time_s when given,
// else measured; a roofline calibrated from those times replaces
// config.cost_model for any node without one (a node too big to run alone
// is left to it: the planner then says whether the step can fit).
absl::Status measure_times(const Graph& graph, Device& device, LmsConfig& config,
                           RewriteOptions& options) {
  ProfileOptions po;
  po.nodes = options.node_time_s.empty();
  po.skip_nodes_that_do_not_fit = true;
  LMS_ASSIGN_OR_RETURN(StepProfile profile, profile_step(graph, device, po));
  if (!po.nodes) profile.node_time_s = options.node_time_s;
  config.link = profile.link;
  config.cost_model = calibrate_cost_model(profile, graph);
  options.node_time_s = std::move(profile.node_time_s);
  return absl::OkStatus();
}

// The CPU device stores activations blocked between ops where every reader
// can (Note [Blocked layouts] in src/graph/blocked_layouts.cc). This runs
// before the kernels are compiled for their workspaces, so the plan counts
// the kernels the session will run, and before the swap pass, whose swap
// copies and rewired consumers keep each tensor's layout.
absl::Status lay_out_for(Graph& graph, const Device& device, const RewriteOptions& options) {
  if (device.kind() != "cpu") return absl::OkStatus();
  return assign_blocked_layouts(graph, options.fetched).status();
}

bool is_conv_family(std::string_view op) {
  return op == "conv" || op == "conv_bwd_data" || op == "conv_bwd_weights" || op == "deconv" ||
         op == "deconv_bwd_data" || op == "deconv_bwd_weights";
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

absl::StatusOr<RewriteReport> rewrite(Graph& graph, const LmsConfig& config, Device& device,
                                      const RewriteOptions& options) {
  const AllocatorStats mem = device.memory_stats();
  if (mem.bytes_in_use != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lms rewrite: device ", device.name(), " already holds ", format_bytes(mem.bytes_in_use),
        " in ", mem.num_allocs,
        " allocations; a plan assumes an empty device, so rewrite before creating sessions on "
        "it (or destroy them first)"));
  }
  // The allocator rounds its capacity down to whole alignment units, and so
  // does the planner's replay of a budget: compare in those units.
  const uint64_t align = std::max<uint64_t>(mem.alignment_bytes, 1);
  if (config.device_memory_limit / align * align > mem.capacity_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lms rewrite: device_memory_limit ", format_bytes(config.device_memory_limit),
        " exceeds the capacity of device ", device.name(), " (", format_bytes(mem.capacity_bytes),
        "); allowed: 0 (the capacity) up to ", format_bytes(mem.capacity_bytes)));
  }
  LMS_RETURN_IF_ERROR(verify(graph));
  // The graph changes only when the whole rewrite succeeds.
  Graph laid_out = graph;
  LMS_RETURN_IF_ERROR(lay_out_for(laid_out, device, options));
  LMS_ASSIGN_OR_RETURN(std::vector<uint64_t> workspaces, kernel_workspace_bytes(laid_out, device));
  LmsConfig facts = config;
  facts.alignment_bytes = mem.alignment_bytes;
  RewriteOptions with_device = options;
  with_device.device_capacity_bytes = mem.capacity_bytes;
  with_device.workspace_bytes = std::move(workspaces);
  if (config.enabled) {
    LMS_ASSIGN_OR_RETURN(with_device.least_workspace_bytes,
                         least_kernel_workspace_bytes(laid_out, device));
  }
  if (config.enabled && config.time_model == TimeModel::kMeasured) {
    LMS_RETURN_IF_ERROR(measure_times(laid_out, device, facts, with_device));
  }
  LMS_ASSIGN_OR_RETURN(RewriteReport report, rewrite(laid_out, facts, with_device));
  graph = std::move(laid_out);
  if (config.enabled && config.time_model == TimeModel::kMeasured) {
    report.time_model = absl::StrCat("measured on ", device.name(), ": ", report.time_model,
                                     " (calibrated on the device, for nodes without a time)");
  }
  PlanRecord record = graph.plan_record();
  record.device_kind = device.kind();
  graph.set_plan_record(std::move(record));
  return report;
}

}  // namespace lms
