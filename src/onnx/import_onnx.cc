// lms::import_onnx (lms/onnx.h): reads the file, runs the fusion passes,
// checks the opsets, binds initializers and graph inputs, then visits the
// nodes in file order (Note [ONNX import]).
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <filesystem>
#include <new>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lms/onnx.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "onnx/import_pass.h"
#include "onnx/importer.h"

namespace lms {
namespace onnx_import {
namespace {

constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 17;
constexpr std::string_view kTrainableKey = "lms.trainable";

bool default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

absl::StatusOr<int64_t> read_opset(const ::onnx::ModelProto& m) {
  int64_t opset = 0;
  for (const auto& o : m.opset_import()) {
    if (default_domain(o.domain())) {
      opset = o.version();
    } else if (o.domain() != "ai.onnx.ml") {
      return absl::InvalidArgumentError(
          absl::StrCat("ONNX opset domain '", o.domain(), "' (version ", o.version(),
                       ") is unknown to lms; supported: the default domain (ai.onnx), opsets ",
                       kMinOpset, " to ", kMaxOpset));
    }
  }
  if (opset < 1 || opset > kMaxOpset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ONNX opset ", opset, " not supported; supported: ", kMinOpset, " to ", kMaxOpset));
  }
  return opset;
}

// Ops whose mapper reads every version in force from `opset` on: Clip-6's
// min / max attributes and Clip-11's inputs (map_ops.cc, clip_bound).
bool mapped_at_old_opset(const std::string& op, int64_t opset) {
  return op == "Clip" && opset >= 6;
}

// Below opset 13 a model is read only if every op in it is defined exactly
// as at opset 13 (the same schema version), so the mappers' opset-13
// semantics hold, or is one whose mapper knows its older versions. The ops
// are those of the file: a fused node's body as exported.
absl::Status check_old_opset(const ::onnx::GraphProto& g, int64_t opset) {
  if (opset >= kMinOpset) return absl::OkStatus();
  absl::Status status;
  for_each_exported_node(g, [&](const ::onnx::NodeProto& n) {
    if (!status.ok() || mapped_at_old_opset(n.op_type(), opset)) return;
    const auto* old = ::onnx::OpSchemaRegistry::Schema(n.op_type(), int(opset), "");
    const auto* now = ::onnx::OpSchemaRegistry::Schema(n.op_type(), int(kMinOpset), "");
    if (old == nullptr || now == nullptr || old->since_version() != now->since_version()) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "ONNX opset ", opset, " not supported: op ", n.op_type(), " of node '", n.name(),
          "' is defined differently there than at opset ", kMinOpset, "; supported: opsets ",
          kMinOpset, " to ", kMaxOpset, " (older ones where every op is unchanged since)"));
    }
  });
  return status;
}

// Default rule (lms/onnx.h): initializers read as weights or biases, for
// Gemm / MatMul input B through Transposes and Identities (Note
// [Weight-side Transpose]), by the nodes as exported (a fused node's body).
void default_trainable(const ::onnx::GraphProto& g, absl::flat_hash_set<std::string>& out) {
  absl::flat_hash_map<std::string, std::string> through;  // Transpose / Identity output -> input
  auto source = [&](std::string name) {
    for (auto it = through.find(name); it != through.end(); it = through.find(name)) {
      name = it->second;
    }
    return name;
  };
  for_each_exported_node(g, [&](const ::onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    if ((op == "Transpose" || op == "Identity") && n.input_size() > 0 && n.output_size() > 0) {
      through[n.output(0)] = n.input(0);
    }
    const bool weights = op == "Conv" || op == "ConvTranspose" || op == "BatchNormalization" ||
                         op == "InstanceNormalization" || op == "LayerNormalization" ||
                         op == "Gemm";
    for (int k = 1; weights && k < std::min(n.input_size(), 3); ++k) out.insert(n.input(k));
    if ((op == "Gemm" || op == "MatMul") && n.input_size() > 1) out.insert(source(n.input(1)));
    if (op == "Gather" && n.input_size() > 0) out.insert(n.input(0));
  });
}

absl::Status choose_trainable(const ::onnx::ModelProto& m, const OnnxImportOptions& o,
                              absl::flat_hash_set<std::string>& out) {
  std::vector<std::string> names;
  if (o.trainable) {
    names = *o.trainable;
  } else {
    for (const auto& p : m.metadata_props()) {
      if (p.key() == kTrainableKey) names = absl::StrSplit(p.value(), ',', absl::SkipEmpty());
    }
    if (names.empty()) default_trainable(m.graph(), out);
  }
  absl::flat_hash_set<std::string> inits;
  for (const auto& t : m.graph().initializer()) inits.insert(t.name());
  for (const std::string& name : names) {
    if (!inits.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("trainable parameter '", name, "' is not an initializer of the model",
                       o.trainable ? "" : " (metadata_props lms.trainable)"));
    }
    out.insert(name);
  }
  return absl::OkStatus();
}

