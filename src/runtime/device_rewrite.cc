// lms::plan_step and lms::rewrite with the runtime facts taken from a
// Device (lms/rewrite.h): the device's lowering passes (Note [Device
// lowering]), lms::gather_facts (lms/facts.h) and the planner, which itself
// (src/swap) knows no device; and the Device overload of lms::rewrite,
// which keeps the plan's graph.
#include <algorithm>
#include <memory>
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
#include "swap/search.h"

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

absl::StatusOr<StepPlan> plan_step(const Graph& graph, const LmsConfig& config, Device& device,
                                   const RewriteOptions& options, const PlanningFacts& known) {
  LMS_RETURN_IF_ERROR(check_device_empty(device, "lms rewrite"));
  // Per Note [Capacity units], a limit in whole allocator units of the device.
  if (absl::Status s = check_within_capacity("device_memory_limit", config.device_memory_limit,
                                             device.memory_stats(), device.name());
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("lms rewrite: ", s.message()));
  }
  LMS_RETURN_IF_ERROR(verify(graph));
  // Per Note [Device lowering], the device's passes, then the facts of the
  // lowered graph, then the planner.
  Graph lowered = graph;
  LMS_ASSIGN_OR_RETURN(Lowering low, lower_for(device.device_kind(), lowered, options, config));
  const GatherOptions gather{
      .rewrite = options,
      .known = facts_to_lowered(known, low.node_map, lowered.num_nodes()),
      .measure_times = config.enabled,
      .least_workspace_kernels = config.enabled,
  };
  LMS_ASSIGN_OR_RETURN(PlanningFacts facts,
                       gather_lowered_facts(lowered, config, device, nullptr, gather));
  LMS_ASSIGN_OR_RETURN(swap::PlannedStep step, swap::plan(lowered, config, facts, options));
  step.rep.fused = std::move(low.fused);
  if (config.enabled && config.time_model == TimeModel::kMeasured && !facts.measured_on.empty()) {
    step.rep.time_model = absl::StrCat("measured on ", facts.measured_on, ": ", step.rep.time_model,
                                       " (calibrated on the device, for nodes without a time)");
  }
  return StepPlan(std::make_shared<const Graph>(std::move(step.graph)), std::move(step.rep),
                  std::move(step.layout));
}

absl::StatusOr<RewriteReport> rewrite(Graph& graph, const LmsConfig& config, Device& device,
                                      const RewriteOptions& options, const PlanningFacts& known) {
  LMS_ASSIGN_OR_RETURN(StepPlan plan, plan_step(graph, config, device, options, known));
  graph = plan.graph();
  return plan.report();
}

}  // namespace lms
