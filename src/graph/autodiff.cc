// training_graph: reverse-mode autodiff over the op registry's gradient rules,
// then the optimizer step.
//
// Note [Gradient request] is how the autodiff tells a rule which inputs need
// a gradient: a tensor needs one iff it depends on a parameter and the loss
// depends on it. Every other input slot is kNoTensor, so no backward node is
// emitted for, say, the data gradient of a first convolution whose input is
// a graph input.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "graph/op_registry.h"
#include "graph/ops_internal.h"
#include "lms/status.h"
#include "lms/training.h"

namespace lms {
namespace {

using ops_internal::kWantGrad;
using ops_internal::shape_str;
using ops_internal::str_cat;

absl::Status error(absl::string_view message) {
  return absl::InvalidArgumentError(str_cat("training_graph: ", message));
}

absl::Status check_loss(const Graph& g, TensorId loss) {
  if (!g.status().ok()) {
    return error(str_cat("the forward graph has an error: ", g.status().message()));
  }
  if (loss < 0 || loss >= g.num_tensors()) {
    return error(str_cat("loss ", loss, " is not a tensor of the graph"));
  }
  const Tensor& t = g.tensor(loss);
  if (!t.shape.empty()) {
    return error(
        str_cat("loss '", t.name, "' must be a scalar (shape []), got ", shape_str(t.shape)));
  }
  if (t.producer == kNoNode) {
    return error(str_cat("loss '", t.name, "' is not produced by a node"));
  }
  return absl::OkStatus();
}

// Each field must lie in its range: name, value, lo, hi, hi open, lo open.
struct Range {
  const char* field;
  double value, lo, hi;
  bool open_hi;
  bool open_lo = false;
};

absl::Status check_ranges(const char* opt, std::initializer_list<Range> ranges) {
  for (const Range& r : ranges) {
    const bool ok = std::isfinite(r.value) && (r.open_lo ? r.value > r.lo : r.value >= r.lo) &&
                    (r.open_hi ? r.value < r.hi : r.value <= r.hi);
    if (!ok) {
      return error(str_cat(opt, ".", r.field, " must be in ", r.open_lo ? "(" : "[", r.lo, ", ",
                           r.hi, r.open_hi ? ")" : "]", ", got ", r.value));
    }
  }
  return absl::OkStatus();
}

absl::Status check_optimizer(const Optimizer& opt) {
  constexpr double kInf = HUGE_VAL;
  if (const Sgd* s = std::get_if<Sgd>(&opt)) {
    return check_ranges("Sgd", {{"lr", s->lr, 0, kInf, true},
                                {"momentum", s->momentum, 0, 1, true},
                                {"weight_decay", s->weight_decay, 0, kInf, true},
                                {"clip_norm", s->clip_norm, 0, kInf, true}});
  }
  const Adam& a = std::get<Adam>(opt);
  LMS_RETURN_IF_ERROR(check_ranges("Adam", {{"lr", a.lr, 0, kInf, true},
                                            {"beta1", a.beta1, 0, 1, true},
                                            {"beta2", a.beta2, 0, 1, true},
                                            {"weight_decay", a.weight_decay, 0, kInf, true},
                                            {"clip_norm", a.clip_norm, 0, kInf, true}}));
  if (!(a.eps > 0) || !std::isfinite(a.eps)) {
    return error(str_cat("Adam.eps must be positive and finite, got ", a.eps));
  }
  if (a.decay_steps < 0) {
    return error(str_cat("Adam.decay_steps must be >= 0 (0 = constant lr), got ", a.decay_steps));
  }
  if (a.decay_steps > 0 && (!(a.decay_power > 0) || !std::isfinite(a.decay_power))) {
    return error(str_cat("Adam.decay_power must be positive and finite, got ", a.decay_power));
  }
  return absl::OkStatus();
}

// The LossScaling fields in their ranges, and loss scaling where the
// forward graph computes in f16.
absl::Status check_loss_scaling(const Graph& forward, const std::optional<LossScaling>& ls) {
  if (!ls) {
    for (TensorId t = 0; t < forward.num_tensors(); ++t) {
      if (forward.tensor(t).dtype != DType::kFloat16) continue;
      return error(str_cat("tensor '", forward.tensor(t).name,
                           "' is f16, whose small gradients underflow without loss scaling: set "
                           "TrainingOptions::loss_scaling (PyTorch's GradScaler), or use bf16"));
    }
    return absl::OkStatus();
  }
  constexpr double kInf = HUGE_VAL;
  LMS_RETURN_IF_ERROR(
      check_ranges("LossScaling", {{"init_scale", ls->init_scale, 0, kInf, true, true},
                                   {"growth_factor", ls->growth_factor, 1, kInf, true, true},
                                   {"backoff_factor", ls->backoff_factor, 0, 1, true, true}}));
  if (ls->growth_interval < 1 || ls->growth_interval > (int64_t{1} << 24)) {
    return error(
        str_cat("LossScaling.growth_interval must be in [1, 2^24], got ", ls->growth_interval));
  }
  return absl::OkStatus();
}

// needs[t]: t depends on a parameter and the loss depends on t.
std::vector<bool> needs_gradient(const Graph& g, const std::vector<NodeId>& order, TensorId loss) {
  std::vector<bool> from_param(g.num_tensors(), false), to_loss(g.num_tensors(), false);
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    from_param[t] = g.tensor(t).role == TensorRole::kParameter;
  }
  for (NodeId n : order) {
    bool any = false;
    for (TensorId t : g.node(n).inputs) any = any || from_param[t];
    for (TensorId t : g.node(n).outputs) from_param[t] = from_param[t] || any;
  }
  to_loss[loss] = true;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    bool any = false;
    for (TensorId t : g.node(*it).outputs) any = any || to_loss[t];
    for (TensorId t : g.node(*it).inputs) to_loss[t] = to_loss[t] || any;
  }
  std::vector<bool> needs(g.num_tensors());
  for (TensorId t = 0; t < g.num_tensors(); ++t) needs[t] = from_param[t] && to_loss[t];
  return needs;
}

