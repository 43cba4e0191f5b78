// Note [Attention chain]: torch.onnx.export (torch 1.13, opset 14) writes
// softmax(q @ k.transpose(-2, -1) * scale + mask) @ v, with q, k, v [N,H,T,D]
// and [N,H,S,D], as
//
//   kt = Transpose(x, perm)     x is k in some layout (torch folds the
//                               head split's transpose in), kt [N,H,D,S]
//   s  = MatMul(q, kt)
//   c  = Mul(s, scale) either order, or Div(s, 1 / scale)
//   m  = Add(c, mask)           either order; absent without a mask
//   p  = Softmax(m, axis = -1)
//   y  = MatMul(p, v)
//
// FuseAttentionPass matches the structure alone: each intermediate read by
// the next node only and by no graph output, the Transpose a permutation of
// rank 4 that keeps N first. It replaces the chain by one lms.fused
// Attention node at y's place, the chain's nodes as its body and the
// operand index of the scale and of the mask as its attributes
// scale_operand and mask_operand. map_fused_attention, called when the walk
// reaches that node, checks the constants: scale a positive
// one-element constant, the mask (if any) a [T,S] constant (leading 1s
// allowed) with 0 on and below the diagonal and -inf or at most
// kMaskLimit above it, T == S. It then adds one attention node (causal
// when there is a mask), preceded by a transpose of x to [N,H,S,D] unless x
// is in that layout already. Anything else declines, and the body's nodes
// are visited one by one. A mask computed by comparing positions is matched
// with its comparison and checked without being folded (Note [Causal mask
// from positions]): the chain then holds those nodes before the Add, and
// the fused node's attribute mask_nodes counts them.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lms/ops.h"
#include "lms/status.h"
#include "onnx/causal_mask.h"
#include "onnx/import_pass.h"
#include "onnx/importer.h"

namespace lms::onnx_import {
namespace {

using NodeProto = ::onnx::NodeProto;

// The nodes of a chain by index in the graph, in chain order (Transpose of
// k, MatMul, Mul or Div, the mask's comparison nodes if any, Add if masked,
// Softmax, MatMul), and the operand index of the scale and of the mask.
struct AttentionChain {
  std::vector<int> nodes;
  int scale_operand = 1;
  int mask_operand = 1;
  bool has_mask = false;
  int mask_nodes = 0;  // Note [Causal mask from positions]

  // The mask's nodes (comparison first) and the Add's index in `nodes`.
  std::vector<int> mask() const { return {nodes.begin() + 3, nodes.begin() + 3 + mask_nodes}; }
  int add() const { return nodes[static_cast<size_t>(3 + mask_nodes)]; }
};

// The single node reading `value` (and no graph output reads it); -1 else.
struct Readers {
  absl::flat_hash_map<std::string, int> count;
  absl::flat_hash_map<std::string, int> node;

