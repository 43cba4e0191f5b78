// A loss attached to a forward graph that has none, typically one imported
// from ONNX (lms/onnx.h), ready for lms::training_graph:
//
//   LMS_ASSIGN_OR_RETURN(lms::ImportedModel m, lms::import_onnx("classifier.onnx"));
//   LMS_ASSIGN_OR_RETURN(lms::TensorId loss,
//                        lms::attach_loss(m.graph, m.outputs[0],
//                                         lms::CrossEntropy{.labels = "labels"}));
//   LMS_ASSIGN_OR_RETURN(lms::Graph train,
//                        lms::training_graph(m.graph, loss, lms::Sgd{.lr = 0.1}));
//   // every step: (*session)->run(float_feeds, lms::Int64Feeds{{"labels", ids}}, &result);
//
// Each loss adds one graph input for what the output is compared with (the
// class labels or the target), named as the loss says, and the loss node
// (named `loss_name`, "loss" by default), a scalar [] that becomes the
// graph's loss().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "absl/status/statusor.h"
#include "lms/graph.h"

namespace lms {

// Softmax cross-entropy with integer class labels, the mean over the rows
// not ignored (PyTorch's F.cross_entropy(logits, labels), reduction mean;
// the softmax_cross_entropy op of lms/ops.h). The output must be logits
// [N,C]; adds the int64 input `labels` of shape [N] (fed with Int64Feeds,
// each label in [0, C) or equal to ignore_index). With classes_last, an
// output of rank > 2 holds the classes on its last axis (a language model's
// [N,T,V] logits) and the labels are [N,T], every other position a row, as
// F.cross_entropy(logits.view(-1, V), labels.view(-1)). Without it, an
// output of rank > 2 is refused rather than read another way than PyTorch's
// class axis 1: an [N,C,1,1] output (a global pooling before a 1x1
// convolution) is flattened first with lms::flatten(graph, name, output),
// then the loss attached to that.
struct CrossEntropy {
  std::string labels = "labels";
  int64_t ignore_index = -100;  // PyTorch's default
  bool classes_last = false;
};

// Mean squared error against a float32 input `target` of the output's shape
// (the mse_loss op).
struct Mse {
  std::string target = "target";
};

// Soft Dice loss (Milletari et al. 2016, V-Net; the soft_dice_loss op)
// against a float32 input `target` of the output's shape, [N,C,S] with S
// one or more spatial dims (a one-hot label map, NCHW / NCDHW). With
// `softmax` the output is taken as logits and a softmax over the channels
// (node "<loss_name>/probs") comes first; without, it must be
// probabilities already.
struct SoftDice {
  std::string target = "target";
  double eps = 1e-5;  // >= 0
  bool softmax = false;
};

using Loss = std::variant<CrossEntropy, Mse, SoftDice>;

// Adds `loss` on the output tensor named `output` (or with id `output`) of
// `graph` and sets graph.loss() to it; returns the loss tensor. `graph` is
// changed only on success.
// Errors (InvalidArgument, naming what was wrong and what is allowed):
//  - graph.status() holds an error, or the graph already has a loss;
//  - no tensor of that name (the message lists the graph's outputs) or id;
//    the output is not float32;
//  - CrossEntropy: the output is not 2-D [N,C] (an [N,C,1,1] output: flatten
//    it first); SoftDice: the output has fewer than 3 dims [N,C,S], eps < 0;
//  - the labels / target name, or `loss_name`, is already used by a tensor or
//    node of the graph, is empty or has a character names may not have.
absl::StatusOr<TensorId> attach_loss(Graph& graph, std::string_view output, const Loss& loss,
                                     std::string_view loss_name = "loss");
absl::StatusOr<TensorId> attach_loss(Graph& graph, TensorId output, const Loss& loss,
                                     std::string_view loss_name = "loss");

}  // namespace lms