// Reverse-mode accumulation of gradient contributions per forward tensor.
class Backprop {
 public:
  Backprop(Graph& g, std::vector<bool> needs)
      : g_(g), needs_(std::move(needs)), contributions_(g.num_tensors()) {}

  // With loss scaling, the seed is the scale itself.
  absl::Status seed(TensorId loss, TensorId scale) {
    if (scale != kNoTensor) {
      contributions_[loss].push_back(scale);
      return absl::OkStatus();
    }
    LMS_ASSIGN_OR_RETURN(auto outs,
                         g_.add_node(OpKind::kFill, g_.unique_name("grad/seed"), {},
                                     {{"shape", Shape{}}, {"value", 1.0}}, TensorRole::kGradient));
    contributions_[loss].push_back(outs[0]);
    return absl::OkStatus();
  }

  absl::Status visit(NodeId n);

  // The summed gradient of t under the node name `final_name` (empty: any
  // name); kNoTensor if no gradient reached t.
  absl::StatusOr<TensorId> total(TensorId t, const std::string& final_name);

 private:
  absl::StatusOr<TensorId> add_grads(TensorId a, TensorId b, const std::string& name) {
    LMS_ASSIGN_OR_RETURN(auto outs,
                         g_.add_node(OpKind::kAdd, name, {a, b}, {}, TensorRole::kGradient));
    return outs[0];
  }
  absl::Status take_input_grads(NodeId n, const GradContext& ctx);

  Graph& g_;
  std::vector<bool> needs_;
  std::vector<std::vector<TensorId>> contributions_;
};

absl::StatusOr<TensorId> Backprop::total(TensorId t, const std::string& final_name) {
  const std::vector<TensorId> parts = contributions_[t];
  if (parts.empty()) return kNoTensor;
  const std::string base = str_cat("grad/", g_.tensor(t).name, "/sum");
  TensorId sum = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    const std::string name = last && !final_name.empty() ? final_name : g_.unique_name(base);
    LMS_ASSIGN_OR_RETURN(sum, add_grads(sum, parts[i], name));
  }
  if (!final_name.empty() && parts.size() == 1) {
    // A lone contribution may come from a multi-output node (dw of
    // conv_bwd_weights); a scale(1) gives it the name users fetch.
    LMS_ASSIGN_OR_RETURN(auto outs, g_.add_node(OpKind::kScale, final_name, {sum},
                                                {{"factor", 1.0}}, TensorRole::kGradient));
    sum = outs[0];
  }
  return sum;
}

