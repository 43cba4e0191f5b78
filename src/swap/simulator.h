// A discrete-event model of the executor of docs/memory_model.md, used to
// predict a step before running it: the host thread issues nodes in schedule
// order (instantaneous unless blocked); compute, D2H and H2D streams each run
// their nodes in order, a node waiting for the cross-stream nodes it depends
// on (data and control edges, as event waits); outputs are allocated at issue;
// a tensor last read by a swap-out is freed when that D2H copy completes; when
// an allocation would exceed the device budget the host waits for the oldest
// deferred free.
//
//   swap::CostModel cost(graph, {});
//   LMS_ASSIGN_OR_RETURN(swap::Liveness live, swap::analyze(graph, {}));
//   swap::SimResult r = swap::simulate(graph, live, swap::times_by_position(cost, live.order),
//                                      {.device_budget_bytes = 8 << 30});
#pragma once

#include <cstdint>
#include <vector>

#include "lms/graph.h"
#include "swap/liveness.h"

namespace lms::swap {

struct SimOptions {
  uint64_t device_budget_bytes = 0;  // 0: unlimited (never blocks)
  // false: docs/memory_model.md point 4, a buffer last read by a swap-out is
  // returned when the copy completes (the host waits only when an allocation
  // needs it). true: the host waits for the copy at the release point itself,
  // so every release happens at a fixed point of the schedule.
  bool wait_at_release = false;
};

struct SimResult {
  double step_time_s = 0;  // last completion on any stream
  double compute_s = 0;    // busy time of the compute stream
  // Compute-stream idle time between its first and last node: waits for
  // swap-ins (and sync swap-outs) plus host blocking on deferred frees.
  double stall_s = 0;
  double host_blocked_s = 0;  // host time spent waiting on deferred frees
  uint64_t peak_device_bytes = 0;
  uint64_t bytes_d2h = 0;
  uint64_t bytes_h2d = 0;
  bool out_of_memory = false;  // an allocation exceeded the budget with nothing to wait for
  int32_t oom_position = -1;
  std::vector<double> start_s;  // by position
  std::vector<double> end_s;    // by position
};

// `node_time_s` by position (times_by_position). The graph must be the one
// `live` analyses.
SimResult simulate(const Graph& graph, const Liveness& live, const std::vector<double>& node_time_s,
                   const SimOptions& options);

}  // namespace lms::swap
