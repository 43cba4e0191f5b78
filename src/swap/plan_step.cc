// lms::plan_step and lms::rewrite from given facts, the public entry points
// of the planner (Note [Rewrite in four parts]), the report's text, and
// use_least_workspace_kernels.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lms/plan.h"
#include "lms/status.h"
#include "lms/types.h"
#include "lms/units.h"
#include "swap/pass.h"
#include "swap/search.h"

namespace lms {
namespace {

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

absl::StatusOr<StepPlan> plan_step(const Graph& graph, const LmsConfig& config,
                                   const PlanningFacts& facts, const RewriteOptions& options) {
  LMS_ASSIGN_OR_RETURN(swap::PlannedStep step, swap::plan(graph, config, facts, options));
  return StepPlan(std::make_shared<const Graph>(std::move(step.graph)), std::move(step.rep),
                  std::move(step.layout));
}

absl::StatusOr<RewriteReport> rewrite(Graph& graph, const LmsConfig& config,
                                      const PlanningFacts& facts, const RewriteOptions& options) {
  LMS_ASSIGN_OR_RETURN(StepPlan plan, plan_step(graph, config, facts, options));
  graph = plan.graph();
  return plan.report();
}

absl::StatusOr<RewriteReport> rewrite(Graph& graph, const LmsConfig& config) {
  return rewrite(graph, config, PlanningFacts{}, RewriteOptions{});
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

}  // namespace lms