absl::Status Backprop::visit(NodeId n) {
  const Node node = g_.node(n);  // a copy: rules add nodes
  GradContext ctx{g_, n, {}, {}, str_cat("grad/", node.name, "/")};
  bool any_out = false, any_in = false;
  for (TensorId t : node.outputs) {
    TensorId grad = kNoTensor;
    if (needs_[t]) {
      LMS_ASSIGN_OR_RETURN(grad, total(t, ""));
    }
    ctx.output_grads.push_back(grad);
    any_out = any_out || grad != kNoTensor;
  }
  for (TensorId t : node.inputs) {
    ctx.input_grads.push_back(needs_[t] ? kWantGrad : kNoTensor);
    any_in = any_in || needs_[t];
  }
  if (!any_out || !any_in) return absl::OkStatus();
  const OpDef* def = &op_def(node.op);
  if (!def->grad) {
    return error(str_cat("a gradient reaches node '", node.name, "' (op '", op_name(node.op),
                         "'), which has no gradient rule"));
  }
  if (absl::Status s = def->grad(ctx); !s.ok()) {
    return error(
        str_cat("gradient of node '", node.name, "' (", op_name(node.op), "): ", s.message()));
  }
  return take_input_grads(n, ctx);
}

absl::Status Backprop::take_input_grads(NodeId n, const GradContext& ctx) {
  const Node& node = g_.node(n);
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const TensorId in = node.inputs[i], grad = ctx.input_grads[i];
    if (grad == kNoTensor) continue;
    if (!needs_[in] || grad < 0 || grad >= g_.num_tensors() ||
        g_.tensor(grad).shape != g_.tensor(in).shape) {
      return absl::InternalError(str_cat("training_graph: the gradient rule of '", op_name(node.op),
                                         "' returned a bad gradient for input ", i, " of node '",
                                         node.name, "'"));
    }
    contributions_[in].push_back(grad);
  }
  return absl::OkStatus();
}

struct ParamGrad {
  TensorId param;
  TensorId grad;
};

// The loss-scaling state of TrainingOptions::loss_scaling; kNoTensor
// without.
struct LossScale {
  TensorId scale = kNoTensor;
  TensorId tracker = kNoTensor;
  std::optional<LossScaling> options;
};

absl::StatusOr<NodeId> add_update(Graph& g, const ParamGrad& pg, const Optimizer& opt,
                                  TensorId step, TensorId norm, const LossScale& ls) {
  const std::string p = g.tensor(pg.param).name;
  const Shape shape = g.tensor(pg.param).shape;
  std::vector<TensorId> in = {pg.param, pg.grad};
  Attrs a;
  OpKind op = OpKind::kSgdUpdate;
  if (const Sgd* s = std::get_if<Sgd>(&opt)) {
    in.push_back(g.optimizer_state(str_cat(p, "/velocity"), shape));
    a = {{"lr", s->lr},
         {"momentum", s->momentum},
         {"weight_decay", s->weight_decay},
         {"clip_norm", s->clip_norm}};
  } else {
    const Adam& ad = std::get<Adam>(opt);
    op = OpKind::kAdamUpdate;
    in.push_back(g.optimizer_state(str_cat(p, "/adam_m"), shape));
    in.push_back(g.optimizer_state(str_cat(p, "/adam_v"), shape));
    in.push_back(step);
    a = {{"lr", ad.lr},
         {"beta1", ad.beta1},
         {"beta2", ad.beta2},
         {"eps", ad.eps},
         {"weight_decay", ad.weight_decay},
         {"clip_norm", ad.clip_norm}};
    if (ad.decay_steps > 0) {
      a.emplace("decay_steps", ad.decay_steps);
      a.emplace("decay_power", ad.decay_power);
    }
  }
  if (ls.scale != kNoTensor) {
    in.push_back(ls.scale);
    a.emplace("loss_scaling", int64_t{1});
  }
  if (norm != kNoTensor) in.push_back(norm);
  LMS_RETURN_IF_ERROR(g.status());  // a state name was already taken
  const std::string name = str_cat("update/", p);
  LMS_RETURN_IF_ERROR(g.add_node(op, name, std::move(in), std::move(a)).status());
  return g.find_node(name);
}

