#include "onnx_model.h"

#include <charconv>
#include <random>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "lms/graph.h"
#include "lms/status.h"
#include "lms/training.h"

#if LMS_BENCH_HAVE_ONNX
#include "lms/loss.h"
#include "lms/onnx.h"
#endif

namespace lms::bench {
namespace {

absl::StatusOr<int64_t> parse_positive_int(const std::string& text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 1) {
    return absl::InvalidArgumentError("not a positive integer");
  }
  return v;
}

#if LMS_BENCH_HAVE_ONNX
// One generator per (seed, step, stream): a step's feeds never depend on the
// steps drawn before it, and inputs and labels are drawn independently.
std::mt19937_64 step_rng(uint64_t seed, int64_t step, uint64_t stream) {
  std::seed_seq seq{seed, static_cast<uint64_t>(step), stream, uint64_t{0x6f6e6e78}};
  return std::mt19937_64(seq);
}

// The input's shape with the swept dimension (B or T) set to `size`.
Shape with_batch(const OnnxInput& in, int64_t size) {
  Shape s = in.shape;
  s[static_cast<size_t>(in.batch_axis)] = size;
  return s;
}

int64_t elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// The imported forward graph at `batch` with the loss attached.
struct Attached {
  Graph graph;
  TensorId loss = kNoTensor;
  Shape output_shape;
  DType input_dtype = DType::kFloat32;
  int64_t vocab = 0;  // an int64 input: the rows of the embedding reading it
};

absl::StatusOr<Attached> import_with_loss(const OnnxBenchModel& m, int64_t batch) {
  LMS_ASSIGN_OR_RETURN(
      ImportedModel im,
      import_onnx(m.path, {.input_shapes = {{m.input.name, with_batch(m.input, batch)}}}));
  bool fed = false;
  for (const std::string& name : im.inputs) fed = fed || name == m.input.name;
  if (!fed || im.inputs.size() != 1) {
    std::string inputs;
    for (const std::string& name : im.inputs) inputs += (inputs.empty() ? "" : ", ") + name;
    return absl::InvalidArgumentError(
        fmt::format("--input {}: the model's graph inputs are [{}]; lms-bench onnx feeds a model "
                    "with one input, named by --input",
                    m.input.name, inputs));
  }
  if (im.outputs.empty()) {
    return absl::InvalidArgumentError(fmt::format("{}: the model has no output", m.path));
  }
  Attached a{std::move(im.graph), kNoTensor, {}};
  const TensorId out = a.graph.find_tensor(im.outputs[0]);
  a.output_shape = a.graph.tensor(out).shape;
  const TensorId input = a.graph.find_tensor(m.input.name);
  a.input_dtype = a.graph.tensor(input).dtype;
  if (a.input_dtype == DType::kInt64) {
    // Token ids: drawn in [0, V) of the embedding table that reads them.
    for (int32_t k = 0; k < a.graph.num_nodes(); ++k) {
      const Node& n = a.graph.node(k);
      if (n.op == OpKind::kEmbedding && n.inputs[0] == input) {
        a.vocab = a.graph.tensor(n.inputs[1]).shape[0];
      }
    }
    if (a.vocab == 0) {
      return absl::InvalidArgumentError(
          fmt::format("--input {}: an int64 input is fed with token ids, but no embedding of "
                      "the model reads '{}' to give their range",
                      m.input.name, m.input.name));
    }
  }
  Loss loss = Mse{.target = "target"};
  if (m.loss.kind == OnnxLoss::Kind::kCrossEntropy) {
    const bool rows = a.output_shape.size() == 2;
    if (a.output_shape.size() < 2 || a.output_shape.back() != m.loss.classes) {
      return absl::InvalidArgumentError(fmt::format(
          "--loss cross-entropy:{}: the model's output '{}' has shape [{}]; cross-entropy needs "
          "logits [N, {}], or [..., {}] with the classes on the last axis",
          m.loss.classes, im.outputs[0], fmt::join(a.output_shape, ","), m.loss.classes,
          m.loss.classes));
    }
    loss = CrossEntropy{.labels = "labels", .classes_last = !rows};
  }
  LMS_ASSIGN_OR_RETURN(a.loss, attach_loss(a.graph, out, loss));
  return a;
}
#endif

}  // namespace

absl::StatusOr<OnnxInput> parse_onnx_input(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        fmt::format("--input '{}': {}; expected NAME:DIMS with one dimension B, the batch the "
                    "sweep sets (e.g. input:B,3,224,224), or T, the tokens of a sequence the "
                    "sweep sets at a fixed batch (e.g. ids:4,T)",
                    text, why));
  };
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("no NAME:");
  OnnxInput in;
  in.name = text.substr(0, colon);
  int batch_axes = 0;
  for (size_t begin = colon + 1; begin <= text.size();) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string dim = text.substr(begin, end - begin);
    if (dim == "B" || dim == "T") {
      in.batch_axis = static_cast<int>(in.shape.size());
      in.context = dim == "T";
      in.shape.push_back(1);
      ++batch_axes;
    } else {
      absl::StatusOr<int64_t> d = parse_positive_int(dim);
      if (!d.ok())
        return bad(fmt::format("dimension '{}' is neither B, T nor a positive integer", dim));
      in.shape.push_back(*d);
    }
    begin = end + 1;
  }
  if (batch_axes != 1) return bad(fmt::format("{} dimensions are B or T", batch_axes));
  return in;
}

