// lms::profile_step: the time model measured on the device. It times every
// compute node of a graph alone on a Device and fits the copy link in each
// direction, so lms::rewrite can plan with what the device really does
// instead of a roofline with constants (LmsConfig::time_model "measured",
// the default of the Device overload of lms::rewrite).
//
//   LMS_ASSIGN_OR_RETURN(auto device, lms::make_cpu_device({.capacity_bytes = 256 << 20}));
//   LMS_ASSIGN_OR_RETURN(lms::StepProfile p, lms::profile_step(train, *device));
//   // p.node_time_s[id]: seconds of node id alone; p.link: the fitted link.
//
// To plan with these measurements, do not assemble PlanningFacts from a
// profile by hand: lms::gather_facts (lms/facts.h) profiles the graph as the
// device's passes leave it, calibrates the roofline, and shares rank 0's
// figures over a communicator; lms::rewrite(graph, config, device) calls it.
//
// What is measured, and how:
// - Nodes. Each compute node is run in isolation: its inputs, outputs and
//   kernel workspace are allocated on the device, the inputs are filled with
//   deterministic data (uniform in [1, 2) from `seed`, valid input for every
//   op, a step counter included; uploaded once per buffer size and reused by
//   later nodes while device memory allows), its kernel is compiled the way
//   Session compiles it, run `warmup_runs` times
//   untimed and `runs` times timed, one run at a time, and everything is
//   freed. So only one node's buffers must fit, not the whole step: the point
//   of LMS. A node's time is the median of its timed runs, in seconds, of
//   the kernel's span on the compute stream as the device reports it
//   (EventSink::on_node: on the CPU device the run on the compute thread; on
//   CUDA host callbacks around the kernel, Note [CUDA profiler events]); a
//   device that reports no span is timed on the host from launch() to the
//   completion of an event recorded after it (StepProfile::from_device_events
//   says which). Time a step spends between kernels (issue, event waits) is
//   not in any node's time.
// - Link. Copies between one device buffer and one pinned host block
//   (Device::allocate_host) of each of `copy_sizes` bytes run on the D2H and
//   H2D streams (one warm-up, then `copy_runs` timed copies, median; the
//   copy's span from EventSink::on_copy, or host time as above). A line
//   seconds = latency + bytes / bandwidth is fitted per direction by least
//   squares (through the origin when the intercept comes out negative).
//
// Cost: about (warmup_runs + runs) steps of compute, plus the uploads of
// the input data and (1 + copy_runs) copies of each size each way over the
// link (on the emulated device, throttled like any copy).
//
// Units: seconds, bytes, bytes/s (docs/design.md "Units and shapes").
// profile_step uses the device's event sink while it runs and leaves the
// device with `ProfileOptions::sink` (null by default), which is forwarded
// every event meanwhile. It needs a device with free memory for one node at a
// time; it does not check that the device is otherwise idle, but timings
// taken while other work runs on it are not meaningful.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "lms/graph.h"

