// lms-bench overhead: what swapping costs at a size that fits both ways.
// Three runs of the same model and feeds: without LMS; with LMS forced to
// swap (auto policy, device_memory_limit = budget_fraction of the predicted
// no-LMS peak) on an unthrottled link; and the same with the device's copies
// throttled to the config's link. For the LMS runs the simulator's
// prediction (RewriteReport step_time_after_s / stall_s, fed with the node
// times measured in the no-LMS run) is printed next to the measurement
// (StepResult step_s / stall_s; both stalls are Note [Stall]), with the
// measured host waits (StepResult::host_wait_s) in a column of their own.
// Predicted vs measured stall across link speeds: bench/time_model_bench.cc.
//
//   LMS_ASSIGN_OR_RETURN(lms::bench::OverheadResult r,
//                        lms::bench::run_overhead(factory, {.size = 8}, std::cerr));
//   std::cout << lms::bench::format_overhead(r);
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "model_factory.h"
#include "nlohmann/json.hpp"
#include "run_case.h"

namespace lms::bench {

struct OverheadOptions {
  int64_t size = 8;
  int steps = 3;
  LmsConfig config;              // its link is the throttled case's bandwidth and latency
  DeviceSetup device;            // capacity, host pool, threads (its throttle is ignored)
  double budget_fraction = 0.6;  // of the predicted no-LMS peak, (0, 1)
};

struct OverheadCase {
  std::string name;
  double link_bytes_per_s = 0;  // device throttle; 0 = unthrottled
  CaseResult row;
  double overhead_pct = 0;  // (row.mean_step_s / baseline - 1) * 100
};

struct OverheadResult {
  std::string model;
  std::string size_label;
  int64_t size = 0;
  uint64_t capacity_bytes = 0;
  uint64_t budget_bytes = 0;        // the forced LMS budget
  double memcpy_bytes_per_s = 0;    // measured, the "unthrottled" link of the cost model
  CaseResult baseline;              // LMS off
  std::vector<OverheadCase> cases;  // unthrottled, throttled
};

// Errors: FailedPrecondition when the size does not fit without LMS (names
// the capacity); InvalidArgument for steps < 2 (time/step needs a step after
// the first) or a fraction outside (0, 1); errors of the runs.
absl::StatusOr<OverheadResult> run_overhead(const ModelFactory& factory,
                                            const OverheadOptions& options, std::ostream& log);

std::string format_overhead(const OverheadResult& result);
nlohmann::json to_json(const OverheadResult& result);

// Mean seconds by NodeId of `graph` of the compute-stream nodes recorded in
// steps after the first (all steps when only one); -1 where none ran, but 0
// for a conv that ran fused into its relu, whose time holds both.
std::vector<double> measured_node_times(const Recorder& recorder, const Graph& graph);

}  // namespace lms::bench