absl::StatusOr<OnnxLoss> parse_onnx_loss(const std::string& text) {
  if (text == "mse") return OnnxLoss{.kind = OnnxLoss::Kind::kMse};
  const std::string prefix = "cross-entropy:";
  if (text.rfind(prefix, 0) == 0) {
    absl::StatusOr<int64_t> classes = parse_positive_int(text.substr(prefix.size()));
    if (classes.ok() && *classes >= 2) {
      return OnnxLoss{.kind = OnnxLoss::Kind::kCrossEntropy, .classes = *classes};
    }
  }
  return absl::InvalidArgumentError(fmt::format(
      "--loss '{}': expected cross-entropy:C (C >= 2 classes; the output must be logits [N, C]) "
      "or mse",
      text));
}

absl::StatusOr<ModelFactory> onnx_factory(const OnnxBenchModel& m) {
#if LMS_BENCH_HAVE_ONNX
  // Read once at sizes 1 and 2, so a bad file or flag fails before the
  // sweep, and the output dimensions that follow the swept one are known.
  LMS_ASSIGN_OR_RETURN(Attached probe, import_with_loss(m, 1));
  LMS_ASSIGN_OR_RETURN(Attached probe_2, import_with_loss(m, 2));
  if (probe.output_shape.size() != probe_2.output_shape.size()) {
    return absl::InvalidArgumentError(fmt::format(
        "--input {}: the model's output changes rank with the swept dimension", m.input.name));
  }
  ModelFactory f;
  f.model = "onnx";
  f.size_label = m.input.context ? "context" : "batch";
  f.max_search_size = 1 << 16;
  if (m.input.context) {
    // The longest context the model takes (a position table bounds it): the
    // search stops there rather than fail on an import it cannot make.
    auto imports = [&](int64_t t) { return import_with_loss(m, t).ok(); };
    int64_t good = 2, bad = 0;
    while (bad == 0 && good < f.max_search_size) {
      if (!imports(2 * good))
        bad = 2 * good;
      else
        good *= 2;
    }
    while (bad > good + 1) {
      const int64_t mid = good + (bad - good) / 2;
      (imports(mid) ? good : bad) = mid;
    }
    f.max_search_size = good;
  }
  f.data_note = fmt::format("{}, random inputs{}", m.path,
                            m.loss.kind == OnnxLoss::Kind::kCrossEntropy ? " and labels" : "") +
                precision_note(m.precision);
  f.build = [m](int64_t batch) -> absl::StatusOr<Graph> {
    LMS_ASSIGN_OR_RETURN(Attached a, import_with_loss(m, batch));
    return autocast_training_graph(a.graph, a.loss, m.precision,
                                   Sgd{.lr = m.lr, .momentum = m.momentum});
  };
  // The output at `size`: the dimensions that differ between sizes 1 and 2
  // scale with the swept one (a batch, or a sequence's tokens).
  const Shape output_1 = probe.output_shape, output_2 = probe_2.output_shape;
  auto output_at = [output_1, output_2](int64_t size) {
    Shape out = output_1;
    for (size_t k = 0; k < out.size(); ++k) {
      if (output_2[k] != output_1[k]) out[k] *= size;
    }
    return out;
  };
  const bool ids = probe.input_dtype == DType::kInt64;
  const int64_t vocab = probe.vocab;
  f.feeds = [m, output_at, ids](int64_t size, int64_t step) -> absl::StatusOr<Feeds> {
    std::mt19937_64 rng = step_rng(m.seed, step, 0);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Feeds feeds;
    if (!ids) {
      std::vector<float> x(static_cast<size_t>(elements(with_batch(m.input, size))));
      for (float& v : x) v = normal(rng);
      feeds.emplace(m.input.name, std::move(x));
    }
    if (m.loss.kind == OnnxLoss::Kind::kMse) {
      std::vector<float> target(static_cast<size_t>(elements(output_at(size))));
      for (float& v : target) v = normal(rng);
      feeds.emplace("target", std::move(target));
    }
    return feeds;
  };
  if (m.loss.kind == OnnxLoss::Kind::kCrossEntropy || ids) {
    f.int64_feeds = [m, output_at, ids, vocab](int64_t size,
                                               int64_t step) -> absl::StatusOr<Int64Feeds> {
      Int64Feeds feeds;
      if (ids) {
        std::mt19937_64 rng = step_rng(m.seed, step, 2);
        std::uniform_int_distribution<int64_t> token(0, vocab - 1);
        std::vector<int64_t> x(static_cast<size_t>(elements(with_batch(m.input, size))));
        for (int64_t& v : x) v = token(rng);
        feeds.emplace(m.input.name, std::move(x));
      }
      if (m.loss.kind == OnnxLoss::Kind::kCrossEntropy) {
        std::mt19937_64 rng = step_rng(m.seed, step, 1);
        std::uniform_int_distribution<int64_t> cls(0, m.loss.classes - 1);
        // One label per row of the logits: every position but the classes.
        std::vector<int64_t> labels(
            static_cast<size_t>(elements(output_at(size)) / m.loss.classes));
        for (int64_t& v : labels) v = cls(rng);
        feeds.emplace("labels", std::move(labels));
      }
      return feeds;
    };
  }
  return f;
#else
  (void)m;
  return absl::UnimplementedError(
      "lms-bench onnx: this build has no ONNX importer (install libonnx-dev and libprotobuf-dev, "
      "scripts/install_deps.sh, and configure again)");
#endif
}

}  // namespace lms::bench
