#include "lms/graph.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/op_registry.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "op_schema/spec_checks.h"

namespace lms {

const char* node_origin_name(NodeOrigin origin) {
  switch (origin) {
    case NodeOrigin::kOriginal:
      return "original";
    case NodeOrigin::kSwap:
      return "swap";
    case NodeOrigin::kRecompute:
      return "recompute";
    case NodeOrigin::kFused:
      return "fused";
    case NodeOrigin::kCast:
      return "cast";
  }
  return "original";
}

const char* role_name(TensorRole role) {
  switch (role) {
    case TensorRole::kInput:
      return "input";
    case TensorRole::kParameter:
      return "parameter";
    case TensorRole::kOptimizerState:
      return "optimizer_state";
    case TensorRole::kActivation:
      return "activation";
    case TensorRole::kGradient:
      return "gradient";
    case TensorRole::kHost:
      return "host";
  }
  return "unknown";
}

bool is_persistent(TensorRole role) {
  return role == TensorRole::kParameter || role == TensorRole::kOptimizerState;
}

namespace {

// Characters the text form (text.cc) uses as delimiters, and control
// characters (whitespace, line breaks) that would split or end a line there.
bool allowed_in_name(char ch) {
  const auto u = static_cast<unsigned char>(ch);
  if (u < 0x20 || u == 0x7f) return false;
  return std::string_view(" (),=[]{}\"").find(ch) == std::string_view::npos;
}

}  // namespace

absl::Status check_shape(std::string_view what, const Shape& shape, DType dtype) {
  return check_tensor_shape(what, shape, dtype);
}

absl::Status Graph::check_new_name(std::string_view name) const {
  if (name.empty()) return absl::InvalidArgumentError("empty tensor or node name");
  if (!std::all_of(name.begin(), name.end(), allowed_in_name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("name '", absl::CEscape(to_absl(name)),
                     "' contains whitespace, a control character or one of ( ) , = [ ] { } \", "
                     "which are not allowed"));
  }
  if (tensor_by_name_.contains(to_absl(name)) || node_by_name_.contains(to_absl(name))) {
    return absl::InvalidArgumentError(absl::StrCat("name '", to_absl(name), "' is already used"));
  }
  return absl::OkStatus();
}

absl::Status Graph::rename_tensor(TensorId id, std::string_view name) {
  if (id < 0 || id >= num_tensors()) {
    return absl::InvalidArgumentError(absl::StrCat("rename_tensor: no tensor ", id));
  }
  if (absl::Status s = check_new_name(name); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("rename_tensor: tensor '", tensors_[id].name,
                                                   "' to '", to_absl(name), "': ", s.message()));
  }
  tensor_by_name_.erase(tensors_[id].name);
  tensors_[id].name = std::string(name);
  tensor_by_name_.emplace(tensors_[id].name, id);
  return absl::OkStatus();
}

TensorId Graph::add_tensor(std::string_view name, Shape shape, TensorRole role, Init init) {
  TensorId id = num_tensors();
  Tensor t;
  t.name = std::string(name);
  t.shape = std::move(shape);
  t.role = role;
  t.init = init;
  tensors_.push_back(std::move(t));
  tensor_by_name_.emplace(std::string(name), id);
  return id;
}

namespace {

absl::Status check_init(std::string_view name, const Shape& shape, const Init& init) {
  if (init.kind == Init::Kind::kHeNormal && init.fan_in < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", to_absl(name), "': he_normal fan_in must be >= 1, got ", init.fan_in));
  }
  if (init.kind == Init::Kind::kValues &&
      (init.values == nullptr ||
       static_cast<int64_t>(init.values->size()) != num_elements(shape))) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", to_absl(name), "': values init holds ",
                     init.values == nullptr ? 0 : init.values->size(), " values, the shape has ",
                     num_elements(shape), " elements"));
  }
  return absl::OkStatus();
}

}  // namespace