absl::Status bind_initializers(Importer& im, const ::onnx::GraphProto& g) {
  for (const auto& t : g.initializer()) {
    LMS_ASSIGN_OR_RETURN(Const c, decode_tensor(t, im.model_dir));
    Value v;
    v.constant = std::move(c);
    v.initializer = true;
    im.values[t.name()] = std::move(v);
  }
  return absl::OkStatus();
}

absl::StatusOr<Shape> file_shape(const ::onnx::ValueInfoProto& in) {
  Shape s;
  for (const auto& d : in.type().tensor_type().shape().dim()) {
    if (!d.has_dim_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ONNX graph input '", in.name(), "' has a symbolic dimension '",
                       d.dim_param(), "': give its shape in OnnxImportOptions::input_shapes"));
    }
    s.push_back(d.dim_value());
  }
  return s;
}

absl::Status bind_input(Importer& im, const ::onnx::ValueInfoProto& in,
                        std::vector<std::string>& names) {
  const int type = in.type().tensor_type().elem_type();
  const bool is_int = type == ::onnx::TensorProto::INT64;
  for (const OnnxConstantInput& c : im.options->constant_inputs) {
    if (c.name != in.name()) continue;
    Const k;
    k.dtype = is_int ? DType::kInt64 : DType::kFloat32;
    k.dims = c.shape;
    if (is_int)
      k.i.assign(c.values.begin(), c.values.end());
    else
      k.f = std::make_shared<std::vector<float>>(c.values.begin(), c.values.end());
    im.set_const(in.name(), std::move(k));
    return absl::OkStatus();
  }
  if (!is_int && type != ::onnx::TensorProto::FLOAT) {
    return absl::InvalidArgumentError(
        absl::StrCat("ONNX graph input '", in.name(), "': element type ",
                     ::onnx::TensorProto::DataType_Name(::onnx::TensorProto::DataType(type)),
                     " not supported; supported: float, int64 (ids)"));
  }
  Shape shape;
  bool given = false;
  for (const auto& [name, s] : im.options->input_shapes) {
    if (name == in.name()) shape = s, given = true;
  }
  if (!given) {
    LMS_ASSIGN_OR_RETURN(shape, file_shape(in));
  }
  const TensorId t =
      im.graph.input(im.lms_name(in.name()), shape, is_int ? DType::kInt64 : DType::kFloat32);
  if (t == kNoTensor) {
    return absl::InvalidArgumentError(
        absl::StrCat("ONNX graph input '", in.name(), "': ", im.graph.status().message()));
  }
  im.set_tensor(in.name(), t);
  names.push_back(im.graph.tensor(t).name);
  return absl::OkStatus();
}

// Every node in file order; a fused node maps to one lms node or visits its
// body in its place (import_pass.h), so the walk knows no chains.
absl::Status visit_nodes(Importer& im, const ::onnx::GraphProto& g) {
  for (const ::onnx::NodeProto& n : g.node()) LMS_RETURN_IF_ERROR(visit_node(im, n));
  return absl::OkStatus();
}

absl::Status collect_outputs(Importer& im, const ::onnx::GraphProto& g, ImportedModel& out) {
  for (const auto& o : g.output()) {
    if (auto nc = im.not_computed.find(o.name()); nc != im.not_computed.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ONNX graph output '", o.name(), "': ", nc->second));
    }
    auto it = im.values.find(o.name());
    if (it == im.values.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ONNX graph output '", o.name(), "' is produced by no node"));
    }
    if (it->second.tensor == kNoTensor) {
      return absl::InvalidArgumentError(
          absl::StrCat("ONNX graph output '", o.name(),
                       "' is a constant for these input shapes; lms graphs "
                       "compute their outputs"));
    }
    const Tensor& t = im.graph.tensor(it->second.tensor);
    if (t.producer == kNoNode) {
      // An output that identities reduced to a graph input or initializer:
      // an lms session computes and fetches node outputs.
      return absl::InvalidArgumentError(absl::StrCat(
          "ONNX graph output '", o.name(), "' is '", t.name,
          "' unchanged (after removing identities); lms graphs compute their outputs"));
    }
    out.outputs.push_back(t.name);
  }
  return absl::OkStatus();
}

// Splits the initializers into the graph's parameters and the state.
void collect_initializers(Importer& im, const ::onnx::GraphProto& g, ImportedModel& out) {
  for (const auto& t : g.initializer()) {
    const Value& v = im.values.at(t.name());
    if (v.tensor != kNoTensor && im.graph.tensor(v.tensor).role == TensorRole::kParameter) {
      out.parameters.push_back(im.graph.tensor(v.tensor).name);
      continue;
    }
    ImportedState s;
    s.name = t.name();
    s.shape = v.constant->dims;
    s.dtype = v.constant->dtype;
    s.in_graph = v.tensor != kNoTensor;
    if (v.constant->dtype == DType::kFloat32) {
      s.values = v.constant->f;
    } else {
      s.values = std::make_shared<std::vector<float>>(v.constant->i.begin(), v.constant->i.end());
    }
    out.state.push_back(std::move(s));
  }
}

}  // namespace

