// Insertion stage of the swap rewrite: applies a SwapPlan to the graph in
// place (Grappler-style deterministic names).
//
//   LMS_RETURN_IF_ERROR(swap::insert_swaps(graph, live, plan));
//
// For each item: a `swap_out` node "swap_out/<tensor>" reading the tensor,
// whose output (role kHost) is also named "swap_out/<tensor>"; for swap-in k a
// `swap_in` node "swap_in/<tensor>/<k>" reading the host tensor with a
// control input from its trigger, its output (same role as the tensor, an
// activation for graph inputs) replacing the tensor in the served consumers;
// for sync_before, a control edge swap_out -> that node. The preferred order
// puts, right after each node of the old schedule, the swap-outs anchored
// there and then the swap-ins it triggers (plan.h relies on this order), so
// schedule() reproduces the planned positions.
//
// Note [Recomputation]
// A restore marked `recompute` (plan.h) is served by clones of the tensor's
// producer inserted right after the trigger (after the swap-outs and swap-ins
// anchored there): node "recompute/<tensor>/<k>" (k: the restore's index
// among the item's swap_ins) with the producer's op and attributes, its
// output replacing the tensor in the served consumers. Each input of the
// producer is read in the version live right after the trigger: the original
// when its next use after the trigger reads the original, the copy of a
// swap-in triggered at or before the trigger, or the output of an earlier
// recompute; an input with no such version (dead there, or swapped in or
// recomputed later) is itself recomputed first by a clone named
// "recompute/<tensor>/<k>/<its producer>", and so on back to live inputs
// (gradient checkpointing's segment recomputation, Chen et al. 2016).
// Each clone gets a control input from the trigger. Clones run the same
// kernel on the same bytes, so the results are bit-identical to the
// originals; parameters are read before the first update (recompute restores
// serve uses before live.commit), so they see the same weights.
#pragma once

#include "absl/status/status.h"
#include "lms/graph.h"
#include "swap/liveness.h"
#include "swap/plan.h"

namespace lms::swap {

// Where a node of the rewritten graph comes from: for a recompute clone, the
// node it copies and the restore it was inserted for (every clone serves one
// restore: a restore that shares another's chain reads that restore's
// output); the defaults for every other node.
struct CloneOrigin {
  NodeId clone_of = kNoNode;
  int32_t item = -1;     // index into SwapPlan::items
  int32_t restore = -1;  // index into that item's swap_ins
};

// `live` must be the analysis of `graph` the plan was made for.
// InvalidArgument from validate_plan, when a swap or recompute name is
// already taken (the graph was rewritten before), or when a recompute needs a
// tensor that is neither live at its trigger nor recomputable; the graph is
// unchanged then. Verifies the result (verify()). `origins`, when given, is
// set to one entry per node of the result.
absl::Status insert_swaps(Graph& graph, const Liveness& live, const SwapPlan& plan,
                          std::vector<CloneOrigin>* origins = nullptr);

// insert_swaps() on a copy of `graph`, returned: the one copy a candidate
// plan needs (the search makes hundreds).
absl::StatusOr<Graph> with_swaps(const Graph& graph, const Liveness& live, const SwapPlan& plan,
                                 std::vector<CloneOrigin>* origins = nullptr);

}  // namespace lms::swap
