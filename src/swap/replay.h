// Replay of a step's device allocations on a BFC allocator (with a fake
// sub-allocator that never touches memory), in the order a dynamic
// allocator would see them. The executor does not allocate inside a step
// (Note [Step layout]); this replay is what it would cost if it
// did, and bench/placement_bench compares the two.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/graph.h"

namespace lms::swap {

struct ReplayOptions {
  uint64_t capacity_bytes = 0;            // device memory region (the budget)
  uint64_t alignment_bytes = 256;         // the allocator's alignment
  std::vector<uint64_t> workspace_bytes;  // by NodeId; missing entries are 0
  std::vector<std::string> fetched;       // empty: the graph's loss
};

struct ReplayResult {
  uint64_t peak_bytes = 0;        // allocator peak over the step, persistent included
  uint64_t persistent_bytes = 0;  // allocated before the step
  double peak_fragmentation = 0;  // allocator fragmentation at the peak
};

// Allocates the persistent tensors (tensor-id order, as Session::create
// does), the consumed graph inputs, then per node its outputs and its
// workspace (freed after the node), freeing tensors as release_plan() says. ResourceExhausted
// naming the node (or tensor) and the allocator's message when an allocation fails.
absl::StatusOr<ReplayResult> replay_step(const Graph& graph, const ReplayOptions& options);

}  // namespace lms::swap