namespace lms {

class Device;
class EventSink;

struct ProfileOptions {
  bool nodes = true;    // time every compute node
  bool link = true;     // fit the copy link in each direction
  int warmup_runs = 1;  // untimed runs per node first, >= 0
  int runs = 3;         // timed runs per node (median), >= 1
  uint64_t seed = 1;    // input data
  // Bytes of the timed copies, each > 0. Each size is clamped to a quarter of
  // the device capacity and of the pinned host pool (duplicates dropped).
  std::vector<uint64_t> copy_sizes = {uint64_t{64} << 10, uint64_t{1} << 20, uint64_t{4} << 20};
  int copy_runs = 3;  // timed copies per size and direction (median), >= 1
  // A node whose inputs, outputs and workspace do not fit the free device
  // memory: false = ResourceExhausted naming it; true = its time is -1 and
  // its name is listed in StepProfile::unprofiled (the Device overload of
  // lms::rewrite does this and uses the calibrated roofline for it).
  bool skip_nodes_that_do_not_fit = false;
  // Inputs of at least this many bytes are evicted from the device's caches
  // before every run of their node (Device::evict_from_caches; the
  // CPU-emulated device flushes them from the host's caches). In a step, a
  // large input was mostly written long before its reader and comes from
  // memory; run again and again alone, the node read it from the caches.
  // On the emulated device (Intel Xeon, 2 MiB L2 per core), ResNet-50's
  // nodes at batch 32 of 128x128 summed to 2.46 s alone against 2.87 s in
  // the step (-14%), and to within 5% with this; the GPT of bench/README.md
  // (context 512, batch 4), whose 2 MiB activations often stay cached,
  // went from -6.8% to -3.3% (all inputs evicted: +5.5%). 0: every input;
  // UINT64_MAX: none.
  uint64_t cold_input_min_bytes = uint64_t{4} << 20;
  // Time only these nodes (the rest get -1); empty: every compute node.
  // InvalidArgument for an id outside the graph.
  std::vector<NodeId> only_nodes;
  EventSink* sink = nullptr;  // forwarded every device event; the device is left with it
};

struct StepProfile {
  std::string device;  // Device::name()
  // Seconds by NodeId: the median time of the node's kernel run alone
  // (see above). -1 for swap_out / swap_in nodes (copies: their time is the
  // link's), for nodes in `unprofiled`, and for every node when
  // ProfileOptions::nodes is false.
  std::vector<double> node_time_s;
  std::vector<std::string> unprofiled;  // nodes too big for the free device memory
  // Node times are the device's own kernel spans (EventSink::on_node); false:
  // host wall time from launch to an event after the kernel.
  bool from_device_events = false;
  // The fitted link: d2h_bytes_per_s, h2d_bytes_per_s and copy_latency_s
  // (the mean of the two directions' latencies; LinkConfig has one). Left at
  // LinkConfig's defaults when link_measured is false.
  LinkConfig link;
  double d2h_latency_s = 0;  // fitted per-copy latency of each direction, seconds
  double h2d_latency_s = 0;
  bool link_measured = false;
  double elapsed_s = 0;  // wall time profile_step took
};

// Profiles `graph` on `device` (see above). Errors: InvalidArgument for an
// invalid graph (verify()) or options outside the ranges above (naming the
// field and what is allowed); Unimplemented / InvalidArgument from the
// device for a node it cannot compile; ResourceExhausted naming the node and
// its bytes when one node's inputs, outputs and workspace alone do not fit
// the free device memory (unless skip_nodes_that_do_not_fit), or when the
// link's buffers cannot be allocated; a kernel's error, naming the node.
absl::StatusOr<StepProfile> profile_step(const Graph& graph, Device& device,
                                         const ProfileOptions& options = {});

// The convolutions whose workspace = "least" kernel (lms/types.h
// kWorkspaceAttr) needs less than their fast one (least_workspace_bytes[id]
// < workspace_bytes[id], both by NodeId as kernel_workspace_bytes and
// least_kernel_workspace_bytes in lms/session.h give them) timed with that
// kernel, alone on the device as profile_step does (no link, nodes that do
// not fit skipped): PlanningFacts::least_node_time_s. node_time_s is -1 for
// every other node, and empty when no convolution switches. Errors: those of
// profile_step.
absl::StatusOr<StepProfile> profile_least_workspace_kernels(
    const Graph& graph, Device& device, const std::vector<uint64_t>& workspace_bytes,
    const std::vector<uint64_t>& least_workspace_bytes);

// A roofline calibrated on the device from the profiled nodes of `graph`:
//   compute_flops_per_s  the best FLOP rate achieved by a convolution node
//                        (conv, deconv and their backward ops; any node with
//                        FLOPs when the graph has none),
//   memory_bytes_per_s   the best rate of bytes read + written achieved by
//                        any other node,
//   kernel_launch_s      the shortest node time (what the smallest kernel
//                        costs at least).
// A figure without a profiled node to derive it from keeps CostModelConfig's
// default. Node times are taken from profile.node_time_s (entries < 0 are
// skipped), so it also calibrates from times measured otherwise.
CostModelConfig calibrate_cost_model(const StepProfile& profile, const Graph& graph);

}  // namespace lms
