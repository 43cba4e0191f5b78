// LMS configuration: what lms::rewrite swaps and how it models the machine.
// Read from a TOML file (configs/lms.toml documents every key) and overridden
// on the command line with `--lms key=value` (same keys, same validation).
//
//   LMS_ASSIGN_OR_RETURN(lms::LmsConfig cfg, lms::LmsConfig::from_file("lms.toml"));
//   LMS_RETURN_IF_ERROR(cfg.apply_override("policy=tflms"));
//   LMS_RETURN_IF_ERROR(cfg.apply_override("link.h2d_bandwidth=16GB/s"));
//
// Keys carry units: bytes ("256MiB", or an integer number of bytes),
// bandwidths ("12GB/s", or a number of bytes/s), durations ("5us", or a
// number of seconds), compute rates ("10TFLOP/s", or a number of FLOP/s).
// Every number must be finite after its unit is applied (no NaN, no
// infinity, nothing a unit scales past the double range): bandwidths and
// rates positive, durations non-negative. Byte counts are exact integers in
// [0, 2^63 - 1], also when written with a unit. The tables are [link] and
// [cost_model]; an unknown or empty table, and a key set twice (dotted at top
// level and again under its [table]), are errors. Every error is
// InvalidArgument naming the key (or table), the value and what is allowed;
// nothing throws.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/types.h"

