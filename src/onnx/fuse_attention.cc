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
// nn.MultiheadAttention (and so torchvision's ViT, at opsets 14 to 17)
// scales q first and multiplies [N·H,T,D] by [N·H,D,S], rank 3:
//
//   q' = Div(q, 1 / scale), or Mul(q, scale) either order
//   kt = Transpose(x, perm)     x [S,N·H,D] or another layout, kt [N·H,D,S]
//   c  = MatMul(q', kt)         then Add, Softmax and MatMul as above
//
// FuseAttentionPass matches the structure alone: each intermediate read by
// the next node only and by no graph output, the Transpose a permutation of
// rank 4 that keeps N first, or of rank 3. It replaces the chain by one lms.fused
// Attention node at y's place, the chain's nodes as its body and the
// operand index of the scale and of the mask as its attributes
// scale_operand and mask_operand (scale_on_q 1 for the second form).
// map_fused_attention, called when the walk
// reaches that node, checks the constants: scale a positive
// one-element constant, the mask (if any) a [T,S] constant (leading 1s
// allowed) with 0 on and below the diagonal and -inf or at most
// kMaskLimit above it, T == S. It then adds one attention node (causal
// when there is a mask), preceded by a transpose of x to [N,H,S,D] unless x
// is in that layout already; rank-3 operands, whose batched product is the
// same attention with one head, are reshaped to [N·H,1,T,D] around it (a
// copy each of q, k, v and the output: O(T·D), no [T,S] tensor). The
// shapes must then agree (q [..,T,D], k [..,S,D], v [..,S,D], the leading
// dims equal). Anything else declines, and the body's nodes
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
// k, MatMul then Mul or Div, or Mul or Div then MatMul when scale_on_q, the
// mask's comparison nodes if any, Add if masked, Softmax, MatMul), and the
// operand index of the scale and of the mask.
struct AttentionChain {
  std::vector<int> nodes;
  int scale_operand = 1;
  int mask_operand = 1;
  bool has_mask = false;
  bool scale_on_q = false;
  int mask_nodes = 0;  // Note [Causal mask from positions]

  // The mask's nodes (comparison first) and the Add's index in `nodes`.
  std::vector<int> mask() const { return {nodes.begin() + 3, nodes.begin() + 3 + mask_nodes}; }
  int add() const { return nodes[static_cast<size_t>(3 + mask_nodes)]; }
  int matmul() const { return nodes[scale_on_q ? 2 : 1]; }
  int scale() const { return nodes[scale_on_q ? 1 : 2]; }
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

// Transpose's perm if it has rank 4 and keeps N (dim 0) first, or rank 3.
std::optional<std::vector<int64_t>> head_perm(const NodeProto& t) {
  const std::vector<int64_t> perm = attr_ints(t, "perm");
  if (perm.size() != 4 && perm.size() != 3) return std::nullopt;
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t d = 0; d < sorted.size(); ++d) {
    if (sorted[d] != int64_t(d)) return std::nullopt;
  }
  // A head split keeps N first; H may come from dim 1 or 2 of x. A rank-3
  // product's N·H may come from any dim: the shapes decide at mapping.
  if (perm.size() == 4 && perm[0] != 0) return std::nullopt;
  return perm;
}

// The graph read backwards: the node writing a value that nothing else
// reads.
struct Walk {
  const ::onnx::GraphProto& g;
  absl::flat_hash_map<std::string, int> producer;
  Readers readers;

  explicit Walk(const ::onnx::GraphProto& graph) : g(graph), readers(graph) {
    for (int i = 0; i < g.node_size(); ++i) {
      for (const std::string& out : g.node(i).output()) producer[out] = i;
    }
  }
  // The `op` node writing `value`, if `value` has no other reader; -1 else.
  int from(const std::string& value, const char* op) const {
    auto p = producer.find(value);
    if (p == producer.end() || readers.sole(value) < 0 || g.node(p->second).op_type() != op) {
      return -1;
    }
    return p->second;
  }
  // The Mul or Div node (two inputs) writing `value` as `from` finds it.
  int scaling(const std::string& value) const {
    const int sc = std::max(from(value, "Mul"), from(value, "Div"));
    return sc >= 0 && g.node(sc).input_size() == 2 && g.node(sc).output_size() == 1 ? sc : -1;
  }
  // The Transpose of k feeding MatMul `mm` as its input 1.
  int k_transpose(int mm) const {
    const int kt = from(g.node(mm).input(1), "Transpose");
    return kt >= 0 && is(g.node(kt), "Transpose", 1) && head_perm(g.node(kt)) ? kt : -1;
  }
};

