#include "swap/cost_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/op_registry.h"
#include "lms/status.h"

namespace lms::swap {

absl::Status check_cost_options(const CostOptions& options) {
  if (options.link_devices >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("link_devices is ", options.link_devices,
                   "; it must be >= 1 (the devices sharing the host link, each running the step)"));
}

CostModel::CostModel(const Graph& graph, CostOptions options)
    : graph_(graph), options_(std::move(options)) {
  LMS_CHECK(options_.link_devices >= 1);
}

double CostModel::d2h_time_s(uint64_t bytes) const {
  return options_.copy_latency_s +
         static_cast<double>(bytes) * options_.link_devices / options_.d2h_bytes_per_s;
}

double CostModel::h2d_time_s(uint64_t bytes) const {
  return options_.copy_latency_s +
         static_cast<double>(bytes) * options_.link_devices / options_.h2d_bytes_per_s;
}

double CostModel::all_reduce_time_s(uint64_t bytes) const {
  const double b = static_cast<double>(bytes);
  if (options_.ranks <= 1) return b / options_.memory_bytes_per_s;
  const double k = options_.ranks;
  return options_.allreduce_latency_s + 2 * (k - 1) / k * b / options_.allreduce_bytes_per_s;
}

double CostModel::node_time_s(NodeId node) const {
  const Node& n = graph_.node(node);
  switch (op_def(n.op).exec) {
    case OpExec::kCollective: {
      uint64_t bytes = 0;
      for (TensorId t : n.inputs) bytes += graph_.tensor(t).bytes();
      return all_reduce_time_s(bytes);
    }
    case OpExec::kCopyToHost:
      return d2h_time_s(graph_.tensor(n.inputs[0]).bytes());
    case OpExec::kCopyToDevice:
      return h2d_time_s(graph_.tensor(n.inputs[0]).bytes());
    case OpExec::kKernel:
      break;
  }
  const auto& measured = options_.measured_node_time_s;
  if (static_cast<size_t>(node) < measured.size() && measured[node] >= 0) return measured[node];
  const double bytes = node_bytes_touched(graph_, node);
  const double flops = node_flops(graph_, node);
  return std::max(flops / options_.compute_flops_per_s, bytes / options_.memory_bytes_per_s) +
         options_.kernel_launch_s;
}

double node_bytes_touched(const Graph& graph, NodeId node) { return node_bytes(graph, node); }

std::vector<double> times_by_position(const CostModel& cost, const std::vector<NodeId>& order) {
  std::vector<double> times(order.size());
  for (size_t p = 0; p < order.size(); ++p) times[p] = cost.node_time_s(order[p]);
  return times;
}

}  // namespace lms::swap