namespace lms {

// SwapPolicy and policy_name are in lms/types.h (a plan record keeps one).

// Where the Device overload of lms::rewrite takes node and copy times from
// (TOML key time_model; lms/profile.h).
//   kMeasured  profile the graph on the device first (lms::profile_step):
//              measured per-node times, the measured link in place of [link],
//              and a roofline calibrated on the device in place of
//              [cost_model] for any node without a time. The default.
//   kRoofline  [cost_model] for every node without PlanningFacts::node_time_s,
//              [link] for copies; nothing is profiled.
// The overloads without a device cannot measure: they use the facts given
// (PlanningFacts::node_time_s, link, roofline) and these tables for the rest.
enum class TimeModel : uint8_t { kMeasured, kRoofline };
const char* time_model_name(TimeModel model);  // "measured", "roofline"

// What the auto policy may do with an activation saved for the backward pass
// besides keeping it on the device (TOML key auto_actions;
// Note [Joint planner]):
//   kSwap       swap it out to pinned host memory and prefetch it back
//               (vDNN, Rhu et al. 2016; TFLMS, Le et al. 2018)
//   kRecompute  drop it and recompute it from kept inputs right before its
//               backward reader (gradient checkpointing, Chen et al. 2016)
//   kJoint      swap or recompute, per tensor, whichever the time model says
//               is cheaper (Capuchin, Peng et al. 2020; Checkmate, Jain et
//               al. 2020); the plan with the least predicted step time of the
//               joint, swap-only and recompute-only plans. The default.
enum class AutoActions : uint8_t { kSwap, kRecompute, kJoint };
const char* auto_actions_name(AutoActions actions);  // "swap", "recompute", "joint"

// Whether the rewrite may run a convolution on another kernel than its
// default one to save device memory (TOML key kernel_choice). The other
// kernels are the least-workspace ones (lms/types.h kWorkspaceAttr; vDNN_dyn's
// memory-optimal algorithms, Rhu et al. 2016): their workspace is smaller,
// but they sum in another order, so their results differ from the default
// kernels' in the last bits. With a choice other than kDefault the report
// lists the nodes moved (RewriteReport::least_workspace_nodes) and its
// summary says so; the results then equal those of the graph without LMS on
// the same kernels (lms::use_least_workspace_kernels), not on the default
// ones.
//   kDefault          every node keeps its default kernel: results are
//                     bit-identical to the graph run without LMS. The default.
//   kLeastToFit       when no plan fits the budget with the default kernels,
//                     plan again with the least-workspace kernels of the
//                     convolutions that need them (Note [Least workspace
//                     fallback]).
//   kLeastWhenFaster  as kLeastToFit, and also when a plan with them is
//                     predicted faster (auto with joint actions; the Device
//                     overload with time_model "measured" then also measures
//                     those kernels).
enum class KernelChoice : uint8_t { kDefault, kLeastToFit, kLeastWhenFaster };
// "default", "least_workspace_to_fit", "least_workspace_when_faster"
const char* kernel_choice_name(KernelChoice choice);

// The host link (TOML table [link]); also the emulated device's copy throttle.
// Precedence for planning: the Device overload with time_model "measured"
// plans with the link it measures on the device (StepProfile::link()), and
// the facts overload with PlanningFacts::link where set; this table is used
// otherwise.
struct LinkConfig {
  double d2h_bytes_per_s = 12e9;  // d2h_bandwidth
  double h2d_bytes_per_s = 12e9;  // h2d_bandwidth
  double copy_latency_s = 5e-6;   // copy_latency, per copy
};

// Roofline used for nodes without a measured time (TOML table [cost_model]).
// With time_model "measured" the Device overload replaces it by one
// calibrated on the device (lms::calibrate_cost_model, lms/profile.h).
struct CostModelConfig {
  double compute_flops_per_s = 1e12;  // compute_rate
  double memory_bytes_per_s = 100e9;  // memory_bandwidth
  double kernel_launch_s = 5e-6;      // kernel_launch, per compute node
};

struct LmsConfig {
  bool enabled = true;
  SwapPolicy policy = SwapPolicy::kAuto;
  uint64_t device_memory_limit = 0;  // bytes for the step; 0 = the device capacity
  // Pinned host bytes the swapped tensors may hold; 0 = unlimited. The
  // Device overload of lms::rewrite plans for at most the device's pinned
  // host pool (Device::host_stats().capacity_bytes).
  uint64_t host_memory_limit = 0;
  // TFLMS v2 (policy tflms; swapout_threshold/swapin_ahead/swapin_groupby/
  // sync_mode also shape the manual policy), see swap/planner.h.
  int32_t swapout_threshold = 1;     // >= 0
  int32_t swapin_ahead = 1;          // >= 1
  int32_t swapin_groupby = 5;        // >= 0
  int32_t sync_mode = 0;             // 0..3
  uint64_t min_tensor_bytes = 0;     // tflms and auto skip smaller tensors
  std::vector<std::string> tensors;  // policy manual: tensor names
  // Auto plans for the budget less this fraction, [0, 0.9]. The arena is
  // packed by static placement and the planner re-plans until the layout
  // fits (Note [Placement-aware planning]), so no reserve is needed; a
  // reserve leaves device memory to other users of the device.
  double fragmentation_reserve = 0.0;
  uint64_t alignment_bytes = 256;                       // allocator alignment, a power of two
  TimeModel time_model = TimeModel::kMeasured;          // see TimeModel
  AutoActions auto_actions = AutoActions::kJoint;       // see AutoActions
  KernelChoice kernel_choice = KernelChoice::kDefault;  // see KernelChoice
  // On the CPU device (TOML key chunked_head): a matmul whose logits only
  // softmax_cross_entropy reads, with its backward, becomes
  // linear_cross_entropy (+ _bwd), which computes the logits a chunk of
  // rows at a time (Note [Chunked language-model head]; Liger, ALST): no
  // [N,V] logits tensor, nor its gradient. The loss, dx and dw keep their
  // names; a fetched logits tensor keeps its head unfused. Off by default,
  // as kernel_choice: the fused head rounds differently from the graph as
  // written, so a session run on the unplanned training graph would no
  // longer give the same bits. Plans with and without LMS (lms::rewrite
  // with enabled true or false) both fuse when it is on, and agree bit
  // for bit.
  bool chunked_head = false;
  // Auto with joint actions, on graphs of at most 2,000 nodes: the best of
  // the fixed plans (Note [Joint planner]) is planned again with this many
  // seeds that break its greedy's near-ties at random, and the least
  // predicted step time wins (Note [Jittered greedy]). Each costs one more
  // plan (about 15 us per node); 0 = no search. 0..1000.
  int32_t auto_search_plans = 12;
  // Auto with joint actions, on graphs of at most 2,000 nodes: after that
  // search, at most this many plans of a local search that forbids one
  // swapped or recomputed tensor its action, or swaps a recomputed one, at a
  // time and keeps a plan the simulator predicts faster (Note [Plan
  // refinement]); also at most 131072 / nodes plans (about 2 s); 0 = none.
  // 0..10000.
  int32_t auto_refine_plans = 512;
  LinkConfig link;
  // Devices sharing the host link (lms/device.h HostLink), each running this
  // step at the same time, as one model per GPU behind one PCIe switch;
  // 1..1024. The planner and the simulator give each copy 1/link_devices of
  // the link's bandwidth (exact for lockstep replicas, pessimistic when the
  // devices' copies do not overlap). With time_model "measured" it divides
  // the link measured on the device alone.
  int32_t link_devices = 1;
  CostModelConfig cost_model;

  // InvalidArgument for unreadable files (naming the path), TOML syntax
  // errors (with line, column and the line's text; for a value TOML cannot
  // hold, such as an integer of 2^64, also what its key allows), unknown
  // keys, unknown or empty tables and bad values.
  static absl::StatusOr<LmsConfig> from_file(std::string_view path);
  static absl::StatusOr<LmsConfig> from_toml_string(std::string_view text);
  // "key=value" with the keys of the file, tables dotted ("link.copy_latency=8us").
  // Values are TOML values; a bare word is taken as a string (policy=tflms,
  // tensors=relu1,relu2). On error the config is unchanged.
  absl::Status apply_override(std::string_view key_eq_value);
  // The config as TOML that from_toml_string reads back to an equal config
  // (doubles bit for bit) with the same to_toml(), for every valid config.
  std::string to_toml() const;
};

}  // namespace lms