// The scaled scores written into `value`: MatMul(q, kt) then its scale
// (the scores input 0 of Div, either operand of Mul), or q scaled then
// MatMul(q', kt). The chain's first three nodes, or nullopt.
std::optional<AttentionChain> scaled_scores(const Walk& w, const std::string& value) {
  AttentionChain c;
  if (const int sc = w.scaling(value); sc >= 0) {
    for (int k : {0, 1}) {
      if (w.g.node(sc).op_type() == "Div" && k == 1) break;
      const int mm = w.from(w.g.node(sc).input(k), "MatMul");
      if (mm < 0 || !is(w.g.node(mm), "MatMul", 2)) continue;
      const int kt = w.k_transpose(mm);
      if (kt < 0) continue;
      c.scale_operand = 1 - k;
      c.nodes = {kt, mm, sc};
      return c;
    }
    return std::nullopt;
  }
  const int mm = w.from(value, "MatMul");
  if (mm < 0 || !is(w.g.node(mm), "MatMul", 2)) return std::nullopt;
  const int sc = w.scaling(w.g.node(mm).input(0));
  const int kt = w.k_transpose(mm);
  if (sc < 0 || kt < 0) return std::nullopt;
  // Div(q, c); for a Mul the mapper finds which operand is the constant.
  c.scale_operand = 1;
  c.scale_on_q = true;
  c.nodes = {kt, sc, mm};
  return c;
}

// The chain ending at g.node(last) (a MatMul), walking back from it.
std::optional<AttentionChain> chain_to(const Walk& w, int last) {
  const ::onnx::GraphProto& g = w.g;
  const NodeProto& y = g.node(last);
  if (!is(y, "MatMul", 2)) return std::nullopt;
  const int sm = w.from(y.input(0), "Softmax");
  if (sm < 0 || !is(g.node(sm), "Softmax", 1)) return std::nullopt;
  const int64_t axis = attr_int(g.node(sm), "axis", -1);
  if (axis != -1 && axis != 3) return std::nullopt;
  std::string scores = g.node(sm).input(0);
  const int add = w.from(scores, "Add");
  int mask_operand = 1;
  if (add >= 0) {
    const NodeProto& a = g.node(add);
    if (!is(a, "Add", 2)) return std::nullopt;
    // The scaled scores are one operand (the mask may be a Mul too: a
    // comparison times -1e9).
    const bool first = scaled_scores(w, a.input(0)).has_value();
    const bool second = scaled_scores(w, a.input(1)).has_value();
    if (first == second) return std::nullopt;
    mask_operand = first ? 1 : 0;
    scores = a.input(1 - mask_operand);
  }
  std::optional<AttentionChain> c = scaled_scores(w, scores);
  if (!c) return std::nullopt;
  c->mask_operand = mask_operand;
  if (add >= 0) {
    auto from = [&w](const std::string& value, const char* op) { return w.from(value, op); };
    const std::vector<int> mask = causal_mask_nodes(g, g.node(add).input(mask_operand), from);
    c->nodes.insert(c->nodes.end(), mask.begin(), mask.end());
    c->mask_nodes = static_cast<int>(mask.size());
    c->nodes.push_back(add);
  }
  c->nodes.push_back(sm);
  c->nodes.push_back(last);
  c->has_mask = add >= 0;
  return c;
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
  std::swap(perm[perm.size() - 2], perm[perm.size() - 1]);
  return perm;
}

// The chains of `g` by structure alone, in the order of their last nodes;
// a node belongs to one chain at most.
std::vector<AttentionChain> find_attention_chains(const ::onnx::GraphProto& g) {
  const Walk walk(g);
  std::vector<AttentionChain> chains;
  absl::flat_hash_set<int> taken;
  for (int i = 0; i < g.node_size(); ++i) {
    std::optional<AttentionChain> c = chain_to(walk, i);
    if (!c ||
        std::any_of(c->nodes.begin(), c->nodes.end(), [&](int k) { return taken.contains(k); })) {
      continue;
    }
    taken.insert(c->nodes.begin(), c->nodes.end());
    chains.push_back(*c);
  }
  return chains;
}

// The softmax scale of chain `c`: its Mul's or Div's one-element constant,
// positive and finite; for q scaled by a Mul, whichever operand is one.
std::optional<double> chain_scale(Importer& im, const NodeProto& sc, const AttentionChain& c,
                                  int* q_operand) {
  int k = c.scale_operand;
  std::optional<double> s = scalar_constant(im, sc, k);
  if (!s && c.scale_on_q && sc.op_type() == "Mul") s = scalar_constant(im, sc, k = 1 - k);
  if (!s) return std::nullopt;
  *q_operand = 1 - k;
  const double scale = sc.op_type() == "Div" ? 1.0 / *s : *s;
  if (!(scale > 0) || !std::isfinite(scale)) return std::nullopt;
  return scale;
}

