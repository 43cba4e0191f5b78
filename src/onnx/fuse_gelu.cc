// Note [GELU chain]: before ONNX Gelu (opset 20), torch.onnx.export writes
// the exact GELU of nn.GELU() as five nodes (torch 1.13, opsets 14 to 17):
//
//   d = Div(x, 1.4142135)   or  Mul(x, 0.70710677) in either operand order
//   e = Erf(d)
//   a = Add(e, 1)           either order
//   m = Mul(x, a)           either order
//   y = Mul(m, 0.5)         either order
//
// lms has no erf op, so the chain becomes one gelu node (docs/ops.md), whose
// output is y. FuseGeluPass matches the structure alone: the four inner
// values each read by the next node only and by no graph output, the same x
// in the first node and the first Mul. It replaces the chain by one
// lms.fused Gelu node at y's place, its five nodes as its body and the
// operand index of each constant as its attribute constant_operands.
// map_fused_gelu, called when the walk reaches that node (every constant,
// wherever in the file, is known by then), checks the three constants and
// adds the gelu node; with other constants it declines and the body's five
// nodes are visited one by one, which refuses Erf as it always did.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lms/status.h"
#include "onnx/import_pass.h"
#include "onnx/importer.h"

namespace lms::onnx_import {
namespace {

using NodeProto = ::onnx::NodeProto;

constexpr double kSqrt2 = 1.4142135623730951;
// A float constant written by the export is within an ulp of its double.
constexpr double kConstantTolerance = 1e-6;
constexpr int kChainLength = 5;

// The five nodes of a chain by index in the graph, in chain order (Div or
// Mul, Erf, Add, Mul, Mul), the operand index of the constant of the first
// node, the Add and the last Mul, and x.
struct GeluChain {
  std::array<int, kChainLength> nodes = {};
  std::array<int, 3> constant = {};
  std::string x;
};

// How many node inputs and graph outputs read each value.
absl::flat_hash_map<std::string, int> reader_counts(const ::onnx::GraphProto& g) {
  absl::flat_hash_map<std::string, int> readers;
  for (const NodeProto& n : g.node()) {
    for (const std::string& in : n.input()) ++readers[in];
  }
  for (const auto& o : g.output()) ++readers[o.name()];
  return readers;
}

// The index (0 or 1) of the operand of two-input node `n` that is not
// `value`; -1 when neither or both are `value`.
int other_operand_index(const NodeProto& n, const std::string& value) {
  if (n.input_size() != 2 || n.output_size() < 1) return -1;
  if (n.input(0) == value && n.input(1) != value) return 1;
  if (n.input(1) == value && n.input(0) != value) return 0;
  return -1;
}

// The chain whose first node is g.node(first), if the structure matches.
std::optional<GeluChain> chain_from(const ::onnx::GraphProto& g, int first,
                                    const absl::flat_hash_map<std::string, int>& readers,
                                    const absl::flat_hash_map<std::string, int>& reader_node) {
  const NodeProto& d = g.node(first);
  if ((d.op_type() != "Div" && d.op_type() != "Mul") || d.input_size() != 2) return std::nullopt;
  GeluChain c;
  // The reader of `value` when it has exactly one (and is no graph output).
  auto next = [&](const std::string& value) -> int {
    auto r = readers.find(value);
    auto n = reader_node.find(value);
    return r != readers.end() && r->second == 1 && n != reader_node.end() ? n->second : -1;
  };
  if (d.output_size() != 1) return std::nullopt;
  const int e = next(d.output(0));
  if (e < 0 || g.node(e).op_type() != "Erf" || g.node(e).input_size() != 1 ||
      g.node(e).output_size() != 1) {
    return std::nullopt;
  }
  const int a = next(g.node(e).output(0));
  if (a < 0 || g.node(a).op_type() != "Add") return std::nullopt;
  c.constant[1] = other_operand_index(g.node(a), g.node(e).output(0));
  if (c.constant[1] < 0 || g.node(a).output_size() != 1) return std::nullopt;
  const int m = next(g.node(a).output(0));
  if (m < 0 || g.node(m).op_type() != "Mul" || g.node(m).output_size() != 1) return std::nullopt;
  const int x_at = other_operand_index(g.node(m), g.node(a).output(0));
  if (x_at < 0) return std::nullopt;
  c.x = g.node(m).input(x_at);
  // The scale: input 1 of Div, either operand of Mul (the one that is not x).
  c.constant[0] = other_operand_index(d, c.x);
  if (c.constant[0] < 0 || (d.op_type() == "Div" && c.constant[0] != 1)) return std::nullopt;
  const int y = next(g.node(m).output(0));
  if (y < 0 || g.node(y).op_type() != "Mul") return std::nullopt;
  c.constant[2] = other_operand_index(g.node(y), g.node(m).output(0));
  if (c.constant[2] < 0) return std::nullopt;
  c.nodes = {first, e, a, m, y};
  return c;
}

// Whether input `k` of `n` is a one-element constant within the tolerance
// of `want`, and not a trainable initializer (which the chain would drop).
absl::StatusOr<bool> constant_is(Importer& im, const NodeProto& n, int k, double want) {
  LMS_ASSIGN_OR_RETURN(const Value* v, im.input(n, k));
  if (v == nullptr || !v->constant || v->constant->numel() != 1) return false;
  if (im.trainable.contains(n.input(k))) return false;
  return std::fabs(v->constant->at(0) - want) <= kConstantTolerance * std::fabs(want);
}

// The chains of `g` by structure alone, in the order of their first nodes;
// a node belongs to one chain at most.
std::vector<GeluChain> find_gelu_chains(const ::onnx::GraphProto& g) {
  const absl::flat_hash_map<std::string, int> readers = reader_counts(g);
  absl::flat_hash_map<std::string, int> reader_node;  // value -> its (last) reading node
  for (int i = 0; i < g.node_size(); ++i) {
    for (const std::string& in : g.node(i).input()) reader_node[in] = i;
  }
  std::vector<GeluChain> chains;
  absl::flat_hash_set<int> taken;
  for (int i = 0; i < g.node_size(); ++i) {
    std::optional<GeluChain> c = chain_from(g, i, readers, reader_node);
    if (!c ||
        std::any_of(c->nodes.begin(), c->nodes.end(), [&](int k) { return taken.contains(k); })) {
      continue;
    }
    taken.insert(c->nodes.begin(), c->nodes.end());
    chains.push_back(*c);
  }
  return chains;
}

// Adds one gelu node for chain `c` of `g` if its constants are sqrt(2)
// (Div) or 1/sqrt(2) (Mul), 1 and 0.5; false, adding nothing, otherwise.
absl::StatusOr<bool> map_chain(Importer& im, const ::onnx::GraphProto& g, const GeluChain& c) {
  const NodeProto& d = g.node(c.nodes[0]);
  const double scale = d.op_type() == "Div" ? kSqrt2 : 1.0 / kSqrt2;
  for (auto [node, k, want] :
       {std::tuple{c.nodes[0], c.constant[0], scale}, std::tuple{c.nodes[2], c.constant[1], 1.0},
        std::tuple{c.nodes[4], c.constant[2], 0.5}}) {
    LMS_ASSIGN_OR_RETURN(bool ok, constant_is(im, g.node(node), k, want));
    if (!ok) return false;
  }
  const NodeProto& last = g.node(c.nodes[4]);
  LMS_ASSIGN_OR_RETURN(TensorId x, im.tensor_input(d, 1 - c.constant[0]));
  LMS_RETURN_IF_ERROR(im.add(last, OpKind::kGelu, last.output(0), {x}, {}).status());
  return true;
}

}  // namespace

absl::StatusOr<bool> FuseGeluPass::run(::onnx::GraphProto& g) {
  std::vector<ChainFusion> fusions;
  for (const GeluChain& c : find_gelu_chains(g)) {
    const std::vector<int> nodes(c.nodes.begin(), c.nodes.end());
    ::onnx::NodeProto fused = fused_node(g, nodes, "Gelu");
    add_attr(fused, "constant_operands",
             std::vector<int64_t>(c.constant.begin(), c.constant.end()));
    fusions.push_back({nodes, std::move(fused)});
  }
  return replace_chains(g, std::move(fusions));
}

absl::Status map_fused_gelu(Importer& im, const NodeProto& fused) {
  const ::onnx::GraphProto* body = fused_body(fused);
  const std::vector<int64_t> constant = attr_ints(fused, "constant_operands");
  if (body == nullptr || body->node_size() != kChainLength || constant.size() != 3) {
    return absl::InternalError(absl::StrCat("lms.fused Gelu node '", fused.name(),
                                            "' lacks its five-node body or constant_operands"));
  }
  GeluChain c;
  c.nodes = {0, 1, 2, 3, 4};
  std::copy(constant.begin(), constant.end(), c.constant.begin());
  LMS_ASSIGN_OR_RETURN(bool mapped, map_chain(im, *body, c));
  return mapped ? absl::OkStatus() : visit_body(im, fused);
}

}  // namespace lms::onnx_import
