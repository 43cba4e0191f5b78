// lms::autocast (lms/autocast.h) and the widening pass of
// graph/low_precision.h: both rebuild a graph node by node in schedule
// order, placing cast nodes on the way.
#include "graph/low_precision.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/internal_checks.h"
#include "graph/op_registry.h"
#include "graph/rebuild.h"
#include "lms/autocast.h"
#include "lms/ops.h"
#include "lms/status.h"
#include "lms/types.h"
#include "op_schema/op_schema.h"

namespace lms {

// Note [Low-precision lowering]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An op that follows its inputs' float dtype (Note [Float dtypes of ops])
// may read bf16 or f16 in a graph, but a device may have no kernel for it
// in that dtype (today no backend has one: the CPU's oneDNN has bf16
// primitives only with AVX-512, f16 ones only with AVX512-FP16). Before
// planning, the device's lowering (Note [Device lowering]) rewrites each
// such node N into
//   cast(x_i -> f32) for each input, N' = N in float32, cast(N'_j -> dtype)
// N' is named "<N>/f32" and its outputs "<N>/f32[:j]"; each cast back takes
// the name of the output it stands for, so every reader, fetch and swap
// plan still finds it, with its dtype. The result is what a low-precision
// kernel that accumulates in float32 gives (PyTorch's CPU and cuDNN bf16
// kernels): products of bf16 or f16 values are exact in float32, and the
// one rounding is the output's; only the order of float32 sums may
// differ. The float32 copies are graph tensors, so the planner counts them
// and the predicted peak stays exact; they live from their cast to N'
// (inputs) or from N' to the cast back (outputs).

namespace {

// The float dtype a node computes in when it follows its inputs.
bool is_low_precision(const Graph& g, const Node& n) {
  if (!op_follows_input_dtype(n.op)) return false;
  for (TensorId t : n.inputs) {
    if (g.tensor(t).dtype != DType::kFloat32) return true;
  }
  for (TensorId t : n.outputs) {
    if (g.tensor(t).dtype != DType::kFloat32) return true;
  }
  return false;
}

// Whether every value of dtype `narrow` is one of `wide`.
bool holds(DType wide, DType narrow) { return wide == narrow || wide == DType::kFloat32; }

// ---- autocast ----

enum class CastPolicy : uint8_t {
  kLow,      // computes in the low dtype
  kFloat32,  // computes in float32
  kFollow,   // in its inputs' dtype when they share one, else float32
  kKeep,     // reads what it is given (cast)
};

CastPolicy cast_policy(OpKind op) {
  // The normalisations follow their input: their statistics are float32
  // whatever it is (Note [Float dtypes of ops]), as in PyTorch's bf16
  // batch norm; their scale and shift stay float32 master tensors.
  switch (op) {
    case OpKind::kConv:
    case OpKind::kDeconv:
    case OpKind::kLinear:
    case OpKind::kMatMul:
      return CastPolicy::kLow;
    case OpKind::kSoftmax:
    case OpKind::kReduceMean:
    case OpKind::kSumTo:
      return CastPolicy::kFloat32;
    case OpKind::kCast:
      return CastPolicy::kKeep;
    default:
      return op_follows_input_dtype(op) ? CastPolicy::kFollow : CastPolicy::kFloat32;
  }
}

absl::Status check_forward(const Graph& g, DType dtype) {
  if (dtype != DType::kBFloat16 && dtype != DType::kFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("autocast: dtype ", dtype_name(dtype),
                     " is not a low-precision dtype; allowed: ", "bf16, f16"));
  }
  LMS_RETURN_IF_ERROR(g.status());
  LMS_RETURN_IF_ERROR(verify(g));
  if (g.plan_record().planned) {
    return absl::InvalidArgumentError(
        "autocast: the graph is already planned by lms::rewrite; autocast the forward graph "
        "before training_graph and rewrite");
  }
  // Optimizer state alone may be a forward graph's (batch norm's running
  // statistics); gradients and the optimizer's writers are not.
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const Tensor& x = g.tensor(t);
    if (x.role == TensorRole::kGradient) {
      return absl::InvalidArgumentError(
          absl::StrCat("autocast: tensor '", x.name,
                       "' is a gradient; autocast runs on a forward graph, before "
                       "lms::training_graph"));
    }
  }
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    if (op_def(g.node(n).op).mutated_inputs.empty()) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("autocast: node '", g.node(n).name, "' (", op_name(g.node(n).op),
                     ") updates persistent state; autocast runs on a forward graph, before "
                     "lms::training_graph"));
  }
  return absl::OkStatus();
}

