// One row of the lms-bench table: a model at one size, trained for a few
// steps on a fresh emulated device with LMS off or on.
//
//   lms::bench::CaseSpec spec{.size = 16, .lms = true, .steps = 2};
//   spec.device.capacity_bytes = 256 << 20;
//   LMS_ASSIGN_OR_RETURN(lms::bench::CaseResult row, lms::bench::run_case(factory, spec));
//   if (!row.ok) std::cout << row.status;   // "OOM at conv7" / "OOM (planner: ...)"
//
// Running out of device memory is a result (row.ok == false), not an error:
// the errors returned are those of a bad model, config or device setup.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "lms/device.h"
#include "lms/profiler/recorder.h"
#include "lms/rewrite.h"
#include "model_factory.h"

namespace lms::bench {

// The emulated device of a run (lms::make_cpu_device; see lms::CpuDeviceOptions).
struct DeviceSetup {
  // false: the CPU-emulated device; true: CUDA GPU 0, whose copies run at the
  // real link's speed (the bandwidth fields below are then no throttle).
  bool cuda = false;
  uint64_t capacity_bytes = uint64_t{256} << 20;
  uint64_t host_pool_bytes = uint64_t{16} << 30;  // reserved lazily
  double d2h_bytes_per_s = 0;                     // 0 = unthrottled
  double h2d_bytes_per_s = 0;
  double copy_latency_s = 0;
  int compute_threads = 0;  // 0 = all cores
};

// The device of a setup: make_cpu_device or make_cuda_device.
absl::StatusOr<std::unique_ptr<Device>> make_device(const DeviceSetup& d);

struct CaseSpec {
  int64_t size = 0;  // batch (VDSR) or volume side (U-Net)
  bool lms = false;
  int steps = 2;
  // LMS settings when `lms`, planned by the Device overload of lms::rewrite
  // on the run's device: with device_memory_limit 0 the auto policy plans
  // for the device capacity, always within its pinned host pool.
  // time_model says where the planner's times come from (lms/config.h):
  // "measured" profiles the graph and the link on the device first;
  // "roofline" predicts with the config's [cost_model] and [link] (and
  // node_time_s below where given).
  LmsConfig config;
  DeviceSetup device;
  // Measured seconds by NodeId of the graph before rewriting (optional;
  // see PlanningFacts::node_time_s).
  std::vector<double> node_time_s;
  // The same for the least-workspace kernels (optional; see
  // PlanningFacts::least_node_time_s): with joint actions the plan may then
  // use them wherever that is predicted faster.
  std::vector<double> least_node_time_s;
  bool record = false;  // keep a profiler Recorder of the run
};

struct CaseResult {
  int64_t size = 0;
  bool lms = false;
  bool ok = false;
  bool planner_oom = false;    // LMS on and lms::rewrite found no plan: nothing was run
  std::string status;          // "ok", "OOM at <node>", "OOM (planner: ...)"
  std::string error;           // the full message when !ok
  std::vector<double> step_s;  // every step that completed
  std::vector<float> losses;
  double mean_step_s = 0;          // mean over the steps after the first (the only one if 1)
  double mean_stall_s = 0;         // likewise; StepResult::stall_s (Note [Stall])
  double mean_host_wait_s = 0;     // likewise; StepResult::host_wait_s, not stall
  uint64_t peak_device_bytes = 0;  // max over steps, persistent tensors included
  uint64_t peak_pinned_host_bytes = 0;
  uint64_t bytes_d2h_per_step = 0;  // measured, last step
  uint64_t bytes_h2d_per_step = 0;
  size_t swapped_tensors = 0;
  size_t recomputed_tensors = 0;  // RewriteReport::recomputed
  // The plan auto chose (RewriteReport::actions; with joint, the fastest
  // predicted of joint, swap-only and recompute-only).
  AutoActions plan_actions = AutoActions::kSwap;
  // What decides the rewritten graph besides the model: the plan text and
  // the least-workspace kernels (RewriteReport); equal for equal graphs.
  std::string plan_signature;
  // Where the LMS plan's predicted times came from (RewriteReport::time_model,
  // e.g. "roofline 1000 GFLOP/s, ..." or "measured on cpu: ..."); empty for
  // rows without a plan (LMS off, planner OOM).
  std::string time_model;
  // Planner figures (lms::rewrite on this graph and budget).
  uint64_t budget_bytes = 0;                 // what LMS planned for (capacity if no limit)
  uint64_t predicted_peak_before_bytes = 0;  // no swaps, profile peak
  uint64_t predicted_peak_after_bytes = 0;   // persistent + arena of the step as run (plan or not)
  uint64_t working_set_limit_bytes = 0;      // no plan gets below this
  std::string working_set_node;
  double predicted_step_s = 0;   // simulated step with the plan
  double predicted_stall_s = 0;  // simulated stall (Note [Stall])
  // Device bytes by schedule position: the plan's (RewriteReport) and the
  // executor's count in the last step (StepResult); equal when the memory
  // contract holds.
  std::vector<uint64_t> planned_bytes_by_position;
  std::vector<uint64_t> measured_bytes_by_position;
  std::shared_ptr<Recorder> recorder;  // when spec.record (also for OOM runs)
  int64_t steps_attempted = 0;         // step ids 0..steps_attempted-1 in the recorder
};

absl::StatusOr<CaseResult> run_case(const ModelFactory& factory, const CaseSpec& spec);

// Note [Fair baseline]: the rows and probes without LMS run the best program
// that neither swaps nor recomputes: `graph` as the Device overload of
// lms::rewrite with LMS disabled leaves it (conv + relu fusion, blocked
// layouts, the step layout the session then uses) and, when
// config.kernel_choice is not "default" and the fast kernels do not fit the
// whole device, the least-workspace convolution kernels where they are
// smaller (RewriteReport::least_workspace_nodes lists them). So its `fits`
// and its real step agree, and the LMS / no-LMS ratio is measured against
// that program. `known`: node times for its predicted step, as for
// plan_figures_without_lms. `graph` becomes the planned graph; `device`
// must hold no allocations. Errors: those of lms::rewrite.
absl::StatusOr<RewriteReport> plan_without_lms(Graph& graph, const LmsConfig& config,
                                               Device& device, const std::string& loss,
                                               const PlanningFacts& known = {});

// The figures of the LMS budget for `graph` as it is: lms::rewrite on
// `device` with LMS disabled at config.device_memory_limit (the Device
// overload, so the graph an LMS plan on `device` starts from: conv + relu
// fusion, blocked layouts). With config.kernel_choice other than "default",
// working_set_limit_bytes and working_set_node are those with each
// convolution on the kernel of the smaller workspace, the least any plan
// reaches. `known`: node times the prediction uses (PlanningFacts, as
// CaseSpec::node_time_s gives them to the LMS plan), so the step without
// LMS is predicted by the same time model as the plans. `graph` is
// unchanged; `device` must hold no allocations. Errors: those of
// lms::rewrite.
absl::StatusOr<RewriteReport> plan_figures_without_lms(const Graph& graph, const LmsConfig& config,
                                                       Device& device, const std::string& loss,
                                                       const PlanningFacts& known = {});

// "OOM at <node>" (or at a persistent tensor, or the arena) from the
// failure site an out-of-memory status of the runtime carries
// (lms::failure_site); "OOM" when it carries none.
std::string oom_status(const absl::Status& status);

}  // namespace lms::bench