// Optimizer state, optional clipping norm and one update node per parameter,
// each after every other reader of its parameter. Returns the nodes that
// write persistent tensors (updates and the step increment).
absl::StatusOr<std::vector<NodeId>> add_optimizer(Graph& g, const std::vector<ParamGrad>& params,
                                                  const Optimizer& opt, const LossScale& ls) {
  std::vector<NodeId> writers;
  const double clip = std::visit([](const auto& o) { return o.clip_norm; }, opt);
  TensorId norm = kNoTensor;
  // Loss scaling reads the norm too: a step whose norm is not finite is
  // skipped.
  if (clip > 0 || ls.scale != kNoTensor) {
    std::vector<TensorId> grads;
    for (const ParamGrad& pg : params) grads.push_back(pg.grad);
    LMS_ASSIGN_OR_RETURN(auto outs, g.add_node(OpKind::kGlobalNorm, "optimizer/global_norm", grads,
                                               {}, TensorRole::kGradient));
    norm = outs[0];
  }
  TensorId step = kNoTensor;
  NodeId increment = kNoNode;
  if (std::holds_alternative<Adam>(opt)) {
    step = g.optimizer_state("optimizer/step", {});
    LMS_RETURN_IF_ERROR(g.status());
    std::vector<TensorId> in = {step};
    if (ls.scale != kNoTensor) in.push_back(norm);  // skipped with the updates
    LMS_RETURN_IF_ERROR(g.add_node(OpKind::kIncrement, "optimizer/increment", in, {}).status());
    increment = g.find_node("optimizer/increment");
    writers.push_back(increment);
  }
  for (const ParamGrad& pg : params) {
    LMS_ASSIGN_OR_RETURN(NodeId update, add_update(g, pg, opt, step, norm, ls));
    for (NodeId reader : g.tensor(pg.param).consumers) {
      if (reader != update) g.add_control_edge(reader, update);
    }
    if (increment != kNoNode) g.add_control_edge(increment, update);
    writers.push_back(update);
  }
  if (ls.scale != kNoTensor) {
    // GradScaler.update, after every reader of the scale (the loss's
    // backward, the updates).
    const LossScaling& o = *ls.options;
    LMS_RETURN_IF_ERROR(g.add_node(OpKind::kAmpUpdateScale, "amp/update_scale",
                                   {ls.scale, ls.tracker, norm},
                                   {{"growth_factor", o.growth_factor},
                                    {"backoff_factor", o.backoff_factor},
                                    {"growth_interval", o.growth_interval}})
                            .status());
    const NodeId update = g.find_node("amp/update_scale");
    for (TensorId t : {ls.scale, ls.tracker}) {
      for (NodeId reader : g.tensor(t).consumers) {
        if (reader != update) g.add_control_edge(reader, update);
      }
    }
    for (NodeId w : writers) g.add_control_edge(w, update);
    writers.push_back(update);
  }
  return writers;
}

// One bn_stats_update "bn_stats/<node>" per training-mode batch_norm with
// running statistics, reading the batch statistics the forward node saved.
// Like the optimizer's updates it writes persistent tensors, so it must come
// after every other reader of them and after the updates (control edges):
// the step commit stays where the optimizer puts it and a failed step leaves
// the running statistics unchanged (Note [Step commit]).
constexpr double kDefaultMomentum = 0.1;  // PyTorch's nn.BatchNorm default

absl::Status add_running_stats_updates(Graph& g, int32_t num_forward_nodes,
                                       const std::vector<NodeId>& writers) {
  for (NodeId n = 0; n < num_forward_nodes; ++n) {
    const Node bn = g.node(n);  // a copy: adding nodes may move it
    if (bn.op != OpKind::kBatchNorm || bn.outputs.size() != 3) continue;
    const Shape& x = g.tensor(bn.inputs[0]).shape;
    const int64_t count = static_cast<int64_t>(ops_internal::numel(x) / static_cast<double>(x[1]));
    if (count < 2) {
      return error(str_cat("batch_norm '", bn.name, "' has ", count,
                           " element per channel; the running variance needs at least 2 "
                           "(PyTorch refuses it too)"));
    }
    const auto it = bn.attrs.find("momentum");
    const AttrValue momentum = it != bn.attrs.end() ? it->second : AttrValue(kDefaultMomentum);
    const std::string name = str_cat("bn_stats/", bn.name);
    LMS_RETURN_IF_ERROR(g.add_node(OpKind::kBnStatsUpdate, name,
                                   {bn.inputs[3], bn.inputs[4], bn.outputs[1], bn.outputs[2]},
                                   {{"momentum", momentum}, {"count", count}})
                            .status());
    const NodeId update = g.find_node(name);
    for (TensorId t : {bn.inputs[3], bn.inputs[4]}) {
      for (NodeId reader : g.tensor(t).consumers) {
        if (reader != update) g.add_control_edge(reader, update);
      }
    }
    for (NodeId w : writers) g.add_control_edge(w, update);
  }
  return absl::OkStatus();
}

