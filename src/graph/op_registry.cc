// The op table: built once on first use from the family files (ops_*.cc) and
// immutable afterwards. Every op's infer is wrapped here with the checks all
// ops share (input count, known attribute names, required attributes), so a
// family's infer can index its inputs and attributes without re-checking.
#include "graph/op_registry.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/ops_internal.h"
#include "lms/status.h"
#include "lms/types.h"
#include "op_schema/op_schema.h"
#include "op_schema/spec_checks.h"

namespace lms {
namespace {

using ops_internal::OpSpec;

// The default cost in bytes: every input read once, every output written
// once (float32 until there are other dtypes).
double bytes_of_inputs_and_outputs(const Attrs&, const Shapes& in, const Shapes& out) {
  double bytes = 0;
  for (const auto* shapes : {&in, &out}) {
    for (const Shape& s : *shapes) bytes += static_cast<double>(shape_bytes(s));
  }
  return bytes;
}

// The schema's attribute list: required and optional names, typed by
// attr_type, sorted by name.
std::vector<AttrSchema> attr_schema(const OpSpec& spec) {
  std::vector<AttrSchema> attrs;
  for (const auto* names : {&spec.attrs, &spec.optional_attrs}) {
    for (const std::string& name : *names) {
      std::optional<AttrType> type = ops_internal::attr_type(name);
      LMS_CHECK(type.has_value());  // an attribute without a type in attr_type
      attrs.push_back({name, *type, names == &spec.attrs});
    }
  }
  std::sort(attrs.begin(), attrs.end(),
            [](const AttrSchema& a, const AttrSchema& b) { return a.name < b.name; });
  return attrs;
}

// The registry entry's infer: the op schema's infer_outputs, or for the ops
// no backend compiles (the schema has no rule for them) the same shared
// checks around the family's own rule, whose message gains the node name.
OpDef finish(OpSpec spec) {
  OpDef def = std::move(spec.def);
  def.attrs = attr_schema(spec);
  if (!spec.infer) {
    LMS_CHECK(has_schema_rule(def.kind));  // an op without a rule of its own
    def.infer = [](const OpInstance& inst) { return infer_outputs(inst); };
  } else {
    LMS_CHECK(!has_schema_rule(def.kind));  // one rule per op
    const auto max_in =
        def.max_inputs < 0 ? static_cast<size_t>(-1) : static_cast<size_t>(def.max_inputs);
    def.infer = [own = std::move(spec.infer),
                 names = OpAttrNames{std::move(spec.attrs), std::move(spec.optional_attrs)},
                 min_in = static_cast<size_t>(def.min_inputs),
                 max_in](const OpInstance& inst) -> absl::StatusOr<Shapes> {
      LMS_RETURN_IF_ERROR(check_arity(inst, min_in, max_in));
      LMS_RETURN_IF_ERROR(check_inputs(inst));
      LMS_RETURN_IF_ERROR(check_attr_names(inst, names));
      absl::StatusOr<Shapes> outputs = own(inst.attrs, inst.input_shapes);
      if (!outputs.ok()) return invalid(inst, outputs.status().message());
      LMS_RETURN_IF_ERROR(check_outputs(inst, *outputs));
      return outputs;
    };
  }
  if (!def.flops) {
    def.flops = [](const Attrs&, const Shapes&, const Shapes&) { return 0.0; };
  }
  if (!def.bytes) def.bytes = bytes_of_inputs_and_outputs;
  return def;
}

// Indexed by OpKind; every kind registered exactly once.
using OpTable = std::array<OpDef, kNumOpKinds>;

const OpTable& op_table() {
  static const auto* const table = [] {
    std::vector<OpSpec> specs;
    ops_internal::register_conv_ops(specs);
    ops_internal::register_pointwise_ops(specs);
    ops_internal::register_embedding_ops(specs);
    ops_internal::register_linear_ops(specs);
    ops_internal::register_norm_ops(specs);
    ops_internal::register_attention_ops(specs);
    ops_internal::register_loss_ops(specs);
    ops_internal::register_optimizer_ops(specs);
    ops_internal::register_swap_ops(specs);
    auto* t = new OpTable();
    std::array<bool, kNumOpKinds> seen{};
    for (OpSpec& spec : specs) {
      const auto k = static_cast<size_t>(spec.def.kind);
      LMS_CHECK(!seen[k]);  // registered twice
      seen[k] = true;
      (*t)[k] = finish(std::move(spec));
    }
    for (bool s : seen) LMS_CHECK(s);  // an OpKind without a registry entry
    return t;
  }();
  return *table;
}

template <typename T>
absl::StatusOr<T> attr_as(const Attrs& attrs, std::string_view key, std::string_view type) {
  auto it = attrs.find(key);
  if (it == attrs.end()) {
    return absl::InvalidArgumentError(
        ops_internal::str_cat("missing attribute '", key, "' (expected ", type, ")"));
  }
  const T* value = std::get_if<T>(&it->second);
  if (value == nullptr) {
    return absl::InvalidArgumentError(
        ops_internal::str_cat("attribute '", key, "' must be of type ", type));
  }
  return *value;
}

}  // namespace

const OpDef& op_def(OpKind op) { return op_table()[static_cast<size_t>(op)]; }

const char* attr_type_name(AttrType type) {
  switch (type) {
    case AttrType::kInt:
      return "int";
    case AttrType::kReal:
      return "real";
    case AttrType::kStr:
      return "str";
    case AttrType::kInts:
      return "ints";
  }
  return "?";
}

absl::StatusOr<int64_t> attr_int(const Attrs& attrs, std::string_view key) {
  return attr_as<int64_t>(attrs, key, "int");
}

absl::StatusOr<double> attr_real(const Attrs& attrs, std::string_view key) {
  return attr_as<double>(attrs, key, "real");
}

absl::StatusOr<std::string> attr_str(const Attrs& attrs, std::string_view key) {
  return attr_as<std::string>(attrs, key, "str");
}

absl::StatusOr<std::vector<int64_t>> attr_ints(const Attrs& attrs, std::string_view key) {
  return attr_as<std::vector<int64_t>>(attrs, key, "ints");
}

int64_t attr_int_or(const Attrs& attrs, std::string_view key, int64_t fallback) {
  auto v = attr_int(attrs, key);
  return v.ok() ? *v : fallback;
}

double attr_real_or(const Attrs& attrs, std::string_view key, double fallback) {
  auto v = attr_real(attrs, key);
  return v.ok() ? *v : fallback;
}

DType output_dtype(const Graph& graph, OpKind op, const Attrs& attrs,
                   const std::vector<TensorId>& inputs, size_t j) {
  if (is_copy(op) && !inputs.empty()) return graph.tensor(inputs[0]).dtype;
  if (op == OpKind::kCast) {
    const auto it = attrs.find("to");
    const std::string* to = it == attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
    return to == nullptr ? DType::kFloat32 : parse_dtype(*to).value_or(DType::kFloat32);
  }
  // Per Note [Float dtypes of ops], the inputs' float dtype.
  if (op_follows_input_dtype(op) && !inputs.empty() && !is_master_output(op, j)) {
    return graph.tensor(inputs[0]).dtype;
  }
  return DType::kFloat32;
}

OpInstance node_instance(const Graph& graph, std::string_view name, OpKind op, const Attrs& attrs,
                         const std::vector<TensorId>& inputs) {
  OpInstance inst{std::string(name), op, attrs, {}, {}, {}, {}};
  for (TensorId t : inputs) {
    const Tensor& tensor = graph.tensor(t);
    inst.input_shapes.push_back(tensor.shape);
    inst.input_dtypes.push_back(tensor.dtype);
    inst.input_names.push_back(tensor.name);
  }
  return inst;
}

namespace {

void node_shapes(const Graph& graph, const Node& n, Shapes& in, Shapes& out) {
  for (TensorId t : n.inputs) in.push_back(graph.tensor(t).shape);
  for (TensorId t : n.outputs) out.push_back(graph.tensor(t).shape);
}

}  // namespace

double node_flops(const Graph& graph, NodeId node) {
  if (node < 0 || node >= graph.num_nodes()) return 0;
  const Node& n = graph.node(node);
  Shapes in, out;
  node_shapes(graph, n, in, out);
  return op_def(n.op).flops(n.attrs, in, out);
}

double node_bytes(const Graph& graph, NodeId node) {
  if (node < 0 || node >= graph.num_nodes()) return 0;
  const Node& n = graph.node(node);
  if (n.op == OpKind::kCast) {  // tensors of two dtypes
    double bytes = 0;
    for (const auto* ids : {&n.inputs, &n.outputs}) {
      for (TensorId t : *ids) bytes += static_cast<double>(graph.tensor(t).bytes());
    }
    return bytes;
  }
  Shapes in, out;
  node_shapes(graph, n, in, out);
  // The op's bytes count float32 elements; one that follows its inputs'
  // dtype moves that dtype's (Note [Float dtypes of ops]).
  const double bytes = op_def(n.op).bytes(n.attrs, in, out);
  if (!op_follows_input_dtype(n.op) || n.outputs.empty()) return bytes;
  return bytes * static_cast<double>(graph.tensor(n.outputs[0]).bytes()) /
         static_cast<double>(shape_bytes(graph.tensor(n.outputs[0]).shape));
}

}  // namespace lms
