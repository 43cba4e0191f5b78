#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/internal_checks.h"
#include "graph/op_registry.h"
#include "lms/graph.h"
#include "lms/status.h"

namespace lms {
namespace {

absl::Status node_error(const Node& n, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("verify: node '", n.name, "' (op ", op_name(n.op), "): ", why));
}

std::string shape_str(const Shape& s) { return absl::StrCat("[", absl::StrJoin(s, ","), "]"); }

absl::Status verify_node(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  const OpDef* def = &op_def(n.op);
  for (TensorId t : n.inputs) {
    if (t < 0 || t >= g.num_tensors()) return node_error(n, "input is not a tensor");
    const auto& c = g.tensor(t).consumers;
    if (std::find(c.begin(), c.end(), id) == c.end()) {
      return node_error(n, absl::StrCat("missing from the consumers of '", g.tensor(t).name, "'"));
    }
  }
  auto out = def->infer(node_instance(g, n.name, n.op, n.attrs, n.inputs));
  if (!out.ok()) {
    return with_message(out.status(), absl::StrCat("verify: ", out.status().message()));
  }
  if (out->size() != n.outputs.size()) return node_error(n, "wrong number of outputs");
  for (size_t j = 0; j < n.outputs.size(); ++j) {
    const Tensor& t = g.tensor(n.outputs[j]);
    if (t.producer != id)
      return node_error(n, absl::StrCat("output '", t.name, "' names another producer"));
    const DType want = output_dtype(g, n.op, n.attrs, n.inputs, j);
    if (t.dtype != want) {
      return node_error(n, absl::StrCat("output '", t.name, "' has dtype ", dtype_name(t.dtype),
                                        ", the op gives ", dtype_name(want)));
    }
    if (t.shape != (*out)[j]) {
      return node_error(n, absl::StrCat("output '", t.name, "' has shape ", shape_str(t.shape),
                                        ", shape inference gives ", shape_str((*out)[j])));
    }
  }
  for (int i : def->mutated_inputs) {
    if (i < static_cast<int>(n.inputs.size()) && !is_persistent(g.tensor(n.inputs[i]).role)) {
      return node_error(n, absl::StrCat("mutates input ", i, " which is not persistent"));
    }
  }
  bool host_out = n.op == OpKind::kSwapOut;
  for (TensorId t : n.outputs) {
    if ((g.tensor(t).role == TensorRole::kHost) != host_out) {
      return node_error(n, "only swap_out produces host tensors");
    }
  }
  if (n.op == OpKind::kSwapIn && g.tensor(n.inputs[0]).role != TensorRole::kHost) {
    return node_error(n, "its input must be the host tensor of a swap_out");
  }
  for (TensorId t : n.inputs) {
    if (g.tensor(t).role == TensorRole::kHost && n.op != OpKind::kSwapIn) {
      return node_error(
          n, absl::StrCat("reads host tensor '", g.tensor(t).name, "'; only swap_in may"));
    }
  }
  return absl::OkStatus();
}

absl::Status verify_tensor(const Graph& g, TensorId id) {
  const Tensor& t = g.tensor(id);
  bool needs_producer = !is_persistent(t.role) && t.role != TensorRole::kInput;
  if (needs_producer && t.producer == kNoNode) {
    return absl::InvalidArgumentError(
        absl::StrCat("verify: tensor '", t.name, "' (", role_name(t.role), ") has no producer"));
  }
  if (!needs_producer && t.producer != kNoNode) {
    return absl::InvalidArgumentError(
        absl::StrCat("verify: ", role_name(t.role), " '", t.name, "' must not have a producer"));
  }
  for (NodeId c : t.consumers) {
    const auto& in = g.node(c).inputs;
    if (std::find(in.begin(), in.end(), id) == in.end()) {
      return absl::InvalidArgumentError(absl::StrCat("verify: tensor '", t.name,
                                                     "' lists consumer '", g.node(c).name,
                                                     "' which does not read it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool internal_checks() {
#ifndef NDEBUG
  return true;
#else
  static const bool on = [] {
    const char* v = std::getenv("LMS_CHECK_INTERNAL");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return on;
#endif
}

absl::Status verify(const Graph& graph) {
  LMS_RETURN_IF_ERROR(graph.status());
  // A topological order exists, so every input is produced earlier in the
  // schedule and every swap_in (which reads its swap_out's output) comes after
  // its swap_out.
  LMS_RETURN_IF_ERROR(schedule(graph).status());
  for (NodeId id = 0; id < graph.num_nodes(); ++id) LMS_RETURN_IF_ERROR(verify_node(graph, id));
  for (TensorId id = 0; id < graph.num_tensors(); ++id) {
    LMS_RETURN_IF_ERROR(verify_tensor(graph, id));
  }
  return absl::OkStatus();
}

}  // namespace lms
