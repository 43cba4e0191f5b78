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

absl::Status check_arity(const OpDef& def, size_t n) {
  const int count = static_cast<int>(n);
  if (count >= def.min_inputs && (def.max_inputs < 0 || count <= def.max_inputs)) {
    return absl::OkStatus();
  }
  std::string allowed = def.max_inputs < 0 ? ops_internal::str_cat("at least ", def.min_inputs)
                        : def.min_inputs == def.max_inputs
                            ? ops_internal::str_cat(def.min_inputs)
                            : ops_internal::str_cat(def.min_inputs, " to ", def.max_inputs);
  return ops_internal::op_error(def.name,
                                ops_internal::str_cat("takes ", allowed, " inputs, got ", count));
}

absl::Status check_attr_names(const std::string& op, const std::vector<std::string>& allowed,
                              const std::vector<std::string>& optional, const Attrs& attrs) {
  std::vector<std::string> accepted = allowed;
  accepted.insert(accepted.end(), optional.begin(), optional.end());
  const std::string list = accepted.empty() ? "none" : absl::StrJoin(accepted, ", ");
  for (const auto& [key, value] : attrs) {
    if (key == kWorkspaceAttr &&
        std::find(optional.begin(), optional.end(), key) != optional.end()) {
      const std::string* v = std::get_if<std::string>(&value);
      if (v == nullptr || (*v != kWorkspaceFast && *v != kWorkspaceLeast)) {
        return ops_internal::op_error(
            op, ops_internal::str_cat("attribute '", kWorkspaceAttr, "' must be the string \"",
                                      kWorkspaceFast, "\" or \"", kWorkspaceLeast, "\""));
      }
    }
    if (key == kLayoutAttr) continue;  // every op's; check_layout_attr
    if (std::find(accepted.begin(), accepted.end(), key) == accepted.end()) {
      return ops_internal::op_error(
          op, ops_internal::str_cat("unknown attribute '", key, "' (allowed: ", list, ")"));
    }
  }
  for (const std::string& key : allowed) {
    if (!attrs.contains(key)) {
      return ops_internal::op_error(
          op, ops_internal::str_cat("missing attribute '", key,
                                    "' (required: ", absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

// The optional "layout" attribute (kLayoutAttr in lms/types.h): one 'p' or
// 'b' per input, ':', one per output.
absl::Status check_layout_attr(const std::string& op, const Attrs& attrs, size_t num_inputs,
                               size_t num_outputs) {
  auto it = attrs.find(kLayoutAttr);
  if (it == attrs.end()) return absl::OkStatus();
  const std::string* v = std::get_if<std::string>(&it->second);
  bool ok = v != nullptr && v->size() == num_inputs + 1 + num_outputs && (*v)[num_inputs] == ':';
  for (size_t i = 0; ok && i < v->size(); ++i) {
    ok = i == num_inputs || (*v)[i] == kLayoutPlain || (*v)[i] == kLayoutBlocked;
  }
  if (ok) return absl::OkStatus();
  return ops_internal::op_error(
      op, ops_internal::str_cat("attribute '", kLayoutAttr, "' must be a string of ", num_inputs,
                                " characters 'p' or 'b' (one per input), ':', and ", num_outputs,
                                " more (one per output)"));
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

// Wraps the family's infer with the shared checks.
OpDef finish(OpSpec spec) {
  OpDef def = std::move(spec.def);
  def.attrs = attr_schema(spec);
  auto inner = std::move(def.infer);
  OpDef arity;
  arity.name = def.name;
  arity.min_inputs = def.min_inputs;
  arity.max_inputs = def.max_inputs;
  def.infer = [inner = std::move(inner), attrs_allowed = std::move(spec.attrs),
               attrs_optional = std::move(spec.optional_attrs), arity = std::move(arity)](
                  const Attrs& attrs, const Shapes& inputs) -> absl::StatusOr<Shapes> {
    LMS_RETURN_IF_ERROR(check_arity(arity, inputs.size()));
    LMS_RETURN_IF_ERROR(check_attr_names(arity.name, attrs_allowed, attrs_optional, attrs));
    for (size_t i = 0; i < inputs.size(); ++i) {
      absl::Status s = check_shape(ops_internal::str_cat("input ", i), inputs[i]);
      if (!s.ok()) return ops_internal::op_error(arity.name, s.message());
    }
    LMS_ASSIGN_OR_RETURN(Shapes outputs, inner(attrs, inputs));
    // The family code checks its own arithmetic; this catches outputs that
    // are well-formed dim by dim but too large as a whole (a product of dims).
    for (size_t j = 0; j < outputs.size(); ++j) {
      absl::Status s = check_shape(ops_internal::str_cat("output ", j), outputs[j]);
      if (!s.ok()) return ops_internal::op_error(arity.name, s.message());
    }
    LMS_RETURN_IF_ERROR(check_layout_attr(arity.name, attrs, inputs.size(), outputs.size()));
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

DType input_dtype(OpKind op, size_t i) {
  const std::vector<int>& wide = op_def(op).int64_inputs;
  const bool int64 = std::find(wide.begin(), wide.end(), static_cast<int>(i)) != wide.end();
  return int64 ? DType::kInt64 : DType::kFloat32;
}

DType output_dtype(const Graph& graph, OpKind op, const std::vector<TensorId>& inputs) {
  if (is_copy(op) && !inputs.empty()) return graph.tensor(inputs[0]).dtype;
  return DType::kFloat32;
}

absl::Status check_input_dtypes(const Graph& graph, OpKind op,
                                const std::vector<TensorId>& inputs) {
  if (is_copy(op)) return absl::OkStatus();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = graph.tensor(inputs[i]);
    const DType want = input_dtype(op, i);
    if (t.dtype == want) continue;
    return ops_internal::op_error(
        op_name(op),
        ops_internal::str_cat("input ", i, " '", t.name, "' has dtype ", dtype_name(t.dtype),
                              ", the op takes ", dtype_name(want), " there"));
  }
  return absl::OkStatus();
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
