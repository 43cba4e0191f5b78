#include "graph/fusion.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/internal_checks.h"
#include "graph/rebuild.h"
#include "lms/status.h"
#include "lms/types.h"

namespace lms {

// Note [Conv + ReLU fusion]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A conv whose output v is read only by a relu becomes one node computing
// y = relu(v) (kActivationAttr): on the CPU device one oneDNN convolution
// with an eltwise post-op, so v is never written to memory nor counted by
// the planner, and the step saves one pass over y.
//
// Exactness. relu_bwd already reads the relu's output y (dy * (y > 0)), and
// y > 0 exactly where v > 0, so the backward graph is unchanged: it reads y
// and the conv's inputs, never v. The forward values are the same bits: the
// post-op applies max(v, 0) to the same float v the separate relu would
// read, and the CPU kernel keeps the fused primitive only when oneDNN picks
// the same implementation as for the plain conv (otherwise it runs that
// implementation and the relu in place after it, still one node).
//
// The rule. relu node R fuses with conv node P when
//  - R's input v is P's output, P has no activation yet;
//  - R is v's only reader, and v is neither fetched nor the loss (the host
//    would read the tensor that no longer exists);
//  - the graph is not planned yet (a plan names nodes and positions).
// The fused node takes R's name, so y keeps its name and every consumer,
// fetch and swap plan that names it still finds it; P's name disappears
// with v. It takes P's place in the creation order and the preferred
// order, and the control edges of both.

namespace {

bool fusable(const Graph& g, NodeId relu, const std::vector<bool>& kept) {
  const Node& r = g.node(relu);
  if (r.op != OpKind::kRelu || r.inputs.size() != 1) return false;
  const TensorId v = r.inputs[0];
  const Tensor& t = g.tensor(v);
  if (t.producer == kNoNode || kept[v] || t.consumers.size() != 1) return false;
  const Node& p = g.node(t.producer);
  return p.op == OpKind::kConv && p.outputs.size() == 1 && !p.attrs.contains(kActivationAttr);
}

}  // namespace

absl::StatusOr<FusionResult> fuse_conv_relu(const Graph& g,
                                            const std::vector<std::string>& fetched) {
  // Per Note [Internal graph checks]: a lowering pass, given a verified graph.
  if (internal_checks()) LMS_RETURN_IF_ERROR(verify(g));
  std::vector<bool> kept(g.num_tensors(), false);
  for (const std::string& name : fetched) {
    const TensorId t = g.find_tensor(name);
    if (t == kNoTensor) {
      return absl::InvalidArgumentError(
          absl::StrCat("fuse_conv_relu: fetched '", name, "' is not a tensor of the graph"));
    }
    kept[t] = true;
  }
  if (g.loss() != kNoTensor) kept[g.loss()] = true;

  FusionResult result;
  const NodeId n = g.num_nodes();
  // relu_of[conv] = the relu fused into it; absorbed[relu] = fused away.
  std::vector<NodeId> relu_of(n, kNoNode);
  std::vector<bool> absorbed(n, false);
  bool any = false;
  if (!g.plan_record().planned) {
    for (NodeId id = 0; id < n; ++id) {
      if (!fusable(g, id, kept)) continue;
      relu_of[g.tensor(g.node(id).inputs[0]).producer] = id;
      absorbed[id] = true;
      any = true;
    }
  }
  result.node_map.resize(n);
  if (!any) {
    // Nothing fuses: the graph itself, whose creation order need not be a
    // topological one (a rewritten graph's swap-ins are created after the
    // nodes that read them), so it is not rebuilt node by node.
    result.graph = g;
    for (NodeId id = 0; id < n; ++id) result.node_map[id] = id;
    return result;
  }

  Rebuild rebuild(g);
  LMS_RETURN_IF_ERROR(rebuild.copy_leaves("fuse_conv_relu"));
  Graph& out = rebuild.out();
  for (NodeId id = 0; id < n; ++id) {
    if (absorbed[id]) continue;
    const Node& node = g.node(id);
    std::vector<TensorId> inputs;
    inputs.reserve(node.inputs.size());
    for (TensorId t : node.inputs) inputs.push_back(rebuild.mapped(t));
    Attrs attrs = node.attrs;
    std::string name = node.name;
    // The tensors whose ids the new node's outputs take.
    std::vector<TensorId> outputs = node.outputs;
    if (relu_of[id] != kNoNode) {
      const Node& relu = g.node(relu_of[id]);
      attrs[std::string(kActivationAttr)] = std::string(kActivationRelu);
      attrs.erase(std::string(kLayoutAttr));  // assigned again on the fused graph
      name = relu.name;
      outputs = relu.outputs;
      result.fused.push_back(name);
    }
    const TensorRole role = outputs.empty() ? TensorRole::kActivation : g.tensor(outputs[0]).role;
    LMS_ASSIGN_OR_RETURN(std::vector<TensorId> made,
                         out.add_node(node.op, name, std::move(inputs), std::move(attrs), role));
    for (size_t i = 0; i < made.size() && i < outputs.size(); ++i) rebuild.map(outputs[i], made[i]);
    result.node_map[id] = out.num_nodes() - 1;
    if (relu_of[id] != kNoNode) {
      result.node_map[relu_of[id]] = out.num_nodes() - 1;
      out.mutable_node(out.num_nodes() - 1).origin = NodeOrigin::kFused;
    } else {
      out.mutable_node(out.num_nodes() - 1).origin = node.origin;
    }
  }
  std::vector<NodeId> order;
  std::vector<bool> placed(out.num_nodes(), false);
  for (NodeId id : g.order()) {
    const NodeId m = result.node_map[id];
    if (placed[m]) continue;
    placed[m] = true;
    order.push_back(m);
  }
  LMS_ASSIGN_OR_RETURN(result.graph, rebuild.finish(result.node_map, std::move(order)));
  return result;
}

absl::StatusOr<bool> FuseConvReluPass::run(Graph& graph) {
  LMS_ASSIGN_OR_RETURN(FusionResult f, fuse_conv_relu(graph, fetched_));
  fused_ = std::move(f.fused);
  if (fused_.empty()) {
    node_map_.clear();
    return false;
  }
  node_map_ = std::move(f.node_map);
  graph = std::move(f.graph);
  return true;
}

}  // namespace lms
