// lms-bench ratio: what LMS costs on the emulated device when its link is
// throttled to a target system's compute-to-link ratio.
//
// A GPU computes gpu_flops_per_s and reaches host memory at link_bytes_per_s;
// the emulated device computes at the rate measured here, so a link of
//   throttle_bytes_per_s = device_flops_per_s * link_bytes_per_s / gpu_flops_per_s
// gives it the same bytes of link per FLOP of compute, and a swap hides
// behind compute (or stalls it) as it would on the target. device_flops_per_s
// is lms::calibrate_cost_model's compute_flops_per_s: the best rate of a
// convolution node of the model being run, profiled alone (lms::profile_step),
// a peak like the datasheet figures of the presets (Note [Ratio basis]).
//
// For each model, target and oversubscription k (device capacity = the
// no-LMS peak, RewriteReport::peak_bytes_after with LMS off, / k) the model
// trains a few steps (run_case) under three auto plans, LmsConfig::
// auto_actions = swap, recompute and joint; each plan's throughput relative
// to the ideal is (step time without LMS on a device of unlimited memory on
// the same throttled link) / (the plan's step time), printed next to the
// planner's predicted step (RewriteReport::step_time_after_s).
//
// Note [Ratio threads]
// The device computes on one thread by default (RatioOptions::device,
// lms-bench ratio without --threads). On this 2-core machine, shared with
// other work, a tiny VDSR step took 0.39 s on two compute threads and
// 0.017 s on one (lms-bench overhead, depth 4, 8 channels, batch 16): a
// thread pool that waits on a busy core makes step times, and with them
// every ratio, noise. One thread also keeps the measured rate and the step
// times of one run comparable.
//
//   LMS_ASSIGN_OR_RETURN(lms::bench::RatioModel m,
//                        lms::bench::run_ratio(factory, {.size = 8}, std::cerr));
//   lms::bench::RatioResult r{.models = {m}};
//   std::cout << lms::bench::format_ratio(r);
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

// A target system: a GPU's dense peak rate (FP32, or tensor-core TF32 for
// the -tc presets) and its link to host memory, one direction.
struct LinkPreset {
  std::string name;   // --preset word; "custom" for --gpu-flops / --link-ratio
  std::string label;  // "H100 + PCIe Gen5"
  double gpu_flops_per_s = 0;
  double link_bytes_per_s = 0;
  // The fraction of gpu_flops_per_s a training step's convolutions reach on
  // the GPU, in (0, 1] (Note [Ratio basis]): 1 for the FP32 presets, 0.5
  // for the tensor-core ones; --gpu-efficiency sets it for every target.
  double efficiency = 1.0;
};

// v100-pcie3, v100-nvlink2, h100-pcie5, gh200-c2c (FP32 peaks) and
// h100-pcie5-tc, h200-pcie5-tc, gh200-c2c-tc (TF32 tensor cores) and
// h100-pcie5-bf16, h200-pcie5-bf16, gh200-c2c-bf16 (BF16 tensor cores;
// ratio.cc: sources).
const std::vector<LinkPreset>& link_presets();

// "h100-pcie5,v100-nvlink2" or "all" -> presets, in the order given.
// InvalidArgument naming the unknown word and the allowed names.
absl::StatusOr<std::vector<LinkPreset>> parse_presets(const std::string& text);

// "60TFLOP/s" -> 6e13: a positive number with unit FLOP/s, GFLOP/s, TFLOP/s
// or PFLOP/s (powers of 1000). InvalidArgument naming the unit otherwise.
absl::StatusOr<double> parse_flop_rate(const std::string& text);

// The emulated device's link for `target`, bytes/s: the formula above with
// the GPU's rate gpu_flops_per_s * efficiency.
double throttled_link_bytes_per_s(double device_flops_per_s, const LinkPreset& target);