// A preferred order in which every node of `hoisted` comes right after the
// last of its predecessors (data and control), the rest keeping the order of
// `base` (a topological order of g). Kahn's schedule keeps a valid
// preferred order unchanged, so this is the schedule.
std::vector<NodeId> hoist(const Graph& g, const std::vector<NodeId>& base,
                          const std::vector<bool>& hoisted) {
  std::vector<int32_t> pending(g.num_nodes(), 0);
  std::vector<std::vector<NodeId>> hoisted_successors(g.num_nodes());
  auto for_each_predecessor = [&](NodeId id, auto fn) {
    for (TensorId t : g.node(id).inputs) {
      if (g.tensor(t).producer != kNoNode) fn(g.tensor(t).producer);
    }
    for (NodeId c : g.node(id).control_inputs) fn(c);
  };
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (!hoisted[id]) continue;
    for_each_predecessor(id, [&](NodeId p) {
      ++pending[id];
      hoisted_successors[p].push_back(id);
    });
  }
  std::vector<NodeId> order;
  order.reserve(base.size());
  std::vector<bool> emitted(g.num_nodes(), false);
  std::vector<NodeId> stack;
  auto emit = [&](NodeId first) {
    stack.push_back(first);
    while (!stack.empty()) {
      const NodeId id = stack.back();
      stack.pop_back();
      order.push_back(id);
      emitted[id] = true;
      // Reverse, so successors come out in creation order.
      for (auto it = hoisted_successors[id].rbegin(); it != hoisted_successors[id].rend(); ++it) {
        if (--pending[*it] == 0) stack.push_back(*it);
      }
    }
  };
  for (NodeId id : base) {
    // A hoisted node with predecessors comes out with the last of them.
    if (!emitted[id] && (!hoisted[id] || pending[id] == 0)) emit(id);
  }
  return order;
}

// TrainingOptions::data_parallel: buckets of the parameters' gradients in the
// order they become final, one all_reduce node each; `params` then holds the
// averaged gradients the optimizer reads.
absl::Status add_all_reduce(Graph& g, std::vector<ParamGrad>& params, const DataParallel& dp) {
  if (dp.bucket_bytes == 0) {
    return error(
        "DataParallel::bucket_bytes is 0; it must be at least 1 byte (DDP's default "
        "is 25 MiB)");
  }
  std::vector<bool> hoisted(g.num_nodes(), false);
  for (const ParamGrad& pg : params) hoisted[g.tensor(pg.grad).producer] = true;
  LMS_ASSIGN_OR_RETURN(std::vector<NodeId> base, schedule(g));
  std::vector<NodeId> order = hoist(g, base, hoisted);
  std::vector<int32_t> position(g.num_nodes());
  for (int32_t p = 0; p < static_cast<int32_t>(order.size()); ++p) position[order[p]] = p;
  std::vector<size_t> by_ready(params.size());
  for (size_t i = 0; i < params.size(); ++i) by_ready[i] = i;
  std::stable_sort(by_ready.begin(), by_ready.end(), [&](size_t a, size_t b) {
    return position[g.tensor(params[a].grad).producer] <
           position[g.tensor(params[b].grad).producer];
  });
  std::vector<std::vector<size_t>> buckets;
  uint64_t filled = 0;
  for (size_t i : by_ready) {
    const uint64_t bytes = g.tensor(params[i].grad).bytes();
    if (buckets.empty() || filled + bytes > dp.bucket_bytes) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(i);
    filled += bytes;
  }
  for (size_t k = 0; k < buckets.size(); ++k) {
    std::vector<TensorId> in;
    for (size_t i : buckets[k]) in.push_back(params[i].grad);
    LMS_ASSIGN_OR_RETURN(std::vector<TensorId> out,
                         g.add_node(OpKind::kAllReduce, str_cat("all_reduce/", k), std::move(in),
                                    {}, TensorRole::kGradient));
    for (size_t j = 0; j < buckets[k].size(); ++j) params[buckets[k][j]].grad = out[j];
  }
  return absl::OkStatus();
}