// Whether q [..,T,D], k [..,S,D] (x read through `perm`) and v [..,S,D]
// agree: the same rank, leading dims and D.
bool shapes_agree(const Shape& q, const Shape& x, const std::vector<int64_t>& perm,
                  const Shape& v) {
  const size_t r = q.size();
  if (x.size() != r || v.size() != r || perm.size() != r) return false;
  Shape k(r);
  for (size_t d = 0; d < r; ++d) k[d] = x[static_cast<size_t>(perm[d])];
  for (size_t d = 0; d + 2 < r; ++d) {
    if (k[d] != q[d] || v[d] != q[d]) return false;
  }
  return k[r - 1] == q[r - 1] && v[r - 1] == q[r - 1] && v[r - 2] == k[r - 2];
}

// `t` [B,T,D] as [B,1,T,D] (a copy), for the attention op's head axis.
absl::StatusOr<TensorId> with_head_axis(Importer& im, const NodeProto& n, TensorId t,
                                        const std::string& name) {
  const Shape s = im.graph.tensor(t).shape;
  return im.add(n, OpKind::kReshape, absl::StrCat(n.output(0), "/", name), {t},
                {{"shape", std::vector<int64_t>{s[0], 1, s[1], s[2]}}});
}

// Adds one attention node (and a transpose of k where its layout needs one,
// reshapes around it for rank 3) for chain `c` of `g` if its scale is a
// positive constant, its mask, if any, a causal one and its shapes agree;
// false, adding nothing, otherwise.
absl::StatusOr<bool> map_chain(Importer& im, const ::onnx::GraphProto& g, const AttentionChain& c) {
  const NodeProto& kt = g.node(c.nodes[0]);
  const NodeProto& qk = g.node(c.matmul());
  const NodeProto& sc = g.node(c.scale());
  const NodeProto& y = g.node(c.nodes.back());
  int q_operand = 0;
  const std::optional<double> scale = chain_scale(im, sc, c, &q_operand);
  if (!scale) return false;
  LMS_ASSIGN_OR_RETURN(TensorId q,
                       c.scale_on_q ? im.tensor_input(sc, q_operand) : im.tensor_input(qk, 0));
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(kt, 0));
  LMS_ASSIGN_OR_RETURN(TensorId v, im.tensor_input(y, 1));
  const Shape qs = im.graph.tensor(q).shape;
  const std::vector<int64_t> perm = k_perm(*head_perm(kt));
  if (!shapes_agree(qs, im.graph.tensor(x).shape, perm, im.graph.tensor(v).shape)) return false;
  const int64_t t = qs[qs.size() - 2];
  if (c.has_mask && c.mask_nodes > 0 && !is_causal_mask_from_positions(im, g, c.mask(), t)) {
    return false;
  }
  if (c.has_mask && c.mask_nodes == 0 && !is_causal_mask(im, g.node(c.add()), c.mask_operand, t)) {
    return false;
  }
  std::vector<int64_t> identity(perm.size());
  for (size_t d = 0; d < identity.size(); ++d) identity[d] = int64_t(d);
  TensorId k = x;
  if (perm != identity) {
    k = transpose(im.graph, im.lms_name(kt.output(0)), x, perm);
    if (k == kNoTensor) return Importer::error(kt, std::string(im.graph.status().message()));
  }
  const Attrs attrs = {{"softmax_scale", *scale}, {"causal", int64_t{c.has_mask ? 1 : 0}}};
  if (qs.size() == 4) {
    LMS_RETURN_IF_ERROR(im.add(y, OpKind::kAttention, y.output(0), {q, k, v}, attrs).status());
    return true;
  }
  LMS_ASSIGN_OR_RETURN(q, with_head_axis(im, y, q, "q"));
  LMS_ASSIGN_OR_RETURN(k, with_head_axis(im, y, k, "k"));
  LMS_ASSIGN_OR_RETURN(v, with_head_axis(im, y, v, "v"));
  LMS_ASSIGN_OR_RETURN(
      TensorId a,
      im.add(y, OpKind::kAttention, absl::StrCat(y.output(0), "/attention"), {q, k, v}, attrs));
  LMS_RETURN_IF_ERROR(
      im.add(y, OpKind::kReshape, y.output(0), {a}, {{"shape", std::vector<int64_t>(qs)}})
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
    add_attr(fused, "scale_on_q", int64_t{c.scale_on_q ? 1 : 0});
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
  c.scale_on_q = attr_int(fused, "scale_on_q", 0) != 0;
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
