// lms::rewrite with the runtime facts taken from a Device (lms/rewrite.h):
// the device's lowering passes (Note [Device lowering]), lms::gather_facts
// (lms/facts.h) and the pass, which itself (src/swap) knows no device.
#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lms/device.h"
#include "lms/profile.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/types.h"
#include "lms/units.h"
#include "runtime/capacity.h"
#include "runtime/gather.h"
#include "runtime/lowering.h"

namespace lms {

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
  LMS_RETURN_IF_ERROR(check_device_empty(device, "lms rewrite"));
  // Note [Capacity units].
  if (absl::Status s = check_within_capacity("device_memory_limit", config.device_memory_limit,
                                             device.memory_stats(), device.name());
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("lms rewrite: ", s.message()));
  }
  LMS_RETURN_IF_ERROR(verify(graph));
  // The graph changes only when the whole rewrite succeeds.
  Graph lowered = graph;
  LMS_ASSIGN_OR_RETURN(Lowering low, lower_for(device.device_kind(), lowered, options));
  const GatherOptions gather{
      .rewrite = options,
      .known = facts_to_lowered(known, low.node_map, lowered.num_nodes()),
      .measure_times = config.enabled,
      .least_workspace_kernels = config.enabled,
  };
  LMS_ASSIGN_OR_RETURN(PlanningFacts facts,
                       gather_lowered_facts(lowered, config, device, nullptr, gather));
  LMS_ASSIGN_OR_RETURN(RewriteReport report, rewrite(lowered, config, facts, options));
  report.fused = std::move(low.fused);
  graph = std::move(lowered);
  if (config.enabled && config.time_model == TimeModel::kMeasured && !facts.measured_on.empty()) {
    report.time_model = absl::StrCat("measured on ", facts.measured_on, ": ", report.time_model,
                                     " (calibrated on the device, for nodes without a time)");
  }
  return report;
}

}  // namespace lms