// After the optimizer exists: every gradient-final node and all_reduce right
// after its inputs (so each bucket's exchange starts as soon as it can and
// overlaps the rest of the backward pass), and each all_reduce's
// release_after set to the first reader of its outputs.
absl::Status schedule_all_reduce(Graph& g) {
  std::vector<bool> hoisted(g.num_nodes(), false);
  std::vector<NodeId> reducers;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (g.node(id).op != OpKind::kAllReduce) continue;
    reducers.push_back(id);
    hoisted[id] = true;
    for (TensorId t : g.node(id).inputs) hoisted[g.tensor(t).producer] = true;
  }
  LMS_ASSIGN_OR_RETURN(std::vector<NodeId> base, schedule(g));
  std::vector<NodeId> order = hoist(g, base, hoisted);
  LMS_RETURN_IF_ERROR(g.set_order(order));
  std::vector<int32_t> position(g.num_nodes());
  for (int32_t p = 0; p < static_cast<int32_t>(order.size()); ++p) position[order[p]] = p;
  for (NodeId r : reducers) {
    NodeId first = kNoNode;
    for (TensorId t : g.node(r).outputs) {
      for (NodeId c : g.tensor(t).consumers) {
        if (first == kNoNode || position[c] < position[first]) first = c;
      }
    }
    if (first != kNoNode) g.mutable_node(r).attrs["release_after"] = g.node(first).name;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Graph> training_graph(const Graph& forward, TensorId loss, const Optimizer& opt,
                                     const TrainingOptions& options) {
  LMS_RETURN_IF_ERROR(check_loss(forward, loss));
  LMS_RETURN_IF_ERROR(check_optimizer(opt));
  LMS_RETURN_IF_ERROR(check_loss_scaling(forward, options.loss_scaling));
  Graph g = forward;
  LossScale ls{.options = options.loss_scaling};
  if (ls.options) {
    ls.scale = g.optimizer_state("amp/scale", {}, Init::constant(ls.options->init_scale));
    ls.tracker = g.optimizer_state("amp/growth_tracker", {});
    LMS_RETURN_IF_ERROR(g.status());
  }
  LMS_ASSIGN_OR_RETURN(std::vector<NodeId> order, schedule(g));
  std::vector<bool> needs = needs_gradient(g, order, loss);
  if (!needs[loss]) {
    return error(str_cat("loss '", g.tensor(loss).name, "' depends on no parameter"));
  }
  const int32_t num_forward_tensors = g.num_tensors();
  const int32_t num_forward_nodes = g.num_nodes();
  Backprop backprop(g, needs);
  LMS_RETURN_IF_ERROR(backprop.seed(loss, ls.scale));
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    LMS_RETURN_IF_ERROR(backprop.visit(*it));
  }
  std::vector<ParamGrad> params;
  for (TensorId t = 0; t < num_forward_tensors; ++t) {
    if (g.tensor(t).role != TensorRole::kParameter || !needs[t]) continue;
    LMS_ASSIGN_OR_RETURN(TensorId grad, backprop.total(t, str_cat(g.tensor(t).name, "/grad")));
    if (grad != kNoTensor) params.push_back({t, grad});
  }
  if (options.data_parallel) {
    LMS_RETURN_IF_ERROR(add_all_reduce(g, params, *options.data_parallel));
  }
  LMS_ASSIGN_OR_RETURN(std::vector<NodeId> writers, add_optimizer(g, params, opt, ls));
  LMS_RETURN_IF_ERROR(add_running_stats_updates(g, num_forward_nodes, writers));
  if (options.data_parallel) LMS_RETURN_IF_ERROR(schedule_all_reduce(g));
  LMS_RETURN_IF_ERROR(g.status());
  g.set_loss(loss);
  return g;
}

}  // namespace lms