TensorId Graph::add_leaf(std::string_view name, Shape shape, TensorRole role, Init init,
                         DType dtype) {
  absl::Status s = check_new_name(name);
  if (s.ok()) s = check_shape(absl::StrCat("tensor '", to_absl(name), "'"), shape, dtype);
  if (s.ok() && is_persistent(role)) s = check_init(name, shape, init);
  if (!s.ok()) {
    record_error(s);
    return kNoTensor;
  }
  const TensorId t = add_tensor(name, std::move(shape), role, init);
  tensors_[t].dtype = dtype;
  return t;
}

TensorId Graph::input(std::string_view name, Shape shape, DType dtype) {
  return add_leaf(name, std::move(shape), TensorRole::kInput, Init{}, dtype);
}

TensorId Graph::parameter(std::string_view name, Shape shape, Init init) {
  return add_leaf(name, std::move(shape), TensorRole::kParameter, init);
}

TensorId Graph::optimizer_state(std::string_view name, Shape shape, Init init) {
  return add_leaf(name, std::move(shape), TensorRole::kOptimizerState, init);
}

TensorId Graph::leaf_like(const Tensor& from) {
  if (from.role != TensorRole::kInput && !is_persistent(from.role)) {
    record_error(absl::InvalidArgumentError(absl::StrCat(
        "tensor '", from.name, "' (", role_name(from.role), ") is not an input or persistent")));
    return kNoTensor;
  }
  return add_leaf(from.name, from.shape, from.role, from.init, from.dtype);
}

void Graph::record_error(absl::Status error) {
  if (status_.ok() && !error.ok()) status_ = std::move(error);
}

std::string Graph::unique_name(std::string_view base) const {
  auto used = [&](const std::string& n) {
    return tensor_by_name_.contains(n) || node_by_name_.contains(n);
  };
  std::string name(base);
  for (int i = 1; used(name); ++i) name = absl::StrCat(to_absl(base), "_", i);
  return name;
}

absl::StatusOr<std::vector<TensorId>> Graph::add_node(OpKind op, std::string_view name,
                                                      std::vector<TensorId> inputs, Attrs attrs,
                                                      TensorRole output_role) {
  if (!status_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node '", to_absl(name),
                     "' not added: the graph already has an error: ", status_.message()));
  }
  auto fail = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", to_absl(name), "' (op ", op_name(op), "): ", why));
  };
  const OpDef* def = &op_def(op);
  if (absl::Status s = check_new_name(name); !s.ok()) return fail(s.message());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] < 0 || inputs[i] >= num_tensors()) {
      return fail(absl::StrCat("input ", i, " is not a tensor of this graph"));
    }
  }
  // The op's rule (op schema), with the node's name in its errors.
  auto out_shapes = def->infer(node_instance(*this, name, op, attrs, inputs));
  if (!out_shapes.ok()) return out_shapes.status();
  size_t num_out = out_shapes->size();
  for (size_t j = 0; j < num_out; ++j) {
    std::string out_name = num_out == 1 ? std::string(name) : absl::StrCat(to_absl(name), ":", j);
    if (num_out > 1 && !check_new_name(out_name).ok()) {
      return fail(absl::StrCat("output name '", out_name, "' is already used"));
    }
  }
  std::vector<DType> out_dtypes;
  for (size_t j = 0; j < num_out; ++j) {
    out_dtypes.push_back(output_dtype(*this, op, attrs, inputs, j));
  }
  NodeId id = num_nodes();
  Node node;
  node.name = std::string(name);
  node.op = op;
  node.attrs = std::move(attrs);
  node.inputs = std::move(inputs);
  node_by_name_.emplace(node.name, id);
  for (TensorId t : node.inputs) {
    auto& consumers = tensors_[t].consumers;
    if (consumers.empty() || consumers.back() != id) consumers.push_back(id);
  }
  for (size_t j = 0; j < num_out; ++j) {
    // A single output shares the node's name: tensors and nodes have
    // separate namespaces for lookups, so this is unambiguous.
    std::string out_name = num_out == 1 ? node.name : absl::StrCat(to_absl(name), ":", j);
    TensorId t = add_tensor(out_name, std::move((*out_shapes)[j]), output_role, Init{});
    tensors_[t].producer = id;
    tensors_[t].dtype = out_dtypes[j];
    node.outputs.push_back(t);
  }
  // A copy between memories is the swap pass's; every other node is the
  // caller's until a pass says otherwise (Node::origin).
  if (op == OpKind::kSwapOut || op == OpKind::kSwapIn) node.origin = NodeOrigin::kSwap;
  nodes_.push_back(std::move(node));
  order_.push_back(id);
  return nodes_[id].outputs;
}

