#include "graph/pass.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/internal_checks.h"
#include "lms/status.h"
#include "lms/strings.h"

namespace lms {

// Note [Graph passes]
// Every transformation of a graph before planning (conv + relu fusion, the
// CPU device's blocked layouts, and any a device kind adds) is a GraphPass:
// a name, run(Graph&) -> changed, and, when it renumbers nodes, a node map.
// A PassPipeline runs them in a declared order on a copy of the graph and,
// between passes, verifies the graph and checks that no pass changed a
// tensor it kept: a rebuilt graph that lost an int64 input's dtype (the
// labels of a cross-entropy) fails there, naming the pass, instead of at a
// kernel far away. Renaming or dropping a produced tensor is allowed (a
// fused conv's output disappears); dropping an input, parameter or
// optimizer state is not.

namespace {

std::string shape_text(const Shape& s) { return absl::StrCat("[", absl::StrJoin(s, ","), "]"); }

}  // namespace

TensorSnapshot snapshot_tensors(const Graph& graph) {
  TensorSnapshot snap;
  snap.tensors.reserve(graph.num_tensors());
  for (TensorId t = 0; t < graph.num_tensors(); ++t) {
    const Tensor& x = graph.tensor(t);
    snap.tensors.push_back({x.name, x.dtype, x.shape, x.role});
  }
  return snap;
}

absl::Status check_tensors_kept(const TensorSnapshot& before, const Graph& after,
                                std::string_view pass) {
  auto fail = [&](const TensorSnapshot::Entry& e, const std::string& what) {
    return absl::InternalError(
        absl::StrCat("pass '", to_absl(pass), "' broke tensor '", e.name, "': ", what));
  };
  for (const TensorSnapshot::Entry& e : before.tensors) {
    const TensorId t = after.find_tensor(e.name);
    if (t == kNoTensor) {
      if (e.role == TensorRole::kInput || is_persistent(e.role)) {
        return fail(e, absl::StrCat("the ", role_name(e.role), " is gone"));
      }
      continue;
    }
    const Tensor& x = after.tensor(t);
    if (x.dtype != e.dtype) {
      return fail(e, absl::StrCat("dtype ", dtype_name(e.dtype), " became ", dtype_name(x.dtype)));
    }
    if (x.shape != e.shape) {
      return fail(e, absl::StrCat("shape ", shape_text(e.shape), " became ", shape_text(x.shape)));
    }
    if (x.role != e.role) {
      return fail(e, absl::StrCat("role ", role_name(e.role), " became ", role_name(x.role)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PipelineResult> PassPipeline::run(Graph& graph) const {
  // Per Note [Internal graph checks], the caller verified `graph` at its entry.
  if (internal_checks()) LMS_RETURN_IF_ERROR(verify(graph));
  Graph work = graph;
  PipelineResult result;
  result.node_map.resize(graph.num_nodes());
  for (NodeId id = 0; id < graph.num_nodes(); ++id) result.node_map[id] = id;
  for (const std::unique_ptr<GraphPass>& pass : passes_) {
    TensorSnapshot before;
    if (options_.check_between_passes) before = snapshot_tensors(work);
    absl::StatusOr<bool> changed = pass->run(work);
    if (!changed.ok()) {
      return absl::Status(changed.status().code(),
                          absl::StrCat(to_absl(pass->name()), ": ", changed.status().message()));
    }
    if (!*changed) continue;
    result.changed = true;
    if (const std::vector<NodeId> map = pass->node_map(); !map.empty()) {
      for (NodeId& m : result.node_map) m = map[m];
    }
    if (!options_.check_between_passes) continue;
    LMS_RETURN_IF_ERROR(check_tensors_kept(before, work, pass->name()));
    if (!internal_checks()) continue;
    if (absl::Status s = verify(work); !s.ok()) {
      return absl::InternalError(absl::StrCat(
          "pass '", to_absl(pass->name()), "' left a graph that does not verify: ", s.message()));
    }
  }
  if (result.changed) graph = std::move(work);
  return result;
}

}  // namespace lms
