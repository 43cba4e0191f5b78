#include "swap/insert.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lms/status.h"

namespace lms::swap {
namespace {

absl::Status check_names_free(const Graph& graph, const SwapPlan& plan) {
  for (const SwapPlan::Item& item : plan.items) {
    const std::string& t = graph.tensor(item.tensor).name;
    std::vector<std::string> names = {absl::StrCat("swap_out/", t)};
    for (size_t k = 0; k < item.swap_ins.size(); ++k) {
      names.push_back(absl::StrCat("swap_in/", t, "/", k));
    }
    for (const std::string& name : names) {
      if (graph.find_node(name) != kNoNode || graph.find_tensor(name) != kNoTensor) {
        return absl::InvalidArgumentError(absl::StrCat(
            "swap insertion: name '", name, "' is already used (was the graph rewritten twice?)"));
      }
    }
  }
  return absl::OkStatus();
}

void rewire(Graph& graph, NodeId consumer, TensorId from, TensorId to) {
  const std::vector<TensorId> inputs = graph.node(consumer).inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == from) graph.replace_input(consumer, static_cast<int>(i), to);
  }
}

// Adds the nodes of one item; records where they go in the preferred order.
absl::Status insert_item(Graph& graph, const SwapPlan::Item& item,
                         std::vector<std::vector<NodeId>>& outs_after,
                         std::vector<std::vector<NodeId>>& ins_after) {
  const Tensor& tensor = graph.tensor(item.tensor);
  const std::string name = tensor.name;
  const TensorRole role = tensor.role == TensorRole::kInput ? TensorRole::kActivation : tensor.role;
  LMS_ASSIGN_OR_RETURN(std::vector<TensorId> host,
                       graph.add_node("swap_out", absl::StrCat("swap_out/", name), {item.tensor},
                                      {}, TensorRole::kHost));
  const NodeId out_node = graph.tensor(host[0]).producer;
  outs_after[item.swap_out_after].push_back(out_node);
  if (item.sync_before != kNoNode) graph.add_control_edge(out_node, item.sync_before);
  for (size_t k = 0; k < item.swap_ins.size(); ++k) {
    const SwapPlan::SwapIn& in = item.swap_ins[k];
    LMS_ASSIGN_OR_RETURN(
        std::vector<TensorId> copy,
        graph.add_node("swap_in", absl::StrCat("swap_in/", name, "/", k), {host[0]}, {}, role));
    const NodeId in_node = graph.tensor(copy[0]).producer;
    graph.add_control_edge(in.trigger, in_node);
    ins_after[in.trigger].push_back(in_node);
    for (NodeId c : in.consumers) rewire(graph, c, item.tensor, copy[0]);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status insert_swaps(Graph& graph, const Liveness& live, const SwapPlan& plan) {
  LMS_RETURN_IF_ERROR(validate_plan(graph, live, plan));
  LMS_RETURN_IF_ERROR(check_names_free(graph, plan));
  const int32_t old_nodes = graph.num_nodes();
  std::vector<std::vector<NodeId>> outs_after(old_nodes), ins_after(old_nodes);
  for (const SwapPlan::Item& item : plan.items) {
    LMS_RETURN_IF_ERROR(insert_item(graph, item, outs_after, ins_after));
  }
  std::vector<NodeId> order;
  order.reserve(graph.num_nodes());
  for (NodeId n : live.order) {
    order.push_back(n);
    order.insert(order.end(), outs_after[n].begin(), outs_after[n].end());
    order.insert(order.end(), ins_after[n].begin(), ins_after[n].end());
  }
  LMS_RETURN_IF_ERROR(graph.set_order(std::move(order)));
  return verify(graph);
}

}  // namespace lms::swap