std::vector<TensorId> Graph::add(OpKind op, std::string_view name, std::vector<TensorId> inputs,
                                 Attrs attrs, TensorRole output_role) {
  if (!status_.ok()) return {};
  for (TensorId t : inputs) {
    if (t == kNoTensor) return {};  // an earlier builder failed and recorded why
  }
  auto outs = add_node(op, name, std::move(inputs), std::move(attrs), output_role);
  if (!outs.ok()) {
    record_error(outs.status());
    return {};
  }
  return *std::move(outs);
}

TensorId Graph::add1(OpKind op, std::string_view name, std::vector<TensorId> inputs, Attrs attrs,
                     TensorRole output_role) {
  std::vector<TensorId> outs = add(op, name, std::move(inputs), std::move(attrs), output_role);
  if (outs.size() != 1) {
    if (!outs.empty()) {
      record_error(absl::InvalidArgumentError(absl::StrCat(
          "node '", to_absl(name), "' (", op_name(op), ") has ", outs.size(), " outputs, not 1")));
    }
    return kNoTensor;
  }
  return outs[0];
}

void Graph::add_control_edge(NodeId before, NodeId after) {
  LMS_CHECK(before >= 0 && before < num_nodes() && after >= 0 && after < num_nodes());
  auto& c = nodes_[after].control_inputs;
  if (std::find(c.begin(), c.end(), before) == c.end()) c.push_back(before);
}

TensorId Graph::find_tensor(std::string_view name) const {
  auto it = tensor_by_name_.find(to_absl(name));
  return it == tensor_by_name_.end() ? kNoTensor : it->second;
}

NodeId Graph::find_node(std::string_view name) const {
  auto it = node_by_name_.find(to_absl(name));
  return it == node_by_name_.end() ? kNoNode : it->second;
}

void Graph::replace_input(NodeId consumer, int index, TensorId replacement) {
  Node& n = nodes_[consumer];
  LMS_CHECK(index >= 0 && index < static_cast<int>(n.inputs.size()));
  TensorId old = n.inputs[index];
  n.inputs[index] = replacement;
  if (std::find(n.inputs.begin(), n.inputs.end(), old) == n.inputs.end()) {
    auto& c = tensors_[old].consumers;
    c.erase(std::remove(c.begin(), c.end(), consumer), c.end());
  }
  auto& rc = tensors_[replacement].consumers;
  if (std::find(rc.begin(), rc.end(), consumer) == rc.end()) rc.push_back(consumer);
}

absl::Status Graph::set_order(std::vector<NodeId> order) {
  if (static_cast<int32_t>(order.size()) != num_nodes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("order has ", order.size(), " nodes, the graph has ", num_nodes()));
  }
  std::vector<bool> seen(order.size(), false);
  for (NodeId id : order) {
    if (id < 0 || id >= num_nodes() || seen[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("order is not a permutation of the node ids (bad or repeated id ", id, ")"));
    }
    seen[id] = true;
  }
  order_ = std::move(order);
  return absl::OkStatus();
}

}  // namespace lms
