#include "runtime/blocked_layouts.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "backend/cpu/blocked_layout.h"

namespace lms {
namespace {

// Per Note [Blocked layouts], the CPU backend's rule (backend/cpu/blocked_layout.h)
// decides which slots and tensors may be blocked; this pass finds the tensors
// whose producer and every consumer agree.

// An op whose tensors are blocked all or none, reading them as flat arrays:
// every input has the output's shape. A broadcasting add or mul indexes its
// smaller operand by dimension, so it reads and writes plain.
bool is_flat(const Graph& g, const Node& n) {
  if (!cpu::all_or_none_blocked(n.op)) return false;
  for (TensorId t : n.inputs) {
    if (g.tensor(t).shape != g.tensor(n.outputs[0]).shape) return false;
  }
  return true;
}

bool slot_may_block(const Graph& g, const Node& n, bool input, size_t i) {
  if (cpu::all_or_none_blocked(n.op)) return is_flat(g, n);
  return cpu::slot_may_be_blocked(n.op, input, i);
}

// Candidates by the per-slot rule, before the element-wise agreement.
std::vector<bool> candidates(const Graph& g, const std::vector<bool>& kept_plain) {
  std::vector<bool> ok(g.num_tensors(), false);
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const Tensor& tensor = g.tensor(t);
    if (kept_plain[t] || tensor.producer == kNoNode || is_persistent(tensor.role) ||
        tensor.role == TensorRole::kHost ||
        !cpu::tensor_may_be_blocked(tensor.shape, tensor.dtype)) {
      continue;
    }
    const Node& p = g.node(tensor.producer);
    const size_t out = std::find(p.outputs.begin(), p.outputs.end(), t) - p.outputs.begin();
    bool all = slot_may_block(g, p, false, out);
    for (NodeId c : tensor.consumers) {
      const Node& n = g.node(c);
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.inputs[i] == t) all = all && slot_may_block(g, n, true, i);
      }
    }
    ok[t] = all;
  }
  return ok;
}

// An element-wise node with one plain tensor makes all its tensors plain;
// repeated until nothing changes (chains of element-wise ops).
void agree_elementwise(const Graph& g, std::vector<bool>& ok) {
  for (bool changed = true; changed;) {
    changed = false;
    for (NodeId id = 0; id < g.num_nodes(); ++id) {
      const Node& n = g.node(id);
      if (!is_flat(g, n)) continue;
      bool all = true;
      for (TensorId t : n.inputs) all = all && ok[t];
      for (TensorId t : n.outputs) all = all && ok[t];
      if (all) continue;
      for (const auto* list : {&n.inputs, &n.outputs}) {
        for (TensorId t : *list) {
          changed = changed || ok[t];
          ok[t] = false;
        }
      }
    }
  }
}

std::string layout_string(const Node& n, const std::vector<bool>& blocked) {
  std::string s;
  for (TensorId t : n.inputs) s += blocked[t] ? kLayoutBlocked : kLayoutPlain;
  s += ':';
  for (TensorId t : n.outputs) s += blocked[t] ? kLayoutBlocked : kLayoutPlain;
  return s;
}

}  // namespace

absl::StatusOr<BlockedLayoutReport> assign_blocked_layouts(
    Graph& g, const std::vector<std::string>& fetched) {
  std::vector<bool> kept_plain(g.num_tensors(), false);
  for (const std::string& name : fetched) {
    const TensorId t = g.find_tensor(name);
    if (t == kNoTensor) {
      return absl::InvalidArgumentError(absl::StrCat("assign_blocked_layouts: fetched '", name,
                                                     "' is not a tensor of the graph"));
    }
    kept_plain[t] = true;
  }
  if (g.loss() != kNoTensor) kept_plain[g.loss()] = true;
  std::vector<bool> blocked = candidates(g, kept_plain);
  agree_elementwise(g, blocked);
  BlockedLayoutReport report;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    if (!blocked[t]) continue;
    ++report.blocked_tensors;
    report.blocked_bytes += g.tensor(t).bytes();
  }
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    Node& n = g.mutable_node(id);
    n.attrs.erase(std::string(kLayoutAttr));
    std::string s = layout_string(n, blocked);
    if (s.find(kLayoutBlocked) != std::string::npos) n.attrs[std::string(kLayoutAttr)] = s;
  }
  return report;
}

absl::StatusOr<bool> BlockedLayoutPass::run(Graph& graph) {
  auto layouts = [&] {
    std::vector<std::optional<AttrValue>> out(graph.num_nodes());
    for (NodeId id = 0; id < graph.num_nodes(); ++id) {
      const Attrs& a = graph.node(id).attrs;
      if (auto it = a.find(std::string(kLayoutAttr)); it != a.end()) {
        out[id] = it->second;
      }
    }
    return out;
  };
  const std::vector<std::optional<AttrValue>> before = layouts();
  LMS_RETURN_IF_ERROR(assign_blocked_layouts(graph, fetched_).status());
  return layouts() != before;
}

}  // namespace lms