class Autocaster {
 public:
  Autocaster(const Graph& g, DType low) : g_(g), low_(low), rebuild_(g) {}

  absl::StatusOr<Graph> run(AutocastReport& report) {
    LMS_RETURN_IF_ERROR(rebuild_.copy_leaves("autocast"));
    LMS_ASSIGN_OR_RETURN(std::vector<NodeId> order, schedule(g_));
    std::vector<NodeId> node_map(g_.num_nodes(), kNoNode);
    for (NodeId id : order) {
      const Node& n = g_.node(id);
      std::vector<TensorId> inputs;
      for (TensorId t : n.inputs) inputs.push_back(rebuild_.mapped(t));
      const std::optional<DType> want = wanted_dtype(n, inputs);
      for (size_t i = 0; want && i < inputs.size(); ++i) {
        if (!is_float_dtype(dtype(inputs[i])) || dtype(inputs[i]) == *want) continue;
        if (is_master_input(n.op, i)) continue;  // float32 whatever the data's dtype
        LMS_ASSIGN_OR_RETURN(inputs[i], cast_input(n, i, inputs[i], *want));
      }
      const TensorRole role =
          n.outputs.empty() ? TensorRole::kActivation : g_.tensor(n.outputs[0]).role;
      Graph& out = rebuild_.out();
      LMS_ASSIGN_OR_RETURN(std::vector<TensorId> made,
                           out.add_node(n.op, n.name, std::move(inputs), n.attrs, role));
      out.mutable_node(out.num_nodes() - 1).origin = n.origin;
      node_map[id] = out.num_nodes() - 1;
      for (size_t j = 0; j < made.size(); ++j) rebuild_.map(n.outputs[j], made[j]);
      if (!made.empty() && dtype(made[0]) == low_ && n.op != OpKind::kCast) {
        ++report_.low_precision_nodes;
      }
    }
    report = report_;
    return rebuild_.finish(node_map);
  }

 private:
  DType dtype(TensorId t) { return rebuild_.out().tensor(t).dtype; }

  // The float dtype node `n` computes in, given its (new) inputs; nullopt:
  // as they are.
  std::optional<DType> wanted_dtype(const Node& n, const std::vector<TensorId>& inputs) {
    switch (cast_policy(n.op)) {
      case CastPolicy::kLow:
        return low_;
      case CastPolicy::kFloat32:
        return DType::kFloat32;
      case CastPolicy::kKeep:
        return std::nullopt;
      case CastPolicy::kFollow:
        break;
    }
    std::optional<DType> common;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const DType d = dtype(inputs[i]);
      if (!is_float_dtype(d) || is_master_input(n.op, i)) continue;
      if (common && *common != d) return DType::kFloat32;  // PyTorch's promotion
      common = d;
    }
    return common;
  }

  // Input `i` (tensor `x` of the new graph) of node `n`, cast to `to`.
  absl::StatusOr<TensorId> cast_input(const Node& n, size_t i, TensorId x, DType to) {
    Graph& out = rebuild_.out();
    const Tensor& tensor = out.tensor(x);
    if (tensor.producer != kNoNode && out.node(tensor.producer).op == OpKind::kCast) {
      // The cast of a cast whose dtype holds its input: cast that input.
      const TensorId source = out.node(tensor.producer).inputs[0];
      if (holds(tensor.dtype, out.tensor(source).dtype)) {
        ++report_.casts_folded;
        x = source;
        if (out.tensor(x).dtype == to) return x;
      }
    }
    const bool parameter = out.tensor(x).role == TensorRole::kParameter;
    if (parameter) {
      if (auto it = parameter_casts_.find({x, to}); it != parameter_casts_.end()) {
        return it->second;
      }
    }
    const std::string name =
        parameter ? rebuild_.fresh(absl::StrCat(out.tensor(x).name, "/", dtype_name(to)))
                  : rebuild_.fresh(absl::StrCat(n.name, "/autocast/", i));
    LMS_ASSIGN_OR_RETURN(TensorId y,
                         rebuild_.cast(x, to, name, TensorRole::kActivation, NodeOrigin::kCast));
    ++report_.casts_added;
    if (parameter) parameter_casts_[{x, to}] = y;
    return y;
  }

  const Graph& g_;
  DType low_;
  Rebuild rebuild_;
  AutocastReport report_;
  std::map<std::pair<TensorId, DType>, TensorId> parameter_casts_;
};

}  // namespace

