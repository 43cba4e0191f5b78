// Graphs from Python: ONNX import, the model builders, losses, optimizers and
// the training graph.
#include "lms/graph.h"

#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "lms/autocast.h"
#include "lms/loss.h"
#include "lms/onnx.h"
#include "lms/op_kind.h"
#include "lms/training.h"
#include "models.h"

namespace lms::python {
namespace {

py::tuple shape_tuple(const Shape& shape) {
  py::tuple t(shape.size());
  for (size_t k = 0; k < shape.size(); ++k) t[k] = shape[k];
  return t;
}

std::vector<std::string> names_of_role(const Graph& g, TensorRole role) {
  std::vector<std::string> out;
  for (int32_t t = 0; t < g.num_tensors(); ++t) {
    if (g.tensor(t).role == role) out.push_back(g.tensor(t).name);
  }
  return out;
}

const Tensor& tensor_named(const Graph& g, const std::string& name) {
  const TensorId t = g.find_tensor(name);
  if (t == kNoTensor) throw py::key_error("no tensor '" + name + "' in the graph");
  return g.tensor(t);
}

TensorId loss_id(const Graph& g, const std::optional<std::string>& loss) {
  if (!loss) {
    if (g.loss() == kNoTensor) {
      throw py::value_error(
          "the graph has no loss: attach one with lms.attach_loss, or name the loss tensor");
    }
    return g.loss();
  }
  const TensorId t = g.find_tensor(*loss);
  if (t == kNoTensor) throw py::value_error("no tensor '" + *loss + "' in the graph");
  return t;
}

// A builder's graph with its loss set, or ValueError for a bad config.
Graph built(Graph g, const char* model) {
  if (!g.status().ok()) {
    raise_if_error(
        absl::InvalidArgumentError(std::string(model) + ": " + std::string(g.status().message())));
  }
  return g;
}

}  // namespace

void define_graph(py::module_& m) {
  py::class_<Graph>(m, "Graph",
                    "A dataflow graph of tensors and nodes: a forward model, or a training step "
                    "(lms.training_graph), possibly rewritten by lms.rewrite. Copy with copy().")
      .def(py::init<>(), "An empty graph.")
      .def_property_readonly("num_nodes", &Graph::num_nodes)
      .def_property_readonly("num_tensors", &Graph::num_tensors)
      .def_property_readonly(
          "loss",
          [](const Graph& g) -> std::optional<std::string> {
            if (g.loss() == kNoTensor) return std::nullopt;
            return g.tensor(g.loss()).name;
          },
          "Name of the scalar loss tensor, or None.")
      .def_property_readonly(
          "inputs", [](const Graph& g) { return names_of_role(g, TensorRole::kInput); },
          "Names of the tensors fed at every step.")
      .def_property_readonly(
          "parameters", [](const Graph& g) { return names_of_role(g, TensorRole::kParameter); },
          "Names of the trained tensors.")
      .def(
          "shape",
          [](const Graph& g, const std::string& name) {
            return shape_tuple(tensor_named(g, name).shape);
          },
          py::arg("tensor"), "Shape of a tensor, a tuple of ints. KeyError for an unknown name.")
      .def(
          "dtype",
          [](const Graph& g, const std::string& name) {
            switch (tensor_named(g, name).dtype) {
              case DType::kInt64:
                return "int64";
              case DType::kBFloat16:
                return "bfloat16";
              case DType::kFloat16:
                return "float16";
              case DType::kFloat32:
                break;
            }
            return "float32";
          },
          py::arg("tensor"),
          "\"float32\", \"int64\", \"bfloat16\" or \"float16\" (PyTorch's names). Session.run "
          "feeds and fetches every float tensor as a float32 array.")
      .def(
          "ops",
          [](const Graph& g) {
            std::vector<std::string> ops;
            for (int32_t k = 0; k < g.num_nodes(); ++k) ops.push_back(op_name(g.node(k).op));
            return ops;
          },
          "The op of each node (\"conv\", \"swap_out\", ...), in creation order.")
      .def("to_text", &to_text, "The graph in lms's text form.")
      .def("copy", [](const Graph& g) { return Graph(g); })
      .def("__copy__", [](const Graph& g) { return Graph(g); })
      .def("__repr__", [](const Graph& g) {
        return "<lms.Graph " + std::to_string(g.num_nodes()) + " nodes, " +
               std::to_string(g.num_tensors()) + " tensors>";
      });

  py::class_<ImportedModel>(m, "ImportedModel", "What lms.import_onnx read.")
      .def_readonly("graph", &ImportedModel::graph, "The forward graph, no loss.")
      .def_readonly("inputs", &ImportedModel::inputs, "Graph inputs to feed, in file order.")
      .def_readonly("outputs", &ImportedModel::outputs, "The ONNX graph outputs, in file order.")
      .def_readonly("parameters", &ImportedModel::parameters, "Trainable initializers.")
      .def_property_readonly(
          "state",
          [](const ImportedModel& im) {
            std::vector<std::string> names;
            for (const ImportedState& s : im.state) names.push_back(s.name);
            return names;
          },
          "Every other initializer (batch-norm running statistics, buffers).")
      .def_readonly("opset", &ImportedModel::opset);

  m.def(
      "parse_graph", [](const std::string& text) { return value_or_raise(parse_graph(text)); },
      py::arg("text"),
      R"(The graph whose text form (Graph.to_text) is `text`: parse_graph(g.to_text())
gives a graph with the same text. Tensor types are f32[...], i64[...], bf16[...]
and f16[...]; the cast op converts between the float ones. Raises ValueError
naming the line and what was expected.)");

  m.def(
      "import_onnx",
      [](const std::string& path, const std::optional<std::map<std::string, Shape>>& inputs,
         const std::optional<std::vector<std::string>>& trainable, bool eval_mode) {
        OnnxImportOptions options{.trainable = trainable, .eval_mode = eval_mode};
        if (inputs) {
          for (const auto& [name, shape] : *inputs) options.input_shapes.emplace_back(name, shape);
        }
        py::gil_scoped_release release;
        return value_or_raise(import_onnx(path, options));
      },
      py::arg("path"), py::arg("inputs") = py::none(), py::arg("trainable") = py::none(),
      py::arg("eval_mode") = false,
      R"(Reads the ONNX model at `path` (opset 13..17) and builds its forward graph.

inputs: shapes of the graph inputs by name, e.g. {"input": (32, 1, 28, 28)};
  an input not given keeps the file's shape, which must then be static.
trainable: the initializers to train; None reads the model's "lms.trainable"
  metadata (lms.torch.export writes it), else every weight and bias.
eval_mode: batch norm with its running statistics (PyTorch's model.eval()).
Raises ValueError for a file that is not a usable ONNX model or a node lms
cannot map (the message names the node, its op and what is supported) and
RuntimeError (NOT_FOUND) when the file does not exist.)");

  py::class_<CrossEntropy>(m, "CrossEntropy",
                           "Softmax cross-entropy of logits [N,C] against int64 labels [N] "
                           "(classes_last: logits [..., C] and labels [...]), mean over the rows.")
      .def(py::init([](std::string labels, int64_t ignore_index, bool classes_last) {
             return CrossEntropy{labels, ignore_index, classes_last};
           }),
           py::arg("labels") = "labels", py::arg("ignore_index") = -100,
           py::arg("classes_last") = false)
      .def_readwrite("labels", &CrossEntropy::labels)
      .def_readwrite("ignore_index", &CrossEntropy::ignore_index)
      .def_readwrite("classes_last", &CrossEntropy::classes_last);
  py::class_<Mse>(m, "Mse", "Mean squared error against a float32 target of the output's shape.")
      .def(py::init([](std::string target) { return Mse{target}; }), py::arg("target") = "target")
      .def_readwrite("target", &Mse::target);
  py::class_<SoftDice>(m, "SoftDice",
                       "Soft Dice loss (V-Net) against a one-hot target [N,C,spatial...].")
      .def(py::init([](std::string target, double eps, bool softmax) {
             return SoftDice{target, eps, softmax};
           }),
           py::arg("target") = "target", py::arg("eps") = 1e-5, py::arg("softmax") = false)
      .def_readwrite("target", &SoftDice::target)
      .def_readwrite("eps", &SoftDice::eps)
      .def_readwrite("softmax", &SoftDice::softmax);

  m.def(
      "attach_loss",
      [](Graph& graph, const std::string& output,
         const std::variant<CrossEntropy, Mse, SoftDice>& loss, const std::string& name) {
        const TensorId t = value_or_raise(attach_loss(graph, output, Loss(loss), name));
        return graph.tensor(t).name;
      },
      py::arg("graph"), py::arg("output"), py::arg("loss"), py::arg("name") = "loss",
      "Adds `loss` on the tensor `output` of `graph` (in place) and makes it the graph's loss; "
      "returns the loss tensor's name. ValueError naming what was wrong; the graph is then "
      "unchanged.");

  py::class_<Sgd>(m, "Sgd", "SGD with momentum and L2 weight decay: p -= lr * v.")
      .def(py::init([](double lr, double momentum, double weight_decay, double clip_norm) {
             return Sgd{lr, momentum, weight_decay, clip_norm};
           }),
           py::arg("lr") = 0.01, py::arg("momentum") = 0.0, py::arg("weight_decay") = 0.0,
           py::arg("clip_norm") = 0.0)
      .def_readwrite("lr", &Sgd::lr)
      .def_readwrite("momentum", &Sgd::momentum)
      .def_readwrite("weight_decay", &Sgd::weight_decay)
      .def_readwrite("clip_norm", &Sgd::clip_norm);
  py::class_<Adam>(m, "Adam", "Adam (Kingma & Ba 2015) with L2 weight decay.")
      .def(py::init([](double lr, double beta1, double beta2, double eps, double weight_decay,
                       double clip_norm, int64_t decay_steps, double decay_power) {
             return Adam{lr, beta1, beta2, eps, weight_decay, clip_norm, decay_steps, decay_power};
           }),
           py::arg("lr") = 1e-3, py::arg("beta1") = 0.9, py::arg("beta2") = 0.999,
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0, py::arg("clip_norm") = 0.0,
           py::arg("decay_steps") = 0, py::arg("decay_power") = 0.9)
      .def_readwrite("lr", &Adam::lr)
      .def_readwrite("beta1", &Adam::beta1)
      .def_readwrite("beta2", &Adam::beta2)
      .def_readwrite("eps", &Adam::eps)
      .def_readwrite("weight_decay", &Adam::weight_decay);
  py::class_<LossScaling>(m, "LossScaling",
                          "Dynamic loss scaling as PyTorch's GradScaler (lms/training.h), for "
                          "float16 models: a step with a non-finite gradient changes no "
                          "parameter or optimizer state and backs the scale off.")
      .def(py::init([](double init_scale, double growth_factor, double backoff_factor,
                       int64_t growth_interval) {
             return LossScaling{init_scale, growth_factor, backoff_factor, growth_interval};
           }),
           py::arg("init_scale") = 65536.0, py::arg("growth_factor") = 2.0,
           py::arg("backoff_factor") = 0.5, py::arg("growth_interval") = 2000)
      .def_readwrite("init_scale", &LossScaling::init_scale)
      .def_readwrite("growth_factor", &LossScaling::growth_factor)
      .def_readwrite("backoff_factor", &LossScaling::backoff_factor)
      .def_readwrite("growth_interval", &LossScaling::growth_interval);

  m.def(
      "training_graph",
      [](const Graph& forward, const std::variant<Sgd, Adam>& optimizer,
         const std::optional<std::string>& loss, std::optional<uint64_t> data_parallel_bucket,
         std::optional<LossScaling> loss_scaling) {
        TrainingOptions options;
        if (data_parallel_bucket) options.data_parallel = DataParallel{*data_parallel_bucket};
        options.loss_scaling = loss_scaling;
        return value_or_raise(
            training_graph(forward, loss_id(forward, loss), Optimizer(optimizer), options));
      },
      py::arg("forward"), py::arg("optimizer"), py::arg("loss") = py::none(),
      py::arg("data_parallel_bucket_bytes") = py::none(), py::arg("loss_scaling") = py::none(),
      "A copy of `forward` with the backward pass from its loss (or the tensor `loss`) and one "
      "optimizer step, with dynamic loss scaling when `loss_scaling` (a LossScaling) is given. "
      "ValueError for a graph without a gradient path, bad hyper-parameters, or a float16 "
      "graph without loss_scaling.");

  m.def(
      "autocast",
      [](Graph& forward, const std::string& dtype) {
        std::optional<DType> low = parse_dtype(dtype);
        if (dtype == "bfloat16") low = DType::kBFloat16;
        if (dtype == "float16") low = DType::kFloat16;
        if (!low) {
          throw py::value_error("autocast: dtype '" + dtype +
                                "' is not one of \"bfloat16\", \"float16\" (or \"bf16\", "
                                "\"f16\")");
        }
        const AutocastReport r = value_or_raise(autocast(forward, {.dtype = *low}));
        py::dict report;
        report["low_precision_nodes"] = r.low_precision_nodes;
        report["casts_added"] = r.casts_added;
        report["casts_folded"] = r.casts_folded;
        return report;
      },
      py::arg("forward"), py::arg("dtype") = "bfloat16",
      "Mixed precision as torch.autocast runs it (lms/autocast.h), in place on the forward "
      "graph, before training_graph: convolutions, linear layers and matmuls compute in `dtype` "
      "(\"bfloat16\" or \"float16\"), softmax, reductions and losses in float32, other ops "
      "(normalisations too, with float32 statistics) in their inputs' dtype; parameters stay "
      "float32 master weights. "
      "Returns {\"low_precision_nodes\", \"casts_added\", \"casts_folded\"}. ValueError for "
      "another dtype or a graph that is not a forward graph (the graph is then unchanged).");

  py::module_ models = m.def_submodule("models", "The model builders of the examples and benches.");
  models.def(
      "vdsr",
      [](int64_t batch, int64_t height, int64_t width, int64_t depth, int64_t channels,
         uint64_t seed) {
        Graph g;
        g.set_loss(models::build_vdsr(g, {batch, height, width, depth, channels, seed}).loss);
        return built(std::move(g), "vdsr");
      },
      py::arg("batch") = 16, py::arg("height") = 41, py::arg("width") = 41, py::arg("depth") = 20,
      py::arg("channels") = 64, py::arg("seed") = 1,
      "VDSR (Kim et al., CVPR 2016) with its MSE loss: feeds \"lr\" and \"hr\" [batch,1,height,"
      "width], float32.");
  models.def(
      "unet",
      [](int64_t batch, int64_t in_channels, int64_t classes, int64_t size, int64_t base_filters,
         int64_t levels, int spatial_dims, uint64_t seed) {
        Graph g;
        models::UnetConfig c;
        c.batch = batch;
        c.in_channels = in_channels;
        c.classes = classes;
        c.size = size;
        c.base_filters = base_filters;
        c.levels = levels;
        c.spatial_dims = spatial_dims;
        c.seed = seed;
        g.set_loss(models::build_unet(g, c).loss);
        return built(std::move(g), "unet");
      },
      py::arg("batch") = 1, py::arg("in_channels") = 4, py::arg("classes") = 4,
      py::arg("size") = 32, py::arg("base_filters") = 8, py::arg("levels") = 3,
      py::arg("spatial_dims") = 3, py::arg("seed") = 1,
      "A 3-D U-Net (Isensee et al. 2017, reduced) with its soft Dice loss: feeds \"image\" "
      "[batch,in_channels,size,size,size] and one-hot \"labels\" [batch,classes,...].");
}

}  // namespace lms::python