  explicit Readers(const ::onnx::GraphProto& g) {
    for (int i = 0; i < g.node_size(); ++i) {
      for (const std::string& in : g.node(i).input()) {
        ++count[in];
        node[in] = i;
      }
    }
    for (const auto& o : g.output()) ++count[o.name()];
  }
  int sole(const std::string& value) const {
    auto c = count.find(value);
    auto n = node.find(value);
    return c != count.end() && c->second == 1 && n != node.end() ? n->second : -1;
  }
};

bool is(const NodeProto& n, const char* op, int inputs) {
  return n.op_type() == op && n.input_size() == inputs && n.output_size() == 1;
}

// Transpose's perm if it has rank 4 and keeps dims 0 and 1 in front.
std::optional<std::vector<int64_t>> head_perm(const NodeProto& t) {
  const std::vector<int64_t> perm = attr_ints(t, "perm");
  if (perm.size() != 4) return std::nullopt;
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != std::vector<int64_t>{0, 1, 2, 3}) return std::nullopt;
  // A head split keeps N first; H may come from dim 1 or 2 of x.
  if (perm[0] != 0) return std::nullopt;
  return perm;
}

// The chain ending at g.node(last) (a MatMul), walking back from it.
std::optional<AttentionChain> chain_to(const ::onnx::GraphProto& g, int last,
                                       const absl::flat_hash_map<std::string, int>& producer,
                                       const Readers& readers) {
  const NodeProto& y = g.node(last);
  if (!is(y, "MatMul", 2)) return std::nullopt;
  // The node producing `value`, if `value` has no other reader.
  auto from = [&](const std::string& value, const char* op) -> int {
    auto p = producer.find(value);
    if (p == producer.end() || readers.sole(value) < 0 || g.node(p->second).op_type() != op) {
      return -1;
    }
    return p->second;
  };
  AttentionChain c;
  const int sm = from(y.input(0), "Softmax");
  if (sm < 0 || !is(g.node(sm), "Softmax", 1)) return std::nullopt;
  const int64_t axis = attr_int(g.node(sm), "axis", -1);
  if (axis != -1 && axis != 3) return std::nullopt;
  std::string scaled = g.node(sm).input(0);
  int add = from(scaled, "Add");
  if (add >= 0) {
    const NodeProto& a = g.node(add);
    if (!is(a, "Add", 2)) return std::nullopt;
    // The scaled scores: the operand that is a Mul or Div of a MatMul's
    // output (the mask may be a Mul too: a comparison times -1e9).
    auto scaled_scores = [&](const std::string& value) {
      const int m = std::max(from(value, "Mul"), from(value, "Div"));
      if (m < 0) return false;
      for (const std::string& in : g.node(m).input()) {
        if (from(in, "MatMul") >= 0) return true;
      }
      return false;
    };
    const bool first = scaled_scores(a.input(0)), second = scaled_scores(a.input(1));
    if (first == second) return std::nullopt;
    c.mask_operand = first ? 1 : 0;
    scaled = a.input(1 - c.mask_operand);
  }
  const int sc = std::max(from(scaled, "Mul"), from(scaled, "Div"));
  if (sc < 0 || g.node(sc).input_size() != 2 || g.node(sc).output_size() != 1) {
    return std::nullopt;
  }
  // The scores: input 0 of Div, either operand of Mul.
  for (int k : {0, 1}) {
    if (g.node(sc).op_type() == "Div" && k == 1) break;
    const int mm = from(g.node(sc).input(k), "MatMul");
    if (mm < 0 || !is(g.node(mm), "MatMul", 2)) continue;
    const int kt = from(g.node(mm).input(1), "Transpose");
    if (kt < 0 || !is(g.node(kt), "Transpose", 1) || !head_perm(g.node(kt))) continue;
    c.scale_operand = 1 - k;
    c.nodes = {kt, mm, sc};
    if (add >= 0) {
      const std::vector<int> mask = causal_mask_nodes(g, g.node(add).input(c.mask_operand), from);
      c.nodes.insert(c.nodes.end(), mask.begin(), mask.end());
      c.mask_nodes = static_cast<int>(mask.size());
      c.nodes.push_back(add);
    }
    c.nodes.push_back(sm);
    c.nodes.push_back(last);
    c.has_mask = add >= 0;
    return c;
  }
  return std::nullopt;
}

// The one-element constant input `k` of `n` (not a trainable initializer).
std::optional<double> scalar_constant(Importer& im, const NodeProto& n, int k) {
  auto v = im.input(n, k);
  if (!v.ok() || *v == nullptr || !(*v)->constant || (*v)->constant->numel() != 1 ||
      im.trainable.contains(n.input(k))) {
    return std::nullopt;
  }
  return (*v)->constant->at(0);
}

// Whether input `k` of `n` is a causal mask over [t, t] scores: a constant
// [t, t] (leading 1s allowed), 0 where key <= query, masked above.
bool is_causal_mask(Importer& im, const NodeProto& n, int k, int64_t t) {
  auto v = im.input(n, k);
  if (!v.ok() || *v == nullptr || !(*v)->constant || im.trainable.contains(n.input(k))) {
    return false;
  }
  const Const& m = *(*v)->constant;
  if (m.dims.size() < 2 || m.dims[m.dims.size() - 1] != t || m.dims[m.dims.size() - 2] != t ||
      m.numel() != t * t) {
    return false;
  }
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < t; ++j) {
      const double e = m.at(i * t + j);
      if (j <= i ? e != 0.0 : !(e <= kMaskLimit)) return false;
    }
  }
  return true;
}

// perm with its last two entries swapped: x's layout to k = kt with D and S
// swapped back.
std::vector<int64_t> k_perm(std::vector<int64_t> perm) {
  std::swap(perm[2], perm[3]);
  return perm;
}

// The chains of `g` by structure alone, in the order of their last nodes;
// a node belongs to one chain at most.
std::vector<AttentionChain> find_attention_chains(const ::onnx::GraphProto& g) {
  const Readers readers(g);
  absl::flat_hash_map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i) {
    for (const std::string& out : g.node(i).output()) producer[out] = i;
  }
  std::vector<AttentionChain> chains;
  absl::flat_hash_set<int> taken;
  for (int i = 0; i < g.node_size(); ++i) {
    std::optional<AttentionChain> c = chain_to(g, i, producer, readers);
    if (!c ||
        std::any_of(c->nodes.begin(), c->nodes.end(), [&](int k) { return taken.contains(k); })) {
      continue;
    }
    taken.insert(c->nodes.begin(), c->nodes.end());
    chains.push_back(*c);
  }
  return chains;
}