absl::StatusOr<AutocastReport> autocast(Graph& graph, const AutocastOptions& options) {
  LMS_RETURN_IF_ERROR(check_forward(graph, options.dtype));
  AutocastReport report;
  Autocaster caster(graph, options.dtype);
  absl::StatusOr<Graph> result = caster.run(report);
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrCat("autocast: ", result.status().message()));
  }
  graph = *std::move(result);
  return report;
}

bool has_low_precision_nodes(const Graph& graph) {
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    if (is_low_precision(graph, graph.node(id))) return true;
  }
  return false;
}

absl::StatusOr<bool> WidenLowPrecisionPass::run(Graph& graph) {
  node_map_.clear();
  if (!has_low_precision_nodes(graph)) return false;
  Rebuild rebuild(graph);
  LMS_RETURN_IF_ERROR(rebuild.copy_leaves(name()));
  LMS_ASSIGN_OR_RETURN(std::vector<NodeId> order, schedule(graph));
  std::vector<NodeId> node_map(graph.num_nodes(), kNoNode);
  Graph& out = rebuild.out();
  for (NodeId id : order) {
    const Node& n = graph.node(id);
    const bool widen = is_low_precision(graph, n);
    const TensorRole role =
        n.outputs.empty() ? TensorRole::kActivation : graph.tensor(n.outputs[0]).role;
    std::vector<TensorId> inputs;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      TensorId x = rebuild.mapped(n.inputs[i]);
      if (widen && out.tensor(x).dtype != DType::kFloat32) {
        LMS_ASSIGN_OR_RETURN(
            x, rebuild.cast(x, DType::kFloat32, rebuild.fresh(absl::StrCat(n.name, "/f32/in", i)),
                            role, NodeOrigin::kCast));
      }
      inputs.push_back(x);
    }
    const std::string name = widen ? rebuild.fresh(absl::StrCat(n.name, "/f32")) : n.name;
    LMS_ASSIGN_OR_RETURN(std::vector<TensorId> made,
                         out.add_node(n.op, name, std::move(inputs), n.attrs, role));
    out.mutable_node(out.num_nodes() - 1).origin = n.origin;
    node_map[id] = out.num_nodes() - 1;
    for (size_t j = 0; j < made.size(); ++j) {
      const Tensor& want = graph.tensor(n.outputs[j]);
      TensorId y = made[j];
      if (widen) {
        // The cast back takes the output's name (a node's single output is
        // named after it), so readers and fetches find it.
        LMS_ASSIGN_OR_RETURN(y,
                             rebuild.cast(y, want.dtype, want.name, want.role, NodeOrigin::kCast));
      }
      rebuild.map(n.outputs[j], y);
    }
  }
  LMS_ASSIGN_OR_RETURN(graph, rebuild.finish(node_map));
  node_map_ = std::move(node_map);
  return true;
}

}  // namespace lms
