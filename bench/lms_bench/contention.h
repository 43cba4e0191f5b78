// lms-bench contention: independent replicas of one model, each on its own
// emulated device with LMS, sharing one host link (lms/device.h HostLink),
// as one model per GPU with two GPUs behind one PCIe switch. For each count
// of devices per link (1 and 2 by default) every device trains the same
// swapped plan in a thread of its own, the devices starting each step
// together; the table gives, per device, the copy throughput each way
// (bytes copied / time its copy stream was busy, from the profiler's
// Recorder), the compute utilisation (compute-stream busy / step time) and
// the step time, next to the simulator's prediction of the step
// (LmsConfig::link_devices = the count: each copy gets 1/k of the link).
// The compute time per step is printed too: the simulator takes each node's
// time measured alone, so where the devices' compute slows down together
// (other work on the machine's cores, shared memory bandwidth) the
// prediction errs by that, not by the link.
//
// Each device computes on one thread (CpuDeviceOptions::compute_threads = 1)
// so that two devices on a 2-core machine do not share cores: what they
// share is the link. The plan is made once per count, from node times and a
// link profiled (lms::profile_step) on one device alone on a link of the
// same options, under a device capacity of budget_fraction of the no-LMS
// peak, so the step must swap.
//
//   LMS_ASSIGN_OR_RETURN(lms::bench::ContentionResult r,
//                        lms::bench::run_contention(factory, {.size = 16}, std::cerr));
//   std::cout << lms::bench::format_contention(r);
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "lms/device.h"
#include "model_factory.h"
#include "nlohmann/json.hpp"

namespace lms::bench {

// The simulator's stated tolerance for a predicted step time: within 20% of
// the measured one. The measured time model predicts swapped VDSR and 3-D
// U-Net steps within 10% (median) and 20% (single runs) on this loaded
// 2-core machine (bench/README.md, "Time model").
inline constexpr double kStepTimeTolerance = 0.20;

// The default link, bytes/s each way: slow enough that copies matter on
// this CPU. A swapped VDSR batch 16 step (48x48, one compute thread, 90 MiB
// each way) copies about 0.9 s each way alone, against about 1.8 s of
// compute: the copies hide behind compute on a link of its own, and stall
// it when two devices share the link. At 250 MB/s they hide either way.
inline constexpr double kContentionLinkBytesPerS = 100e6;

struct ContentionOptions {
  int64_t size = 16;                      // batch (VDSR) or volume side (U-Net)
  int steps = 3;                          // per device; the first is a warm-up, >= 2
  std::vector<int64_t> devices = {1, 2};  // devices per link, one configuration each, 1..16
  // The policy and the rest of the plan; its [link] is ignored (the link
  // below is profiled) and link_devices is set per configuration.
  LmsConfig config;
  HostLinkOptions link = {.d2h_bytes_per_s = kContentionLinkBytesPerS,
                          .h2d_bytes_per_s = kContentionLinkBytesPerS,
                          .latency_s = 5e-6};
  uint64_t host_pool_bytes = uint64_t{16} << 30;  // per device, reserved lazily
  double budget_fraction = 0.6;                   // device capacity / no-LMS peak, (0, 1)
  std::string trace_dir;  // a Chrome trace per device and configuration; empty = none
};

// One device of one configuration, over the steps after the first.
struct ContentionDevice {
  std::vector<double> step_s;  // every step, the warm-up first
  double mean_step_s = 0;
  double mean_stall_s = 0;          // StepResult::stall_s (Note [Stall])
  double h2d_bytes_per_s = 0;       // bytes copied in / busy time of the H2D stream
  double d2h_bytes_per_s = 0;       // likewise out
  double compute_s = 0;             // compute-stream busy per step, seconds
  double compute_utilisation = 0;   // compute_s / step time, [0, 1]
  uint64_t bytes_h2d_per_step = 0;  // StepResult, last step
  uint64_t bytes_d2h_per_step = 0;
};

struct ContentionCase {
  int64_t devices = 1;  // per link
  // The simulator (RewriteReport of the plan, link_devices = devices).
  double predicted_step_s = 0;
  double predicted_stall_s = 0;
  uint64_t planned_bytes_out_per_step = 0;
  uint64_t planned_bytes_in_per_step = 0;
  std::vector<ContentionDevice> runs;  // one per device
  // Means over the devices.
  double mean_step_s = 0;
  double h2d_bytes_per_s = 0;
  double d2h_bytes_per_s = 0;
  double compute_s = 0;
  double compute_utilisation = 0;
  double error = 0;  // predicted / measured mean step - 1
  bool within_tolerance() const;
};

struct ContentionResult {
  std::string model;
  std::string size_label;
  int64_t size = 0;
  std::string data_note;
  uint64_t budget_bytes = 0;       // each device's capacity
  uint64_t no_lms_peak_bytes = 0;  // predicted, RewriteReport::peak_bytes_before
  HostLinkOptions link;            // the shared link's throttle
  LinkConfig measured_link;        // profile_step on one device alone on such a link
  double profile_s = 0;            // time profile_step took
  int steps = 0;
  std::vector<ContentionCase> cases;  // in the order of ContentionOptions::devices
};

// Errors: InvalidArgument for steps < 2, a device count outside 1..16, a
// fraction outside (0, 1) or bad link options (naming the flag); the errors
// of planning (ResourceExhausted when no plan fits the budget) and of the
// runs.
absl::StatusOr<ContentionResult> run_contention(const ModelFactory& factory,
                                                const ContentionOptions& options,
                                                std::ostream& log);

// The table (a row per device, a mean row per shared configuration), a line
// comparing each count with 1 device per link, and the simulator's line:
// its tolerance and whether every configuration meets it.
std::string format_contention(const ContentionResult& result);
nlohmann::json to_json(const ContentionResult& result);

}  // namespace lms::bench
