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
#pragma once

#include "absl/status/status.h"
#include "lms/graph.h"
#include "swap/liveness.h"
#include "swap/plan.h"

namespace lms::swap {

// `live` must be the analysis of `graph` the plan was made for.
// InvalidArgument from validate_plan, or when a swap name is already taken
// (the graph was rewritten before); the graph is unchanged then. Verifies the
// result (verify()).
absl::Status insert_swaps(Graph& graph, const Liveness& live, const SwapPlan& plan);

}  // namespace lms::swap