struct RatioOptions {
  int64_t size = 8;                                    // batch (VDSR) or volume side (U-Net)
  int steps = 5;                                       // per run; the first is a warm-up, >= 2
  std::vector<double> oversubscription = {1.5, 2, 4};  // each > 1
  std::vector<LinkPreset> targets = {link_presets()[1], link_presets()[4]};
  std::vector<AutoActions> plans = {AutoActions::kSwap, AutoActions::kRecompute,
                                    AutoActions::kJoint};
  // The policy and the rest of the plan (auto_actions, the link and the cost
  // model are set per run) and its link's copy latency.
  LmsConfig config;
  // Host pool and compute threads (Note [Ratio threads]); capacity and
  // throttle are set per run.
  DeviceSetup device = {.compute_threads = 1};
};

// One plan at one budget. A plan that does not fit (the planner finds none,
// or a step runs out of device memory) has fits == false and a status.
struct RatioRun {
  AutoActions plan = AutoActions::kJoint;
  bool fits = false;
  std::string status;  // "ok" or "does not fit: OOM (planner: ...)" / "does not fit: OOM at <node>"
  std::string error;   // the planner's or the runtime's full message when !fits
  double step_s = 0;   // measured: the best step after the warm-up (Note [Best timed step])
  double mean_step_s = 0;  // measured: the mean after the warm-up
  double predicted_step_s = 0;
  double relative = 0;            // ideal step / step_s
  double predicted_relative = 0;  // the same ratio of the planner's predictions
  size_t swapped_tensors = 0;
  size_t recomputed_tensors = 0;
  AutoActions chosen = AutoActions::kSwap;  // RewriteReport::actions
  uint64_t bytes_d2h_per_step = 0;          // measured
  // Joint only: the plan kind whose row ran the very same plan (plan text
  // and kernels), whose measurement this row then reports; empty when the
  // joint plan differs from both (Note [Same plan, one measurement]).
  std::string same_as;
  std::string plan_signature;  // CaseResult::plan_signature
};

struct RatioBudget {
  double oversubscription = 0;
  uint64_t budget_bytes = 0;   // no-LMS peak / oversubscription, down to whole 64 KiB
  std::vector<RatioRun> runs;  // in RatioOptions::plans order
};

struct RatioTarget {
  LinkPreset preset;
  double throttle_bytes_per_s = 0;
  double ideal_step_s = 0;  // no LMS, unlimited device memory, this link; best timed step
  double ideal_mean_step_s = 0;
  double ideal_predicted_step_s = 0;
  std::vector<RatioBudget> budgets;
};

struct RatioModel {
  std::string model;
  std::string size_label;
  int64_t size = 0;
  std::string data_note;
  double device_flops_per_s = 0;  // calibrate_cost_model on the profile
  double profile_s = 0;
  uint64_t no_lms_peak_bytes = 0;
  std::vector<RatioTarget> targets;
};

struct RatioResult {
  int steps = 0;
  int compute_threads = 1;  // per device; 0 = all cores
  std::vector<RatioModel> models;
};

// Errors: InvalidArgument for steps < 2, an oversubscription <= 1, no
// target or plan, or a target rate <= 0 (naming the flag); the errors of
// profiling and of the runs other than running out of memory.
absl::StatusOr<RatioModel> run_ratio(const ModelFactory& factory, const RatioOptions& options,
                                     std::ostream& log);

// The goals, one line each ("PASS ...", "FAIL ...", or "n/a"
// with what to run): joint >= 80% of ideal at 2x under h100-pcie5-tc, >= 95%
// under v100-nvlink2, joint never slower than the better single plan, and
// every predicted step (plans and ideals) within 10% of the measured one.
struct RatioGoal {
  std::string text;
  bool evaluated = false;
  bool pass = false;
};
std::vector<RatioGoal> ratio_goals(const RatioResult& result);

std::string format_ratio(const RatioResult& result);
nlohmann::json to_json(const RatioResult& result);

}  // namespace lms::bench
