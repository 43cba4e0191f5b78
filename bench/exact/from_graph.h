// The exact reference's problem (exact_plan.h) for a graph's step as the
// planner sees it (src/swap: the liveness, the predicted node times and
// the auto planner's options), and its plans in the planner's terms.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "exact_plan.h"
#include "lms/graph.h"
#include "swap/liveness.h"
#include "swap/plan.h"
#include "swap/planner.h"

namespace lms::exact {

// Positions and tensors are the liveness's (Problem::tensors by TensorId);
// the gaps are swap::idle_intervals of at least options.min_tensor_bytes,
// the limit usable_budget(options.budget_bytes, fragmentation_reserve), the
// copies' seconds latency + bytes / bandwidth, the upload each fed input's
// (the simulator's input_upload_s). `times` by position.
absl::StatusOr<Problem> problem_from(const Graph& graph, const swap::Liveness& live,
                                     const std::vector<double>& times,
                                     const swap::AutoOptions& options);

// The plan the insertion builds (swap::SwapPlan, as the auto planner's
// build_plan makes it) for `choices`.
swap::SwapPlan to_swap_plan(const Problem& problem, const swap::Liveness& live,
                            const std::vector<Choice>& choices);

// The choices of a plan made for `live` (the auto planner's), by gap;
// InvalidArgument naming a swap-in that serves no gap of the problem.
absl::StatusOr<std::vector<Choice>> choices_from(const Problem& problem, const swap::Liveness& live,
                                                 const swap::SwapPlan& plan);

}  // namespace lms::exact
