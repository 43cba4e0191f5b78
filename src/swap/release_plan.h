// When the executor returns each device buffer of a step to the allocator:
// the single source of truth shared by the executor (src/runtime) and the
// planner's exact replay (replay.h), so predicted and measured memory agree
// byte for byte. See docs/memory_model.md, Note [Memory accounting].
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/graph.h"

namespace lms::swap {

struct ReleasePlan {
  std::vector<NodeId> order;                         // the schedule
  std::vector<TensorId> inputs;                      // graph inputs allocated before position 0
  std::vector<std::vector<TensorId>> release_after;  // by position: device tensors freed after it
  std::vector<bool> fetched;                         // by TensorId: kept until the end of the step
};

// Note [Swap-out release]: a device tensor is released after the issue of its
// last consumer, or of its producer when nothing reads it (fetched tensors at
// the end of the step), or later where a reader's release_after says so
// (below). When the last consumer is a swap_out (or an
// all_reduce, whose exchange reads on the communication stream), the release
// is stream-ordered: the host frees at once, and the compute stream waits
// for that copy before its next node (a stall, Note [Stall];
// src/runtime/executor.cc). So every release happens at a fixed point of the
// schedule and the allocation sequence — hence the BFC layout and its
// fragmentation — is the same in every run and in the planner's replay. A
// swap_out may move its source's release later with the string attribute
// `release_after` = a node name (a node by which the copy is predicted to be
// done, so the wait costs nothing), also when it is not the last reader (the
// joint planner does, Note [Joint planner]); an all_reduce likewise
// (training_graph names the first reader of its outputs). liveness.h's
// release_position is this rule.
// `fetched` names tensors kept until the end of the step (empty: the loss).
// InvalidArgument for an unknown fetch or a cyclic graph.
absl::StatusOr<ReleasePlan> release_plan(const Graph& graph,
                                         const std::vector<std::string>& fetched);

}  // namespace lms::swap
