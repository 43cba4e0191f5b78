// lms::gather_facts: everything a plan depends on that the device, not the
// user, decides (PlanningFacts), gathered once: the device's capacity,
// allocator alignment and pinned host pool, every kernel's workspace on the
// device, and with time_model "measured" each node's time, the least-
// workspace kernels' times, the copy link in each direction and a roofline
// calibrated on the device. lms::rewrite(graph, config, device) is
// gather_facts followed by the pass; a program that plans several times
// (several budgets, policies or ranks) gathers once and passes the facts.
//
//   LMS_ASSIGN_OR_RETURN(lms::PlanningFacts facts, lms::gather_facts(train, cfg, *device));
//   for (uint64_t budget : budgets) {
//     lms::Graph g = train;
//     cfg.device_memory_limit = budget;
//     LMS_ASSIGN_OR_RETURN(lms::RewriteReport r, lms::rewrite(g, cfg, *device, {}, facts));
//   }
//
// With a communicator (data parallelism, lms/distributed.h), rank 0 alone
// measures the times and the link and every rank receives them, so every
// rank plans the same step; each rank's own device gives the memory facts.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "lms/graph.h"
#include "lms/rewrite.h"

namespace lms {

class Communicator;
class Device;

struct GatherOptions {
  // The tensors kept to the end of the step and whether conv + relu fuse
  // (RewriteOptions): the facts are those of the graph as the device's
  // passes leave it for that rewrite.
  RewriteOptions rewrite;
  // false: the facts of the graph exactly as given, with no device pass
  // run, for planning it with the facts overload of lms::rewrite (which runs
  // none either) and a session that runs it as it is.
  bool lower = true;
  // Facts the caller already has (by NodeId of the graph given), which the
  // device then does not measure again: node_time_s, least_node_time_s,
  // link, roofline, workspace_bytes and least_workspace_bytes (used only
  // when they have one entry per node). ranks and allreduce_bytes_per_s are
  // taken as given (a communicator sets ranks).
  PlanningFacts known;
  // With config.time_model "measured": profile the node times and the link
  // (lms::profile_step). false: the memory facts only (as lms::rewrite does
  // with LMS disabled).
  bool measure_times = true;
  // With measure_times: fit the copy link too. false: the link is
  // known.link, or unset (the config's [link]): for a device whose link is
  // throttled to each target in turn.
  bool measure_link = true;
  // With config.kernel_choice other than "default": the workspaces, and
  // (least_workspace_when_faster with joint actions) the times, of the
  // least-workspace convolution kernels too.
  bool least_workspace_kernels = true;
};

// The facts for planning `graph` with `config` on `device`. Vectors by
// NodeId are of `graph` as given: a node that a device pass fused into
// another (RewriteReport::fused) has time and workspace 0, and the node it
// was fused into carries the fused kernel's; lms::rewrite sums them back.
// The device is left as it was: nothing allocated, no event sink.
// Errors: FailedPrecondition when the device holds allocations; those of
// verify(graph), of compiling a kernel (Unimplemented for an op the device
// has no kernel for) and of lms::profile_step; with a communicator, those of
// its collectives (every rank fails alike when rank 0 cannot measure).
absl::StatusOr<PlanningFacts> gather_facts(const Graph& graph, const LmsConfig& config,
                                           Device& device, Communicator* communicator = nullptr,
                                           const GatherOptions& options = {});

}  // namespace lms
