// Importing a model exported from PyTorch to ONNX ("bring your own model").
//
//   // python3 scripts/export_onnx.py, or in Python:
//   //   export_onnx.export(model, x, "m.onnx")
//   LMS_ASSIGN_OR_RETURN(lms::ImportedModel m,
//                        lms::import_onnx("m.onnx", {.input_shapes = {{"input", {8, 1, 64,
//                        64}}}}));
//   lms::TensorId y = m.graph.find_tensor(m.outputs[0]);
//   lms::TensorId loss = lms::mse_loss(m.graph, "loss", y, m.graph.input("target", {8, 1, 64,
//   64})); LMS_ASSIGN_OR_RETURN(lms::Graph train, lms::training_graph(m.graph, loss, lms::Adam{}));
//
// What is read: an ONNX ModelProto of the default domain at opsets 13 to 17,
// with its initializers inline or in external data files (models over
// 2 GiB), as torch.onnx.export writes it with opset_version=14,
// training=TrainingMode.TRAINING and do_constant_folding=False
// (scripts/export_onnx.py). Such an export keeps every parameter as an
// initializer under its PyTorch name and BatchNormalization in training mode.
//
// How (docs/design.md, "ONNX import"): the importer's fusion passes run
// first, in one declared order (layer norm, GELU, attention: each exported
// chain becomes one node, or stays as its nodes where its constants do not
// fit); then the nodes are visited in file order;
// shape arithmetic (Shape, Gather / Unsqueeze / Squeeze / Concat / Slice /
// Cast / Transpose / arithmetic on constants, Constant, ConstantOfShape) is
// folded for the given input shapes; identities (Identity, Dropout with
// ratio 0 or training_mode false, all-zero Pad, AveragePool with kernel 1,
// one-input Concat) are removed; every other node becomes one or more lms
// ops of docs/ops.md through Graph::add_node (Gemm and MatMul become
// linear, a Transpose of a weight feeding their input B its trans_b, so
// the weight keeps its name and is trained; Flatten and Reshape become
// reshape, a copy). Nothing is approximated: a node lms
// cannot express exactly is an InvalidArgument naming the node, the op, the
// attribute and what is supported.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/graph.h"
#include "lms/types.h"

namespace lms {

// A graph input bound to fixed values: folded as a constant instead of fed.
struct OnnxConstantInput {
  std::string name;
  Shape shape;
  std::vector<double> values;  // row-major; the input's dtype in the file decides float or int64
};

struct OnnxImportOptions {
  // Shapes of the graph inputs, by name; an input not listed keeps the shape
  // in the file, which must then be fully static. The batch size (or any
  // dimension) may differ from the export's: shape arithmetic is folded for
  // these shapes.
  std::vector<std::pair<std::string, Shape>> input_shapes = {};
  // Graph inputs folded as constants (e.g. Slice bounds or Resize scales a
  // model takes as inputs).
  std::vector<OnnxConstantInput> constant_inputs = {};
  // The initializers that are trained. Unset: the model's metadata_props
  // entry "lms.trainable" (comma-separated, written by
  // scripts/export_onnx.py), else the default rule: a float initializer is
  // trainable iff some node reads it as a weight or bias (Conv,
  // ConvTranspose and Gemm inputs 1-2, MatMul input 1, the last two also
  // through Transposes and Identities, BatchNormalization /
  // InstanceNormalization scale and bias, the table of an embedding
  // Gather).
  std::optional<std::vector<std::string>> trainable = std::nullopt;
  // Import every BatchNormalization in eval mode (PyTorch's model.eval()):
  // batch_norm with training = 0, normalising with the running statistics,
  // for evaluating a model with lms::Session on the forward graph. Also
  // accepts BatchNormalization in inference mode (training_mode = 0). Such
  // a graph cannot be trained (no gradient passes an eval-mode batch_norm).
  bool eval_mode = false;
};

// An initializer that is not trained (BatchNormalization running mean and
// variance, constant buffers). Those a node reads are also in the graph as
// optimizer-state tensors (persistent) under their ONNX names, so a
// checkpoint keeps those names. The running statistics are read by
// batch_norm and, in a training graph (lms::training_graph), updated at each
// step's commit as PyTorch updates them (docs/ops.md, bn_stats_update); the
// values here are the file's, the initial ones.
struct ImportedState {
  std::string name;
  Shape shape;
  DType dtype = DType::kFloat32;
  std::shared_ptr<const std::vector<float>>
      values;  // as float (int64 state converted exactly below 2^24)
  bool in_graph = false;
};

struct ImportedModel {
  Graph graph;                          // forward graph, no loss
  std::vector<std::string> inputs;      // graph inputs to feed, in file order (lms tensor names)
  std::vector<std::string> outputs;     // lms tensor names of the ONNX graph outputs, in file order
  std::vector<std::string> parameters;  // trainable initializers in the graph (kParameter)
  std::vector<ImportedState> state;     // every other initializer
  int64_t opset = 0;                    // of the default domain
};

// Reads the ONNX model at `path` and builds its forward graph. Tensor names:
// an ONNX value keeps its name where lms allows it, else each character lms
// does not allow in a name (whitespace, ( ) , = [ ] { } ") becomes '_'.
// Errors:
//  - NotFound: the file or an external data file does not exist;
//  - InvalidArgument: a truncated or corrupt file; an opset of the default
//    domain outside 13..17 or a node of another domain (names the domain);
//    an input shape missing or not static; a default (eval) export
//    (BatchNormalization fused into the convolutions, parameters renamed
//    onnx::*, or BatchNormalization in inference mode): export with
//    scripts/export_onnx.py; a `trainable` name that is not an initializer;
//    a node the importer cannot map exactly ("ONNX node '<name>' (<op>):
//    <attribute or input> ... ; supported: ...");
//  - ResourceExhausted: host memory ran out (std::bad_alloc while reading,
//    folding or building), naming the stage and the node being visited.
absl::StatusOr<ImportedModel> import_onnx(std::string_view path,
                                          const OnnxImportOptions& options = {});

}  // namespace lms
