// lms::rewrite: the Large Model Support pass. Plans which activations to swap
// to pinned host memory (policy of LmsConfig) and inserts swap_out / swap_in
// nodes into the training graph in place (DESIGN.md "Swap rewrite").
//
//   LMS_ASSIGN_OR_RETURN(auto cfg, lms::LmsConfig::from_file("lms.toml"));
//   LMS_ASSIGN_OR_RETURN(lms::RewriteReport rep, lms::rewrite(train, cfg));
//   std::cout << rep.summary();
//
// With runtime facts (the executor's device capacity, kernel workspaces,
// measured node times from a profiling step):
//   lms::RewriteOptions opt{.device_capacity_bytes = device.capacity(),
//                           .workspace_bytes = ws_by_node};
//   LMS_ASSIGN_OR_RETURN(rep, lms::rewrite(train, cfg, opt));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "lms/graph.h"

namespace lms {

struct RewriteOptions {
  // Device bytes available when cfg.device_memory_limit is 0.
  uint64_t device_capacity_bytes = 0;
  // Kernel workspace bytes by NodeId (missing entries: 0).
  std::vector<uint64_t> workspace_bytes;
  // Measured seconds by NodeId from a profiling step; entries < 0 or missing
  // fall back to the cost model's roofline.
  std::vector<double> node_time_s;
  // Tensors kept until the end of the step; empty = the graph's loss.
  std::vector<std::string> fetched;
};

struct RewriteReport {
  bool enabled = false;  // false: the graph was left unchanged
  SwapPolicy policy = SwapPolicy::kAuto;
  std::vector<std::string> swapped;  // tensor names, in plan order
  uint64_t bytes_out_per_step = 0;   // D2H bytes per step
  uint64_t bytes_in_per_step = 0;    // H2D bytes per step
  uint64_t host_bytes = 0;           // pinned host bytes held by swapped tensors
  uint64_t budget_bytes = 0;         // device bytes planned for (0: none known)
  uint64_t usable_budget_bytes = 0;  // budget minus fragmentation_reserve (auto)
  uint64_t peak_bytes_before = 0;    // predicted profile peak (docs/memory_model.md)
  uint64_t peak_bytes_after = 0;
  // A budget is known and peak_bytes_after <= usable_budget_bytes. Always
  // true after a successful auto rewrite; tflms / vdnn / manual do not aim
  // for the budget, so check it.
  bool fits = false;
  double step_time_before_s = 0;         // simulated, no swaps
  double step_time_after_s = 0;          // simulated with the swaps and the budget
  double stall_s = 0;                    // compute-stream stall in the simulated step
  uint64_t working_set_limit_bytes = 0;  // no plan gets below this
  std::string working_set_node;          // the node that sets it
  std::string plan_text;                 // one line per swapped tensor
  std::string summary() const;           // human-readable, multi-line
};

// Runs the policy of `config` on `graph` (verified before and after) and
// inserts the swaps; `graph` is changed only on success. Errors:
// InvalidArgument for an invalid graph or config (manual: unknown tensor
// name; auto: no budget known); ResourceExhausted when the budget cannot be
// met (names the node and the bytes it needs) or the host limit is exceeded.
absl::StatusOr<RewriteReport> rewrite(Graph& graph, const LmsConfig& config,
                                      const RewriteOptions& options);
absl::StatusOr<RewriteReport> rewrite(Graph& graph, const LmsConfig& config);

}  // namespace lms
