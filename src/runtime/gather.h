// The parts of lms::gather_facts (lms/facts.h) that lms::rewrite's Device
// overload shares: facts of a graph already lowered for its device, and the
// carrying of facts between a graph and its lowered form.
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "lms/device.h"
#include "lms/distributed.h"
#include "lms/facts.h"
#include "lms/graph.h"
#include "lms/rewrite.h"

namespace lms {

// FailedPrecondition, naming `who`, when `device` holds allocations.
absl::Status check_device_empty(const Device& device, std::string_view who);

// gather_facts for `lowered`, a graph lower_for has already run on;
// options.known is by its NodeIds, and so is the result.
absl::StatusOr<PlanningFacts> gather_lowered_facts(const Graph& lowered, const LmsConfig& config,
                                                   Device& device, Communicator* communicator,
                                                   const GatherOptions& options);

// Facts by NodeId of a graph carried to its lowered form (node_map from
// lower_for, `lowered_nodes` its node count): a fused node's time is the sum
// of its nodes' (-1, the roofline, where one has none), its workspace the
// sum of theirs. Missing time entries are unknown (-1); workspaces without
// one entry per node are left unset (not of this graph).
PlanningFacts facts_to_lowered(const PlanningFacts& facts, const std::vector<NodeId>& node_map,
                               int lowered_nodes);

// The inverse for facts_to_lowered's sums: each lowered node's entry goes to
// the first node that maps to it, and the others get 0.
PlanningFacts facts_from_lowered(const PlanningFacts& facts, const std::vector<NodeId>& node_map);

}  // namespace lms