absl::Status visit_node(Importer& im, const ::onnx::NodeProto& n) {
  im.visiting = &n;
  if (n.domain() == kFusedDomain) return map_node(im, n);
  if (!default_domain(n.domain())) {
    return Importer::error(n, absl::StrCat("domain '", n.domain(),
                                           "' is unknown to lms; "
                                           "supported: the default domain (ai.onnx)"));
  }
  if (n.output_size() == 0) return Importer::error(n, "has no output");
  LMS_ASSIGN_OR_RETURN(bool folded, fold_node(im, n));
  if (folded) return absl::OkStatus();
  return map_node(im, n);
}

absl::Status visit_body(Importer& im, const ::onnx::NodeProto& fused) {
  const ::onnx::GraphProto* body = fused_body(fused);
  if (body == nullptr) {
    return absl::InternalError(absl::StrCat("lms.fused node '", fused.name(), "' has no body"));
  }
  for (const ::onnx::NodeProto& n : body->node()) LMS_RETURN_IF_ERROR(visit_node(im, n));
  return absl::OkStatus();
}

namespace {

// The steps of one import, reading `path` into `model`; `stage` says which
// is running, for import_onnx_with's message when host memory runs out
// (`model` outlives them, so im.visiting stays valid for it).
absl::StatusOr<ImportedModel> import_steps(Importer& im, ::onnx::ModelProto& model,
                                           std::string_view path, const ImportPipeline& fusions,
                                           std::string& stage) {
  stage = "reading the file";
  LMS_RETURN_IF_ERROR(load_model(std::string(path), &model));
  LMS_RETURN_IF_ERROR(refuse_fused_domain(model.graph()));
  // Whether anything was fused does not matter here: the walk maps whatever
  // nodes the passes left.
  stage = "running the fusion passes";
  LMS_RETURN_IF_ERROR(fusions.run(*model.mutable_graph()).status());
  const ::onnx::GraphProto& g = model.graph();
  LMS_ASSIGN_OR_RETURN(im.opset, read_opset(model));
  LMS_RETURN_IF_ERROR(check_old_opset(g, im.opset));
  LMS_RETURN_IF_ERROR(choose_trainable(model, *im.options, im.trainable));
  stage = "decoding the initializers";
  LMS_RETURN_IF_ERROR(bind_initializers(im, g));
  ImportedModel out;
  stage = "binding the graph inputs";
  for (const auto& in : g.input()) {
    if (!im.values.contains(in.name())) LMS_RETURN_IF_ERROR(bind_input(im, in, out.inputs));
  }
  stage = "visiting the nodes";
  LMS_RETURN_IF_ERROR(visit_nodes(im, g));
  im.visiting = nullptr;
  stage = "collecting the outputs and initializers";
  LMS_RETURN_IF_ERROR(collect_outputs(im, g, out));
  collect_initializers(im, g, out);
  out.opset = im.opset;
  out.graph = std::move(im.graph);
  return out;
}

}  // namespace

// Note [Host memory at import]: folding computes constants for the given
// input shapes, and a model's initializers can be gigabytes, so an import
// can run out of host memory (a process under ulimit -v, a container's
// limit). std::bad_alloc, from any step, is caught here, at the one entry
// every import passes, and returned as ResourceExhausted naming the stage
// and the node being visited: nothing throws across the API.
absl::StatusOr<ImportedModel> import_onnx_with(std::string_view path,
                                               const OnnxImportOptions& options,
                                               const ImportPipeline& fusions) {
  std::string stage;
  ::onnx::ModelProto model;
  std::optional<Importer> im;
  try {
    im.emplace();
    im->options = &options;
    im->model_dir = std::filesystem::path(std::string(path)).parent_path().string();
    return import_steps(*im, model, path, fusions, stage);
  } catch (const std::bad_alloc&) {
    std::string where = stage.empty() ? "starting" : stage;
    if (im && im->visiting != nullptr) {
      const ::onnx::NodeProto& n = *im->visiting;
      const std::string& name = n.name().empty() && n.output_size() > 0 ? n.output(0) : n.name();
      where = absl::StrCat(where, ", at node '", name, "' (", n.op_type(), ")");
    }
    im.reset();  // what the import held is free again for the message
    model.Clear();
    return absl::ResourceExhaustedError(absl::StrCat(
        "ONNX import of '", to_absl(path), "': host memory ran out while ", where,
        " (std::bad_alloc); free host memory or raise the process's limit (ulimit -v), or "
        "import with smaller input shapes (OnnxImportOptions::input_shapes)"));
  }
}

}  // namespace onnx_import

absl::StatusOr<ImportedModel> import_onnx(std::string_view path, const OnnxImportOptions& options) {
  const std::string model_dir = std::filesystem::path(std::string(path)).parent_path().string();
  return onnx_import::import_onnx_with(path, options, onnx_import::import_pipeline(model_dir));
}

}  // namespace lms
