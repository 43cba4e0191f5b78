#include "graph/fuse_head_loss.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/internal_checks.h"
#include "graph/op_registry.h"
#include "graph/rebuild.h"
#include "lms/status.h"

namespace lms {

// Note [Chunked language-model head]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A language model's last matmul turns N positions of width D into logits
// [N,V], read by the loss alone; for a real vocabulary they are the
// largest tensor of the step (GPT-2's 50,257 classes: 6.4 GB in float32 at
// 32k tokens), and their gradient is as large. Liger's fused linear
// cross-entropy and ALST (Snowflake, 2025) never materialise them; the
// CPU device's lowering does the same. In a training graph the pattern
// autodiff writes is
//
//   logits  = matmul(x, w)                  trans_a 0, trans_b tb; w 2-D
//   loss    = softmax_cross_entropy(logits, labels)
//   dlogits = softmax_cross_entropy_bwd(logits, labels, dloss)
//   dx      = matmul(dlogits, w)            trans_a 0, trans_b !tb
//   dw      = matmul(G, X)  (tb = 1)  or  matmul(X, G)  (tb = 0),  trans_a 1, trans_b 0
//             with G dlogits or its reshape to [N,V], X x or its reshape to [N,D]
//
// with logits read by the loss and its backward only, dlogits by dx's
// matmul and (through the reshape, if any) dw's, and none of them fetched.
// It becomes
//
//   loss    = linear_cross_entropy(x, w, labels)        at the loss's place
//   dx, dw  = linear_cross_entropy_bwd(x, w, labels, dloss)   at dlogits's
//
// whose kernels compute the logits a chunk of rows at a time in their
// workspace. It runs when LmsConfig::chunked_head asks for it: the result
// differs from the graph as written in rounding (below), and a session run
// on the unplanned training graph runs the head as written, so the
// default keeps the bit-for-bit promise against that run. The loss keeps its node and tensor name,
// and dx and dw keep theirs (Graph::rename_tensor), so fetches, the optimizer and swap plans find
// them; a reshape of x read only by dw's matmul goes with it. The result differs from the unfused
// graph in rounding only (the logits' softmax is summed in another order), and is the same on every
// run. The CUDA device has no kernel for the fused ops yet, so its lowering does not run this pass.

namespace {

struct Head {
  NodeId logits = kNoNode, loss = kNoNode, loss_bwd = kNoNode, dx = kNoNode, dw = kNoNode;
  NodeId g_rows = kNoNode;  // reshape of dlogits read by dw (or kNoNode)
  NodeId x_rows = kNoNode;  // reshape of x read only by dw (or kNoNode)
  bool trans_b = true;
};

bool is_matmul(const Node& n, int64_t trans_a, int64_t trans_b) {
  return n.op == OpKind::kMatMul && n.inputs.size() == 2 &&
         attr_int_or(n.attrs, "trans_a", 0) == trans_a &&
         attr_int_or(n.attrs, "trans_b", 0) == trans_b;
}

// The one reader of t, or kNoNode.
NodeId only_reader(const Graph& g, TensorId t) {
  const Tensor& tensor = g.tensor(t);
  return tensor.consumers.size() == 1 ? tensor.consumers[0] : kNoNode;
}

// `rows` is t itself, or a reshape of t read by nothing else than `reader`.
bool is_rows_of(const Graph& g, TensorId rows, TensorId t, NodeId* reshape) {
  if (rows == t) return true;
  const NodeId p = g.tensor(rows).producer;
  if (p == kNoNode || g.node(p).op != OpKind::kReshape || g.node(p).inputs[0] != t) return false;
  *reshape = p;
  return true;
}

// The head whose loss is node `loss`, if the whole pattern matches.
bool match(const Graph& g, NodeId loss, const std::vector<bool>& kept, Head* h) {
  const Node& l = g.node(loss);
  if (l.op != OpKind::kSoftmaxCrossEntropy) return false;
  const TensorId logits = l.inputs[0];
  h->loss = loss;
  h->logits = g.tensor(logits).producer;
  if (h->logits == kNoNode || kept[logits]) return false;
  const Node& f = g.node(h->logits);
  if (f.op != OpKind::kMatMul || attr_int_or(f.attrs, "trans_a", 0) != 0) return false;
  h->trans_b = attr_int_or(f.attrs, "trans_b", 0) == 1;
  const TensorId x = f.inputs[0], w = f.inputs[1];
  if (g.tensor(w).shape.size() != 2 || g.tensor(x).shape.size() < 2) return false;
  const std::vector<NodeId>& readers = g.tensor(logits).consumers;
  if (readers.size() != 2) return false;
  h->loss_bwd = readers[0] == loss ? readers[1] : readers[0];
  const Node& b = g.node(h->loss_bwd);
  if (b.op != OpKind::kSoftmaxCrossEntropyBwd || b.inputs[0] != logits ||
      b.inputs[1] != l.inputs[1] || b.attrs != l.attrs) {
    return false;
  }
  const TensorId dlogits = b.outputs[0];
  if (kept[dlogits] || g.tensor(dlogits).consumers.size() != 2) return false;
  for (NodeId r : g.tensor(dlogits).consumers) {
    const Node& n = g.node(r);
    if (is_matmul(n, 0, h->trans_b ? 0 : 1) && n.inputs[0] == dlogits && n.inputs[1] == w) {
      h->dx = r;
      continue;
    }
    NodeId dw = r;
    if (n.op == OpKind::kReshape) {
      if (kept[n.outputs[0]]) return false;
      h->g_rows = r;
      dw = only_reader(g, n.outputs[0]);
      if (dw == kNoNode) return false;
    }
    const Node& m = g.node(dw);
    if (!is_matmul(m, 1, 0)) return false;
    const TensorId g_in = m.inputs[h->trans_b ? 0 : 1], x_in = m.inputs[h->trans_b ? 1 : 0];
    NodeId g_reshape = kNoNode;
    if (!is_rows_of(g, g_in, dlogits, &g_reshape) || g_reshape != h->g_rows) return false;
    if (!is_rows_of(g, x_in, x, &h->x_rows)) return false;
    if (h->x_rows != kNoNode && (only_reader(g, x_in) != dw || kept[x_in])) h->x_rows = kNoNode;
    h->dw = dw;
  }
  return h->dx != kNoNode && h->dw != kNoNode;
}

}  // namespace

absl::StatusOr<bool> FuseHeadLossPass::run(Graph& graph) {
  const Graph& g = graph;
  if (internal_checks()) LMS_RETURN_IF_ERROR(verify(g));
  node_map_.clear();
  if (g.plan_record().planned) return false;
  std::vector<bool> kept(g.num_tensors(), false);
  for (const std::string& name : fetched_) {
    const TensorId t = g.find_tensor(name);
    if (t == kNoTensor) {
      return absl::InvalidArgumentError(
          absl::StrCat("fuse_head_loss: fetched '", name, "' is not a tensor of the graph"));
    }
    kept[t] = true;
  }
  const NodeId n = g.num_nodes();
  std::vector<Head> heads;
  std::vector<bool> absorbed(n, false);
  for (NodeId id = 0; id < n; ++id) {
    Head h;
    if (!match(g, id, kept, &h)) continue;
    for (NodeId m : {h.logits, h.loss_bwd, h.dx, h.dw, h.g_rows, h.x_rows}) {
      if (m != kNoNode) absorbed[m] = true;
    }
    heads.push_back(h);
  }
  if (heads.empty()) return false;

  Rebuild rebuild(g);
  LMS_RETURN_IF_ERROR(rebuild.copy_leaves("fuse_head_loss"));
  Graph& out = rebuild.out();
  std::vector<NodeId> node_map(n, kNoNode);
  auto head_of = [&](NodeId id, bool backward) -> const Head* {
    for (const Head& h : heads) {
      if ((backward ? h.loss_bwd : h.loss) == id) return &h;
    }
    return nullptr;
  };
  auto map_all = [&](std::initializer_list<NodeId> ids) {
    for (NodeId m : ids) {
      if (m != kNoNode) node_map[m] = out.num_nodes() - 1;
    }
  };
  LMS_ASSIGN_OR_RETURN(const std::vector<NodeId> order, schedule(g));
  for (NodeId id : order) {
    const Node& node = g.node(id);
    const Head* fwd = head_of(id, false);
    const Head* bwd = head_of(id, true);
    if (absorbed[id] && bwd == nullptr) continue;
    std::vector<TensorId> inputs;
    for (TensorId t : node.inputs) inputs.push_back(rebuild.mapped(t));
    if (fwd != nullptr || bwd != nullptr) {
      const Head& h = fwd != nullptr ? *fwd : *bwd;
      const Node& mm = g.node(h.logits);
      Attrs attrs = {{"trans_b", int64_t{h.trans_b ? 1 : 0}},
                     {"ignore_index", attr_int_or(node.attrs, "ignore_index", -100)}};
      std::vector<TensorId> ins = {rebuild.mapped(mm.inputs[0]), rebuild.mapped(mm.inputs[1]),
                                   inputs[1]};
      if (bwd != nullptr) ins.push_back(inputs[2]);  // dloss
      const TensorRole role = g.tensor(node.outputs[0]).role;
      LMS_ASSIGN_OR_RETURN(std::vector<TensorId> made,
                           out.add_node(bwd != nullptr ? OpKind::kLinearCrossEntropyBwd
                                                       : OpKind::kLinearCrossEntropy,
                                        node.name, std::move(ins), std::move(attrs), role));
      out.mutable_node(out.num_nodes() - 1).origin = NodeOrigin::kFused;
      if (fwd != nullptr) {
        rebuild.map(node.outputs[0], made[0]);
        map_all({h.loss, h.logits});
      } else {
        const TensorId dx = g.node(h.dx).outputs[0], dw = g.node(h.dw).outputs[0];
        LMS_RETURN_IF_ERROR(out.rename_tensor(made[0], g.tensor(dx).name));
        LMS_RETURN_IF_ERROR(out.rename_tensor(made[1], g.tensor(dw).name));
        rebuild.map(dx, made[0]);
        rebuild.map(dw, made[1]);
        map_all({h.loss_bwd, h.dx, h.dw, h.g_rows, h.x_rows});
      }
      continue;
    }
    const TensorRole role =
        node.outputs.empty() ? TensorRole::kActivation : g.tensor(node.outputs[0]).role;
    LMS_ASSIGN_OR_RETURN(std::vector<TensorId> made,
                         out.add_node(node.op, node.name, std::move(inputs), node.attrs, role));
    for (size_t i = 0; i < made.size() && i < node.outputs.size(); ++i) {
      rebuild.map(node.outputs[i], made[i]);
    }
    out.mutable_node(out.num_nodes() - 1).origin = node.origin;
    node_map[id] = out.num_nodes() - 1;
  }
  LMS_ASSIGN_OR_RETURN(graph, rebuild.finish(node_map));
  node_map_ = std::move(node_map);
  return true;
}

}  // namespace lms
