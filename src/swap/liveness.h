// Analysis stage of the swap rewrite: live ranges of every tensor over the
// schedule and the device memory profile, exactly as the executor accounts it
// (docs/memory_model.md, Note [Memory accounting]).
//
//   LMS_ASSIGN_OR_RETURN(swap::Liveness live, swap::analyze(graph, {}));
//   swap::MemoryProfile prof = swap::memory_profile(live);
//   // prof.during[k]: device bytes in use while the node at position k runs.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/align.h"
#include "lms/graph.h"

namespace lms::swap {

struct LivenessOptions {
  // The BFC allocator's alignment: every allocation of b bytes occupies
  // rounded_size(b, alignment) bytes (common/align.h).
  uint64_t alignment_bytes = 256;
  // Tensors kept until the end of the step. Empty: the graph's loss (if set).
  std::vector<std::string> fetched;
  // Per-node workspace bytes indexed by NodeId (Kernel::workspace_bytes() as
  // the runtime reports it); empty or shorter means 0.
  std::vector<uint64_t> workspace_bytes;
};

// One tensor's device residency over schedule positions. A tensor occupies
// device memory during every position in [first, last] (inclusive).
struct TensorLife {
  bool on_device = false;   // false: host tensor, or a graph input nobody reads
  bool persistent = false;  // parameter / optimizer state: resident always
  bool input = false;       // graph input: allocated before position 0
  bool fetched = false;     // kept until the end of the step
  TensorRole role = TensorRole::kActivation;
  int32_t first = -1;         // position of the producer (0 for inputs)
  int32_t last = -1;          // position of the last consumer (or end of step)
  uint64_t bytes = 0;         // rounded_size of the tensor
  std::vector<int32_t> uses;  // positions of the consumers, ascending
};

struct Liveness {
  std::vector<NodeId> order;        // the schedule: order[position] = node
  std::vector<int32_t> position;    // by NodeId
  std::vector<TensorLife> tensors;  // by TensorId
  std::vector<uint64_t> workspace;  // by position
  uint64_t persistent_bytes = 0;
  uint64_t alignment_bytes = 256;
  // Note [Step commit]: the position of the first node that writes a
  // persistent tensor (an optimizer update or the step counter), size() if
  // none. Nothing at or after it may allocate, so a step that fails leaves
  // every persistent tensor as it was: swap-ins serving consumers there are
  // triggered before it. The default (no position) is for hand-built
  // Livenesses without persistent writers; analyze() always sets it.
  int32_t commit = std::numeric_limits<int32_t>::max();
  int32_t size() const { return static_cast<int32_t>(order.size()); }
};

// Per Note [Swap-out release], the position after which a tensor whose last
// reader is `reader` is released: the reader's own position, or later for a
// swap_out or all_reduce naming a later node in its `release_after`
// attribute (its copy or exchange reads the buffer on another stream until
// then). `position` is by NodeId.
int32_t release_position(const Graph& graph, NodeId reader, const std::vector<int32_t>& position);

// The commit position of Note [Step commit] for `graph` scheduled as `order`.
int32_t commit_position(const Graph& graph, const std::vector<NodeId>& order);

// Live ranges for `graph` in schedule(graph) order. InvalidArgument if the
// graph has no valid schedule, alignment is 0, or a fetched name is unknown.
absl::StatusOr<Liveness> analyze(const Graph& graph, const LivenessOptions& options);

struct MemoryProfile {
  std::vector<uint64_t> during;  // device bytes in use during each position
  uint64_t peak = 0;
  int32_t peak_position = -1;  // first position reaching the peak
};

// The profile of docs/memory_model.md point 3: persistent tensors, inputs from
// position 0, outputs allocated at issue, workspace during the node, frees
// after the last consumer (fetched tensors stay).
MemoryProfile memory_profile(const Liveness& live);

// Working set of each position: the node's inputs, outputs and workspace plus
// persistent tensors, fetched tensors already produced, graph inputs not
// yet read (they are uploaded before position 0 and cannot be swapped out
// before their first read), and tensors held between two uses that no plan
// may free in between: the later use at or past live.commit (Note [Step
// commit]; idle_intervals offers no such gap), as a weight gradient waiting
// for its optimizer update. No swap or recompute plan can bring the device
// bytes during a node below its working set.
std::vector<uint64_t> working_sets(const Liveness& live);

struct WorkingSetLimit {
  uint64_t bytes = 0;
  int32_t position = -1;  // the first position with the largest working set
};
WorkingSetLimit working_set_limit(const Liveness& live);

// A gap between two consecutive uses of a tensor (the producer counts as the
// first use): the tensor is resident but idle at positions (after, before).
struct IdleInterval {
  TensorId tensor = kNoTensor;
  int32_t after = -1;   // position of the use before the gap
  int32_t before = -1;  // position of the use after the gap
  double seconds = 0;   // predicted compute time of positions after+1..before-1
};

// Idle intervals of every non-persistent, non-fetched device tensor with at
// least one node between two uses (for a graph input, from its first read),
// the later use before live.commit: a swap-in for a use past the commit
// would allocate in the update stretch. `node_time_s` is by position.
std::vector<IdleInterval> idle_intervals(const Liveness& live,
                                         const std::vector<double>& node_time_s);

}  // namespace lms::swap
