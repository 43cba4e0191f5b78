// Predicted times for the planner and the simulator: per-node compute time
// from FLOPs and bytes touched (a roofline: max(flops / F, bytes / B) plus a
// launch overhead) or from measured per-node times of a profiling run, and
// copy times over the host link, latency + bytes * link_devices / bandwidth
// per direction.
//
//   swap::CostModel cost(graph, {.compute_flops_per_s = 2e12});
//   double t = cost.node_time_s(node);         // seconds
//   double c = cost.h2d_time_s(1 << 20);       // seconds to copy 1 MiB in
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "lms/graph.h"

namespace lms::swap {

struct CostOptions {
  double compute_flops_per_s = 1e12;  // sustained FLOP/s of the device
  double memory_bytes_per_s = 100e9;  // device memory bandwidth, bytes/s
  double kernel_launch_s = 5e-6;      // per compute node
  double d2h_bytes_per_s = 12e9;      // device-to-host link bandwidth
  double h2d_bytes_per_s = 12e9;      // host-to-device link bandwidth
  double copy_latency_s = 5e-6;       // per copy, each direction
  // all_reduce nodes (data parallelism, lms/distributed.h): a ring
  // all-reduce moves 2 (ranks - 1) / ranks of the bucket's bytes per rank at
  // allreduce_bytes_per_s, plus allreduce_latency_s per bucket; with one
  // rank it is a copy at memory bandwidth.
  int ranks = 1;
  double allreduce_bytes_per_s = 10e9;  // bytes/s per rank
  double allreduce_latency_s = 50e-6;   // seconds per bucket
  // Devices sharing the host link (lms/device.h HostLink), each running this
  // step at the same time; >= 1 (check_cost_options). The lockstep model:
  // identical replicas issue the same copies at the same moments, and a link
  // shared fairly (Note [Shared host link]) gives each 1/link_devices of the
  // bandwidth, so a copy takes latency + bytes * link_devices / bandwidth.
  // Exact for lockstep replicas; pessimistic when the devices' copies do not
  // overlap in time (different models, or replicas that drift apart), where
  // a copy gets more than its share. Compute is not shared: each device has
  // its own.
  int link_devices = 1;
  // Measured seconds per NodeId from a profiling run; when an entry exists
  // and is >= 0 it replaces the roofline estimate for that node.
  std::vector<double> measured_node_time_s;
};

// InvalidArgument for link_devices < 1, naming it.
absl::Status check_cost_options(const CostOptions& options);

class CostModel {
 public:
  // `options` must pass check_cost_options.
  CostModel(const Graph& graph, CostOptions options);

  // Seconds for `node` of the graph given at construction: compute nodes by
  // the roofline (or measurement), swap_out / swap_in by the copy time,
  // all_reduce by all_reduce_time_s of its inputs' bytes.
  double node_time_s(NodeId node) const;
  // Seconds of one copy while link_devices devices copy alike (see above).
  double d2h_time_s(uint64_t bytes) const;
  double h2d_time_s(uint64_t bytes) const;
  // Seconds to all-reduce `bytes` over options().ranks ranks.
  double all_reduce_time_s(uint64_t bytes) const;
  const CostOptions& options() const { return options_; }

 private:
  const Graph& graph_;
  CostOptions options_;
};

// Bytes a node reads and writes (the memory side of the roofline): its op's
// registry cost, OpDef::bytes in graph/op_registry.h.
double node_bytes_touched(const Graph& graph, NodeId node);

// node_time_s of each node of `order`, by position.
std::vector<double> times_by_position(const CostModel& cost, const std::vector<NodeId>& order);

}  // namespace lms::swap
