#include "graph/rebuild.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/internal_checks.h"
#include "lms/status.h"
#include "lms/types.h"

namespace lms {
namespace {

bool name_taken(const Graph& g, const std::string& name) {
  return g.find_node(name) != kNoNode || g.find_tensor(name) != kNoTensor;
}

}  // namespace

absl::Status Rebuild::copy_leaves(std::string_view pass) {
  for (TensorId t = 0; t < g_.num_tensors(); ++t) {
    const Tensor& x = g_.tensor(t);
    if (x.producer != kNoNode) continue;
    if (x.role != TensorRole::kInput && !is_persistent(x.role)) {
      return absl::InvalidArgumentError(absl::StrCat(to_absl(pass), ": tensor '", x.name, "' (",
                                                     role_name(x.role), ") has no producer"));
    }
    map_[t] = out_.leaf_like(x);
  }
  return out_.status();
}

std::string Rebuild::fresh(const std::string& base) const {
  std::string name = base;
  for (int i = 1; name_taken(g_, name) || name_taken(out_, name); ++i) {
    name = absl::StrCat(base, "_", i);
  }
  return name;
}

absl::StatusOr<TensorId> Rebuild::cast(TensorId x, DType to, const std::string& name,
                                       TensorRole role, NodeOrigin origin) {
  LMS_ASSIGN_OR_RETURN(
      std::vector<TensorId> y,
      out_.add_node(OpKind::kCast, name, {x}, {{"to", std::string(dtype_name(to))}}, role));
  out_.mutable_node(out_.num_nodes() - 1).origin = origin;
  return y[0];
}

absl::StatusOr<Graph> Rebuild::finish(const std::vector<NodeId>& node_map,
                                      std::vector<NodeId> order) {
  for (NodeId id = 0; id < g_.num_nodes(); ++id) {
    for (NodeId before : g_.node(id).control_inputs) {
      const NodeId a = node_map[before], b = node_map[id];
      if (a != b) out_.add_control_edge(a, b);
    }
  }
  if (!order.empty()) LMS_RETURN_IF_ERROR(out_.set_order(std::move(order)));
  if (g_.loss() != kNoTensor) out_.set_loss(map_[g_.loss()]);
  out_.set_plan_record(g_.plan_record());
  if (internal_checks()) LMS_RETURN_IF_ERROR(verify(out_));
  return std::move(out_);
}

}  // namespace lms