// Adds one attention node (and a transpose of k where its layout needs one)
// for chain `c` of `g` if its scale is a positive constant and its mask, if
// any, a causal one; false, adding nothing, otherwise.
absl::StatusOr<bool> map_chain(Importer& im, const ::onnx::GraphProto& g, const AttentionChain& c) {
  const NodeProto& kt = g.node(c.nodes[0]);
  const NodeProto& qk = g.node(c.nodes[1]);
  const NodeProto& sc = g.node(c.nodes[2]);
  const NodeProto& y = g.node(c.nodes.back());
  std::optional<double> s = scalar_constant(im, sc, c.scale_operand);
  if (!s) return false;
  const double scale = sc.op_type() == "Div" ? 1.0 / *s : *s;
  if (!(scale > 0) || !std::isfinite(scale)) return false;
  LMS_ASSIGN_OR_RETURN(TensorId q, im.tensor_input(qk, 0));
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(kt, 0));
  LMS_ASSIGN_OR_RETURN(TensorId v, im.tensor_input(y, 1));
  const Shape qs = im.graph.tensor(q).shape, xs = im.graph.tensor(x).shape;
  if (qs.size() != 4 || xs.size() != 4 || im.graph.tensor(v).shape.size() != 4) return false;
  if (c.has_mask && c.mask_nodes > 0 && !is_causal_mask_from_positions(im, g, c.mask(), qs[2])) {
    return false;
  }
  if (c.has_mask && c.mask_nodes == 0 &&
      !is_causal_mask(im, g.node(c.add()), c.mask_operand, qs[2])) {
    return false;
  }
  const std::vector<int64_t> perm = k_perm(*head_perm(kt));
  TensorId k = x;
  if (perm != std::vector<int64_t>{0, 1, 2, 3}) {
    k = transpose(im.graph, im.lms_name(kt.output(0)), x, perm);
    if (k == kNoTensor) return Importer::error(kt, std::string(im.graph.status().message()));
  }
  LMS_RETURN_IF_ERROR(im.add(y, OpKind::kAttention, y.output(0), {q, k, v},
                             {{"softmax_scale", scale}, {"causal", int64_t{c.has_mask ? 1 : 0}}})
                          .status());
  return true;
}

}  // namespace

absl::StatusOr<bool> FuseAttentionPass::run(::onnx::GraphProto& g) {
  std::vector<ChainFusion> fusions;
  for (const AttentionChain& c : find_attention_chains(g)) {
    ::onnx::NodeProto fused = fused_node(g, c.nodes, "Attention");
    add_attr(fused, "scale_operand", int64_t{c.scale_operand});
    add_attr(fused, "mask_operand", int64_t{c.mask_operand});
    add_attr(fused, "mask_nodes", int64_t{c.mask_nodes});
    fusions.push_back({c.nodes, std::move(fused)});
  }
  return replace_chains(g, std::move(fusions));
}

absl::Status map_fused_attention(Importer& im, const NodeProto& fused) {
  const ::onnx::GraphProto* body = fused_body(fused);
  AttentionChain c;
  c.mask_nodes = static_cast<int>(attr_int(fused, "mask_nodes", 0));
  const int rest = body == nullptr ? 0 : body->node_size() - c.mask_nodes;
  if (body == nullptr || c.mask_nodes < 0 || rest < 5 || rest > 6 ||
      (c.mask_nodes > 0 && rest != 6)) {
    return absl::InternalError(absl::StrCat("lms.fused Attention node '", fused.name(),
                                            "' lacks its body of five or six nodes and the "
                                            "mask's"));
  }
  for (int k = 0; k < body->node_size(); ++k) c.nodes.push_back(k);
  c.scale_operand = static_cast<int>(attr_int(fused, "scale_operand", 1));
  c.mask_operand = static_cast<int>(attr_int(fused, "mask_operand", 1));
  c.has_mask = rest == 6;
  LMS_ASSIGN_OR_RETURN(bool mapped, map_chain(im, *body, c));
  if (mapped) return absl::OkStatus();
  if (c.mask_nodes == 0) return visit_body(im, fused);
  // The mask is not the causal one by its positions: fold its nodes, check
  // the [t, t] constant as any mask, and else visit the other nodes.
  for (int k : c.mask()) LMS_RETURN_IF_ERROR(visit_node(im, body->node(k)));
  AttentionChain folded = c;
  folded.nodes.erase(folded.nodes.begin() + 3, folded.nodes.begin() + 3 + c.mask_nodes);
  folded.mask_nodes = 0;
  LMS_ASSIGN_OR_RETURN(mapped, map_chain(im, *body, folded));
  if (mapped) return absl::OkStatus();
  for (int k : folded.nodes) LMS_RETURN_IF_ERROR(visit_node(im, body->node(k)));
  return absl::OkStatus();
}

}  // namespace lms::onnx_import
