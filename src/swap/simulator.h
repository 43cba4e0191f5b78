// A discrete-event model of the executor of docs/memory_model.md, used to
// predict a step before running it: the host thread issues nodes in schedule
// order (instantaneous unless blocked); compute, D2H and H2D streams each run
// their nodes in order, a node waiting for the cross-stream nodes it depends
// on (data and control edges, as event waits) and a copy also for the compute
// stream to reach the point where it was issued; all_reduce nodes run on a
// fourth stream (communication) like copies, their inputs released
// stream-ordered (Note [All-reduce]); at the commit the compute stream waits
// for every copy and all-reduce issued so far (Note [Step commit]); outputs
// are allocated at issue. A tensor last read by a swap-out is released either
// at its fixed point with the compute stream waiting for the copy, as the
// executor does (wait_at_release, Note [Swap-out release]), or when that D2H
// copy completes, the host waiting for the oldest such deferred free when an
// allocation would exceed the device budget.
//
// Stall (Note [Stall]) is the compute stream's idle time between its first
// and last node. The host never holds compute back except while waiting for
// memory, so in this model that idle time is exactly the compute stream
// waiting on copies: a swap-in not yet arrived (data edges), a copy named by
// a control edge (TFLMS sync_mode), a swap-out still reading a released
// buffer (wait_at_release) or, without wait_at_release, the host's wait for a
// swap-out to return memory, and the commit's wait for the copies. The same
// waits are what the executor measures as StepResult::stall_s.
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
  // true: what the executor does (docs/memory_model.md point 4): a buffer
  // last read by a swap-out is released at its fixed point of the schedule
  // and the compute stream's next node waits for the copy; the host never
  // blocks. false: a model of deferred frees, the buffer returns when the
  // copy completes and the host waits only when an allocation needs it.
  bool wait_at_release = false;
  // Seconds the host spends uploading the step's inputs before it issues
  // the first node: the executor uploads every fed graph input
  // synchronously at the start of the step (Executor::upload_inputs), so
  // every stream starts after it and the step includes it.
  double input_upload_s = 0;
};

struct SimResult {
  double step_time_s = 0;  // last completion on any stream
  double compute_s = 0;    // busy time of the compute stream
  // Compute-stream idle time between its first and last node: its waits on
  // copies (Note [Stall], see above).
  double stall_s = 0;
  // Host time spent waiting on deferred frees (never with wait_at_release).
  double host_blocked_s = 0;
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
