// FuseLayerNormPass (import_pass.h): the layer norm that torch.onnx.export
// writes below opset 17, where ONNX has no LayerNormalization, rewritten
// into one LayerNormalization node before the import visits the nodes:
//
//   m = ReduceMean(x, axes=[-1])      d = Sub(x, m)
//   v = ReduceMean(Pow(d, 2), axes=[-1])
//   y = Add(Mul(Div(d, Sqrt(Add(v, eps))), weight), bias)
//
// with 2 and eps scalar constants (Constant nodes or initializers), weight
// and bias initializers, and every intermediate value read only inside the
// pattern (not a graph output). The match decides alone, so the fused node
// is the standard op, not an lms.fused one: it takes the place of the last
// Add, where x, weight and bias are all defined. The passes run before the
// trainable initializers are chosen, so weight and bias default to
// trainable as LayerNormalization's Scale and B.
#include <onnx/onnx_pb.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "onnx/import_pass.h"
#include "onnx/importer.h"

namespace lms::onnx_import {
namespace {

using ::onnx::GraphProto;
using ::onnx::NodeProto;

// Who reads and who writes each value of the graph.
struct ValueIndex {
  absl::flat_hash_map<std::string, std::vector<int>> readers;  // node indices
  absl::flat_hash_map<std::string, int> producer;
  absl::flat_hash_map<std::string, const ::onnx::TensorProto*> initializers;
  absl::flat_hash_set<std::string> graph_outputs;
};

ValueIndex index_values(const GraphProto& g) {
  ValueIndex ix;
  for (int i = 0; i < g.node_size(); ++i) {
    for (const std::string& in : g.node(i).input()) ix.readers[in].push_back(i);
    for (const std::string& out : g.node(i).output()) ix.producer[out] = i;
  }
  for (const auto& t : g.initializer()) ix.initializers[t.name()] = &t;
  for (const auto& o : g.output()) ix.graph_outputs.insert(o.name());
  return ix;
}

// The one node reading `value`, when it is of type `op` and `value` is not a
// graph output; -1 otherwise.
int sole_reader(const GraphProto& g, const ValueIndex& ix, const std::string& value,
                std::string_view op) {
  auto it = ix.readers.find(value);
  if (ix.graph_outputs.contains(value) || it == ix.readers.end() || it->second.size() != 1) {
    return -1;
  }
  return g.node(it->second[0]).op_type() == op ? it->second[0] : -1;
}

// The value of a one-element float constant: a Constant node's output or an
// initializer.
std::optional<double> scalar(const GraphProto& g, const ValueIndex& ix, const std::string& name,
                             const std::string& model_dir) {
  const ::onnx::TensorProto* t = nullptr;
  if (auto it = ix.initializers.find(name); it != ix.initializers.end()) t = it->second;
  if (auto it = ix.producer.find(name); t == nullptr && it != ix.producer.end()) {
    const NodeProto& c = g.node(it->second);
    if (c.op_type() != "Constant") return std::nullopt;
    if (const auto* a = find_attr(c, "value_float")) return a->f();
    if (const auto* a = find_attr(c, "value")) t = &a->t();
  }
  if (t == nullptr) return std::nullopt;
  absl::StatusOr<Const> v = decode_tensor(*t, model_dir);
  if (!v.ok() || v->dtype != DType::kFloat32 || v->numel() != 1) return std::nullopt;
  return v->at(0);
}

bool reduces_last_axis(const NodeProto& n) {
  return n.op_type() == "ReduceMean" && n.input_size() == 1 &&
         attr_ints(n, "axes") == std::vector<int64_t>{-1} && attr_int(n, "keepdims", 1) == 1;
}

// The operand of binary node `n` other than `value`, or "" when neither
// (or both) of its inputs is `value`.
std::string other_operand_name(const NodeProto& n, const std::string& value) {
  if (n.input_size() != 2 || n.input(0) == n.input(1)) return "";
  if (n.input(0) == value) return n.input(1);
  if (n.input(1) == value) return n.input(0);
  return "";
}

// One matched decomposition: its nodes (to remove) and the fused node.
struct Match {
  std::vector<int> nodes;
  NodeProto fused;
};

// Follows the pattern from the first ReduceMean, node `r1`.
std::optional<Match> match_at(const GraphProto& g, const ValueIndex& ix, int r1,
                              const std::string& model_dir) {
  const NodeProto& mean = g.node(r1);
  if (!reduces_last_axis(mean)) return std::nullopt;
  const std::string& x = mean.input(0);
  const int sub = sole_reader(g, ix, mean.output(0), "Sub");
  if (sub < 0 || g.node(sub).input(0) != x || g.node(sub).input(1) != mean.output(0)) {
    return std::nullopt;
  }
  const std::string& d = g.node(sub).output(0);
  auto d_readers = ix.readers.find(d);
  if (ix.graph_outputs.contains(d) || d_readers == ix.readers.end() ||
      d_readers->second.size() != 2) {
    return std::nullopt;
  }
  int pow = -1, div = -1;
  for (int i : d_readers->second) {
    if (g.node(i).op_type() == "Pow" && g.node(i).input(0) == d) pow = i;
    if (g.node(i).op_type() == "Div" && g.node(i).input(0) == d) div = i;
  }
  if (pow < 0 || div < 0 || scalar(g, ix, g.node(pow).input(1), model_dir) != 2.0) {
    return std::nullopt;
  }
  const int r2 = sole_reader(g, ix, g.node(pow).output(0), "ReduceMean");
  if (r2 < 0 || !reduces_last_axis(g.node(r2))) return std::nullopt;
  const int add_eps = sole_reader(g, ix, g.node(r2).output(0), "Add");
  if (add_eps < 0) return std::nullopt;
  const std::optional<double> eps =
      scalar(g, ix, other_operand_name(g.node(add_eps), g.node(r2).output(0)), model_dir);
  const int sqrt = sole_reader(g, ix, g.node(add_eps).output(0), "Sqrt");
  if (!eps || sqrt < 0 || sole_reader(g, ix, g.node(sqrt).output(0), "Div") != div ||
      g.node(div).input(1) != g.node(sqrt).output(0)) {
    return std::nullopt;
  }
  const int mul = sole_reader(g, ix, g.node(div).output(0), "Mul");
  if (mul < 0) return std::nullopt;
  const std::string weight = other_operand_name(g.node(mul), g.node(div).output(0));
  const int add = sole_reader(g, ix, g.node(mul).output(0), "Add");
  if (add < 0 || !ix.initializers.contains(weight)) return std::nullopt;
  const std::string bias = other_operand_name(g.node(add), g.node(mul).output(0));
  if (!ix.initializers.contains(bias) || g.node(add).output_size() != 1) return std::nullopt;

  Match m;
  m.nodes = {r1, sub, pow, r2, add_eps, sqrt, div, mul, add};
  m.fused.set_op_type("LayerNormalization");
  m.fused.set_name(g.node(add).name().empty() ? g.node(add).output(0) : g.node(add).name());
  for (const std::string& in : {x, weight, bias}) m.fused.add_input(in);
  m.fused.add_output(g.node(add).output(0));
  auto* axis = m.fused.add_attribute();
  axis->set_name("axis");
  axis->set_type(::onnx::AttributeProto::INT);
  axis->set_i(-1);
  auto* epsilon = m.fused.add_attribute();
  epsilon->set_name("epsilon");
  epsilon->set_type(::onnx::AttributeProto::FLOAT);
  epsilon->set_f(static_cast<float>(*eps));
  return m;
}

}  // namespace

absl::StatusOr<bool> FuseLayerNormPass::run(GraphProto& g) {
  const ValueIndex ix = index_values(g);
  absl::flat_hash_set<int> taken;
  std::vector<ChainFusion> fusions;
  for (int i = 0; i < g.node_size(); ++i) {
    if (taken.contains(i)) continue;
    std::optional<Match> m = match_at(g, ix, i, model_dir_);
    if (!m) continue;
    taken.insert(m->nodes.begin(), m->nodes.end());
    fusions.push_back({std::move(m->nodes), std::move(m->fused)});
  }
  return replace_chains(g, std::move(fusions));
}

}  // namespace lms::onnx_import
