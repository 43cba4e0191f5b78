// lms::attach_loss (lms/loss.h): checks the output against the loss, then
// adds the labels or target input and the loss node through the public
// builders, on a copy of the graph that replaces it only on success.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "graph/ops_internal.h"
#include "lms/loss.h"
#include "lms/ops.h"

namespace lms {
namespace {

using ops_internal::shape_str;
using ops_internal::str_cat;

absl::Status loss_error(std::string_view message) {
  return absl::InvalidArgumentError(str_cat("attach_loss: ", message));
}

// Tensors a forward graph hands out: produced by a node, read by none.
std::vector<std::string> graph_outputs(const Graph& g) {
  std::vector<std::string> names;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const Tensor& tensor = g.tensor(t);
    if (tensor.producer != kNoNode && tensor.consumers.empty()) names.push_back(tensor.name);
  }
  return names;
}

// `name` (the labels or target input, or the loss) must not be taken yet;
// Graph's own check gives the rest (empty names, forbidden characters).
absl::Status check_free(const Graph& g, std::string_view what, std::string_view name) {
  if (g.find_tensor(name) == kNoTensor && g.find_node(name) == kNoNode) return absl::OkStatus();
  return loss_error(str_cat(what, " '", name,
                            "' is already the name of a tensor or node of the graph; choose a "
                            "name the graph does not use"));
}

absl::Status check_output(const Graph& g, TensorId output, const Loss& loss) {
  const Tensor& t = g.tensor(output);
  if (t.dtype != DType::kFloat32) {
    return loss_error(str_cat("output '", t.name, "' is ", dtype_name(t.dtype),
                              "; a loss needs a float32 output"));
  }
  if (const auto* xent = std::get_if<CrossEntropy>(&loss)) {
    const bool last_axis_ok = xent->classes_last && t.shape.size() > 2 && t.shape.back() > 1;
    if (t.shape.size() != 2 && !last_axis_ok) {
      std::string hint;
      if (t.shape.size() > 2) {
        hint = str_cat("; flatten it first (lms::flatten(graph, \"", t.name, "/flat\", output)",
                       " gives [", t.shape[0], ",", num_elements(t.shape) / t.shape[0],
                       "]) and attach the loss to that, or, for logits with the classes on the "
                       "last axis ([N,T,V]), set CrossEntropy.classes_last");
      }
      return loss_error(
          str_cat("CrossEntropy needs logits [N,C] (or [..., C] with "
                  "CrossEntropy.classes_last, C > 1), but output '",
                  t.name, "' is ", shape_str(t.shape), hint));
    }
  }
  if (const auto* dice = std::get_if<SoftDice>(&loss)) {
    if (t.shape.size() < 3) {
      return loss_error(
          str_cat("SoftDice needs an output [N,C,S] with one or more spatial dims, "
                  "but output '",
                  t.name, "' is ", shape_str(t.shape)));
    }
    if (!(dice->eps >= 0))
      return loss_error(str_cat("SoftDice.eps is ", dice->eps, "; allowed: >= 0"));
  }
  return absl::OkStatus();
}

// Adds the input and the loss node to `g`; kNoTensor with g.status() set on
// failure.
TensorId add_loss(Graph& g, TensorId output, const Loss& loss, std::string_view loss_name) {
  const Shape shape = g.tensor(output).shape;
  if (const auto* xent = std::get_if<CrossEntropy>(&loss)) {
    const TensorId labels =
        g.input(xent->labels, Shape(shape.begin(), shape.end() - 1), DType::kInt64);
    return softmax_cross_entropy(g, loss_name, output, labels, xent->ignore_index);
  }
  if (const auto* mse = std::get_if<Mse>(&loss)) {
    return mse_loss(g, loss_name, output, g.input(mse->target, shape));
  }
  const auto& dice = std::get<SoftDice>(loss);
  const TensorId target = g.input(dice.target, shape);
  const TensorId probs = dice.softmax ? softmax(g, str_cat(loss_name, "/probs"), output) : output;
  return soft_dice_loss(g, loss_name, probs, target, dice.eps);
}

std::string_view input_field(const Loss& loss) {
  if (std::holds_alternative<CrossEntropy>(loss)) return "CrossEntropy.labels";
  return std::holds_alternative<Mse>(loss) ? "Mse.target" : "SoftDice.target";
}

std::string_view input_name(const Loss& loss) {
  if (const auto* xent = std::get_if<CrossEntropy>(&loss)) return xent->labels;
  if (const auto* mse = std::get_if<Mse>(&loss)) return mse->target;
  return std::get<SoftDice>(loss).target;
}

}  // namespace

absl::StatusOr<TensorId> attach_loss(Graph& graph, TensorId output, const Loss& loss,
                                     std::string_view loss_name) {
  if (!graph.status().ok()) {
    return loss_error(str_cat("the graph holds an error: ", graph.status().message()));
  }
  if (graph.loss() != kNoTensor) {
    return loss_error(
        str_cat("the graph already has a loss, '", graph.tensor(graph.loss()).name, "'"));
  }
  if (output < 0 || output >= graph.num_tensors()) {
    return loss_error(str_cat("output ", output, " is not a tensor of the graph (it has ",
                              graph.num_tensors(), ")"));
  }
  LMS_RETURN_IF_ERROR(check_output(graph, output, loss));
  const std::string_view input = input_name(loss);
  LMS_RETURN_IF_ERROR(check_free(graph, input_field(loss), input));
  LMS_RETURN_IF_ERROR(check_free(graph, "the loss name", loss_name));
  if (input == loss_name) {
    return loss_error(
        str_cat(input_field(loss), " and the loss name are both '", input, "'; they must differ"));
  }
  Graph g = graph;
  const TensorId loss_tensor = add_loss(g, output, loss, loss_name);
  if (!g.status().ok()) return loss_error(str_cat(g.status().message()));
  g.set_loss(loss_tensor);
  graph = std::move(g);
  return loss_tensor;
}

absl::StatusOr<TensorId> attach_loss(Graph& graph, std::string_view output, const Loss& loss,
                                     std::string_view loss_name) {
  const TensorId t = graph.find_tensor(output);
  if (t == kNoTensor) {
    const std::vector<std::string> outputs = graph_outputs(graph);
    return loss_error(
        str_cat("no tensor named '", output, "' in the graph; its outputs are: ",
                outputs.empty() ? std::string("none") : absl::StrJoin(outputs, ", ")));
  }
  return attach_loss(graph, t, loss, loss_name);
}

}  // namespace lms
