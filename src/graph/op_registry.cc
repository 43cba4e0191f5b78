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

absl::Status check_attr_names(const OpInstance& inst, const std::vector<std::string>& allowed,
                              const std::vector<std::string>& optional) {
  const Attrs& attrs = inst.attrs;
  std::vector<std::string> accepted = allowed;
  accepted.insert(accepted.end(), optional.begin(), optional.end());
  const std::string list = accepted.empty() ? "none" : absl::StrJoin(accepted, ", ");
  for (const auto& [key, value] : attrs) {
    if (key == kWorkspaceAttr &&
        std::find(optional.begin(), optional.end(), key) != optional.end()) {
      const std::string* v = std::get_if<std::string>(&value);
      if (v == nullptr || (*v != kWorkspaceFast && *v != kWorkspaceLeast)) {
        return invalid(inst, ops_internal::str_cat("attribute '", kWorkspaceAttr,
                                                   "' must be the string \"", kWorkspaceFast,
                                                   "\" or \"", kWorkspaceLeast, "\""));
      }
    }
    if (key == kLayoutAttr) continue;  // every op's; check_layout_attr
    if (std::find(accepted.begin(), accepted.end(), key) == accepted.end()) {
      return invalid(inst,
                     ops_internal::str_cat("unknown attribute '", key, "' (allowed: ", list, ")"));
    }
  }
  for (const std::string& key : allowed) {
    if (!attrs.contains(key)) {
      return invalid(inst, ops_internal::str_cat("missing attribute '", key, "' (required: ",
                                                 absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

// The optional "layout" attribute (kLayoutAttr in lms/types.h): one 'p' or
// 'b' per input, ':', one per output.
absl::Status check_layout_attr(const OpInstance& inst, size_t num_outputs) {
  const size_t num_inputs = inst.input_shapes.size();
  auto it = inst.attrs.find(kLayoutAttr);
  if (it == inst.attrs.end()) return absl::OkStatus();
  const std::string* v = std::get_if<std::string>(&it->second);
  bool ok = v != nullptr && v->size() == num_inputs + 1 + num_outputs && (*v)[num_inputs] == ':';
  for (size_t i = 0; ok && i < v->size(); ++i) {
    ok = i == num_inputs || (*v)[i] == kLayoutPlain || (*v)[i] == kLayoutBlocked;
  }
  if (ok) return absl::OkStatus();
  return invalid(inst, ops_internal::str_cat("attribute '", kLayoutAttr, "' must be a string of ",
                                             num_inputs,
                                             " characters 'p' or 'b' (one per input), ':', and ",
                                             num_outputs, " more (one per output)"));
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

// The family's shape rule: the op schema's (infer_outputs) or, for the ops
// no backend compiles, the family's own, whose message gains the node name.
absl::StatusOr<Shapes> run_rule(const ops_internal::InferFn& own, const OpInstance& inst) {
  if (!own) return infer_outputs(inst);
  absl::StatusOr<Shapes> outputs = own(inst.attrs, inst.input_shapes);
  if (!outputs.ok()) return invalid(inst, outputs.status().message());
  return outputs;
}

// Wraps the op's rule with the checks all ops share.
OpDef finish(OpSpec spec) {
  OpDef def = std::move(spec.def);
  def.attrs = attr_schema(spec);
  LMS_CHECK(static_cast<bool>(spec.infer) != has_schema_rule(def.kind));  // one rule per op
  const auto max_in = def.max_inputs < 0 ? static_cast<size_t>(-1)
                                         : static_cast<size_t>(def.max_inputs);
  def.infer = [own = std::move(spec.infer), attrs_allowed = std::move(spec.attrs),
               attrs_optional = std::move(spec.optional_attrs),
               min_in = static_cast<size_t>(def.min_inputs),
               max_in](const OpInstance& inst) -> absl::StatusOr<Shapes> {
    LMS_RETURN_IF_ERROR(check_arity(inst, min_in, max_in));
    LMS_RETURN_IF_ERROR(check_inputs(inst));
    LMS_RETURN_IF_ERROR(check_attr_names(inst, attrs_allowed, attrs_optional));
    LMS_ASSIGN_OR_RETURN(Shapes outputs, run_rule(own, inst));
    // The rules check their own arithmetic; this catches outputs that are
    // well-formed dim by dim but too large as a whole (a product of dims).
    for (size_t j = 0; j < outputs.size(); ++j) {
      absl::Status s =
          check_tensor_shape(ops_internal::str_cat("output ", j), outputs[j], DType::kFloat32);
      if (!s.ok()) return invalid(inst, s.message());
    }
    LMS_RETURN_IF_ERROR(check_layout_attr(inst, outputs.size()));
    return outputs;
  };
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

DType output_dtype(const Graph& graph, OpKind op, const std::vector<TensorId>& inputs) {
  if (is_copy(op) && !inputs.empty()) return graph.tensor(inputs[0]).dtype;
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
  Shapes in, out;
  node_shapes(graph, n, in, out);
  return op_def(n.op).bytes(n.attrs, in, out);
}

}  // namespace lms
