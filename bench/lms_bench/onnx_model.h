// lms-bench onnx: the batch sweep of lms-bench vdsr for a model the user
// brings as an ONNX file (lms::import_onnx, lms/onnx.h), with a loss
// attached (lms::attach_loss, lms/loss.h) and trained with SGD.
//
//   LMS_ASSIGN_OR_RETURN(OnnxInput in, parse_onnx_input("input:B,3,224,224"));
//   LMS_ASSIGN_OR_RETURN(OnnxLoss loss, parse_onnx_loss("cross-entropy:1000"));
//   LMS_ASSIGN_OR_RETURN(ModelFactory f,
//                        onnx_factory({.path = "resnet50.onnx", .input = in, .loss = loss}));
//   LMS_ASSIGN_OR_RETURN(Graph train, f.build(/*batch=*/8));
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "lms/types.h"
#include "model_factory.h"

namespace lms::bench {

// --input NAME:DIMS: the graph input to feed and its shape, one dimension
// given as B, the batch the sweep sets (e.g. "input:B,3,224,224"), or as T,
// the tokens of a sequence the sweep sets at a fixed batch (a context-length
// sweep, e.g. "ids:4,T"). An int64 input is fed with token ids drawn in
// [0, V) of the embedding that reads it.
struct OnnxInput {
  std::string name;
  Shape shape;           // the swept dimension holds 1
  int batch_axis = 0;    // where B or T stood
  bool context = false;  // T: the sweep's sizes are context lengths
};

// --loss KIND[:CLASSES]: "cross-entropy:C" (softmax cross-entropy against
// random int64 labels in [0, C); the output must be logits [N, C], or
// [..., C] with the classes on the last axis, a label per position) or "mse"
// (mean squared error against a random target of the output's shape).
struct OnnxLoss {
  enum class Kind { kCrossEntropy, kMse };
  Kind kind = Kind::kCrossEntropy;
  int64_t classes = 0;  // cross-entropy: C
};

// InvalidArgument naming the flag, the text and the form expected.
absl::StatusOr<OnnxInput> parse_onnx_input(const std::string& text);
absl::StatusOr<OnnxLoss> parse_onnx_loss(const std::string& text);

struct OnnxBenchModel {
  std::string path;  // the .onnx file (scripts/export_onnx.py writes one)
  OnnxInput input;
  OnnxLoss loss;
  uint64_t seed = 1;  // the random batches
  // SGD with momentum, as torchvision's reference training of classifiers.
  double lr = 0.01;
  double momentum = 0.9;
  DType precision = DType::kFloat32;  // --precision (autocast_training_graph)
};

// The factory of the sweep (model_factory.h): build(batch) imports the file
// with the input's batch set, attaches the loss to the model's first output
// and makes the training graph; feeds(batch, step) are standard normal
// inputs, int64_feeds(batch, step) the labels. Feeds depend only on (seed,
// batch, step), so LMS off and on train on the same batches. The model's
// file is read once here, to fail early: NotFound or InvalidArgument as
// lms::import_onnx says, InvalidArgument when the input is not a graph input
// of the model or the loss does not fit its output. Unimplemented when this
// build has no ONNX importer.
absl::StatusOr<ModelFactory> onnx_factory(const OnnxBenchModel& model);

}  // namespace lms::bench
