// ONNX's node conformance cases (Debian: libonnx-testdata) run through
// lms::import_onnx and the CPU device. Every case whose ops are all ops the
// importer knows is tried: first as it is, then with the inputs after the
// first bound as constants (OnnxImportOptions::constant_inputs, for Slice
// bounds, Resize scales, Pad pads and the like that the cases feed), then
// both again with OnnxImportOptions::eval_mode (inference-mode
// BatchNormalization, which lms evaluates with its running statistics). An
// accepted case must match the expected outputs within rtol 1e-3, atol 1e-7;
// a training-mode Dropout, whose mask comes from lms's generator, must
// give 0 or x / (1 - ratio) per element;
// a refused one must be refused with the importer's InvalidArgument (its
// messages start "ONNX node '<name>' (<op>)", "ONNX opset", "ONNX graph ..."). Prints the table op
// / cases / passed / refused.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <variant>

#include "lms/device.h"
#include "lms/onnx.h"
#include "lms/session.h"

namespace lms {
namespace {

namespace fs = std::filesystem;
constexpr double kRtol = 1e-3;
constexpr double kAtol = 1e-7;
const char* kCases = "/usr/share/libonnx-testdata/data/node";

// The ops lms::import_onnx maps, folds or removes.
const std::set<std::string>& known_ops() {
  static const std::set<std::string> ops = {"Add",
                                            "AveragePool",
                                            "BatchNormalization",
                                            "Cast",
                                            "Clip",
                                            "Concat",
                                            "Constant",
                                            "ConstantOfShape",
                                            "Conv",
                                            "ConvTranspose",
                                            "Div",
                                            "Dropout",
                                            "Einsum",
                                            "Equal",
                                            "Expand",
                                            "Flatten",
                                            "Gather",
                                            "Gemm",
                                            "GlobalAveragePool",
                                            "HardSigmoid",
                                            "HardSwish",
                                            "Identity",
                                            "InstanceNormalization",
                                            "LayerNormalization",
                                            "LeakyRelu",
                                            "MatMul",
                                            "MaxPool",
                                            "Mul",
                                            "Pad",
                                            "ReduceMean",
                                            "Relu",
                                            "Reshape",
                                            "Resize",
                                            "Shape",
                                            "Sigmoid",
                                            "Slice",
                                            "Softmax",
                                            "Split",
                                            "Squeeze",
                                            "Sub",
                                            "Tanh",
                                            "Transpose",
                                            "Unsqueeze",
                                            "Where"};
  return ops;
}

struct HostTensor {
  Shape dims;
  bool is_int = false;
  std::vector<double> v;
};

template <typename T>
void append_raw(const std::string& raw, std::vector<double>& out) {
  for (size_t k = 0; k + sizeof(T) <= raw.size(); k += sizeof(T)) {
    T x;
    std::memcpy(&x, raw.data() + k, sizeof(T));
    out.push_back(double(x));
  }
}

HostTensor read_pb(const fs::path& path) {
  onnx::TensorProto t;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(t.ParseFromIstream(&in)) << path;
  HostTensor h;
  h.dims.assign(t.dims().begin(), t.dims().end());
  using TP = onnx::TensorProto;
  h.is_int = t.data_type() != TP::FLOAT && t.data_type() != TP::DOUBLE;
  const std::string& raw = t.raw_data();
  switch (t.data_type()) {
    case TP::FLOAT:
      append_raw<float>(raw, h.v);
      for (float x : t.float_data()) h.v.push_back(x);
      break;
    case TP::DOUBLE:
      append_raw<double>(raw, h.v);
      for (double x : t.double_data()) h.v.push_back(x);
      break;
    case TP::INT64:
      append_raw<int64_t>(raw, h.v);
      for (int64_t x : t.int64_data()) h.v.push_back(double(x));
      break;
    case TP::INT32:
      append_raw<int32_t>(raw, h.v);
      for (int32_t x : t.int32_data()) h.v.push_back(x);
      break;
    default:
      append_raw<uint8_t>(raw, h.v);
      for (int32_t x : t.int32_data()) h.v.push_back(x);
      break;
  }
  return h;
}

struct Case {
  std::string name;
  std::string op;  // the op of the last node
  onnx::ModelProto model;
  std::vector<HostTensor> inputs, outputs;
};

bool load_case(const fs::path& dir, Case& c) {
  std::ifstream in(dir / "model.onnx", std::ios::binary);
  if (!c.model.ParseFromIstream(&in) || c.model.graph().node_size() == 0) return false;
  for (const auto& n : c.model.graph().node()) {
    if (!known_ops().contains(n.op_type())) return false;
  }
  c.name = dir.filename().string();
  c.op = c.model.graph().node().rbegin()->op_type();
  const fs::path data = dir / "test_data_set_0";
  for (int k = 0; fs::exists(data / ("input_" + std::to_string(k) + ".pb")); ++k) {
    c.inputs.push_back(read_pb(data / ("input_" + std::to_string(k) + ".pb")));
  }
  for (int k = 0; fs::exists(data / ("output_" + std::to_string(k) + ".pb")); ++k) {
    c.outputs.push_back(read_pb(data / ("output_" + std::to_string(k) + ".pb")));
  }
  return true;
}

// The graph inputs that are not initializers, in order (the .pb order).
std::vector<std::string> fed_names(const onnx::GraphProto& g) {
  std::set<std::string> inits;
  for (const auto& t : g.initializer()) inits.insert(t.name());
  std::vector<std::string> out;
  for (const auto& in : g.input()) {
    if (!inits.contains(in.name())) out.push_back(in.name());
  }
  return out;
}

OnnxImportOptions options_for(const Case& c, bool bind_rest, bool eval_mode) {
  OnnxImportOptions o;
  o.eval_mode = eval_mode;
  const auto names = fed_names(c.model.graph());
  for (size_t k = 0; k < names.size() && k < c.inputs.size(); ++k) {
    if (bind_rest && k > 0) {
      o.constant_inputs.push_back({names[k], c.inputs[k].dims, c.inputs[k].v});
    } else {
      o.input_shapes.push_back({names[k], c.inputs[k].dims});
    }
  }
  return o;
}

enum class Outcome { kPassed, kRefused, kMismatch };

// 1 / (1 - ratio) of the graph's one training-mode dropout, if it has one:
// its mask comes from lms's generator, not ONNX's, so its values are not
// the expected ones.
std::optional<double> dropout_scale(const Graph& g) {
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (g.node(id).op == OpKind::kDropout) {
      return 1.0 / (1.0 - std::get<double>(g.node(id).attrs.at("ratio")));
    }
  }
  return std::nullopt;
}

// A dropout case (y = Dropout(x) in training mode): the structure, not the
// values: every element of y is 0 or x / (1 - ratio).
std::string check_dropout_structure(const Case& c, const ImportedModel& m, const StepResult& r,
                                    double scale) {
  if (m.outputs.size() != 1 || c.inputs.empty()) return "dropout case of another form";
  const std::vector<float>& got = r.fetched.at(m.outputs[0]);
  const std::vector<double>& x = c.inputs[0].v;
  if (got.size() != x.size()) return "output size " + std::to_string(got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double kept = x[i] * scale;
    if (got[i] != 0.0f && !(std::fabs(got[i] - kept) <= kAtol + kRtol * std::fabs(kept))) {
      return "dropout output[" + std::to_string(i) + "] = " + std::to_string(got[i]) +
             ", neither 0 nor " + std::to_string(kept);
    }
  }
  return "";
}

// Runs an imported case; a message on mismatch.
std::string run_case(const Case& c, const ImportedModel& m, const OnnxImportOptions& o) {
  auto device = make_cpu_device({});
  if (!device.ok()) return device.status().ToString();
  SessionOptions so;
  so.fetches = m.outputs;
  auto s = Session::create(m.graph, **device, so);
  if (!s.ok()) return "session: " + s.status().ToString();
  Feeds feeds;
  Int64Feeds ids;
  const auto names = fed_names(c.model.graph());
  for (size_t k = 0; k < names.size(); ++k) {
    const bool bound = std::any_of(o.constant_inputs.begin(), o.constant_inputs.end(),
                                   [&](const OnnxConstantInput& b) { return b.name == names[k]; });
    if (bound) continue;
    const HostTensor& h = c.inputs[k];
    if (h.is_int) {
      ids[names[k]].assign(h.v.begin(), h.v.end());
    } else {
      feeds[names[k]].assign(h.v.begin(), h.v.end());
    }
  }
  StepResult r;
  if (absl::Status st = (*s)->run(feeds, ids, &r); !st.ok()) return "run: " + st.ToString();
  if (m.outputs.size() != c.outputs.size()) return "output count";
  if (auto scale = dropout_scale(m.graph)) return check_dropout_structure(c, m, r, *scale);
  for (size_t k = 0; k < m.outputs.size(); ++k) {
    const std::vector<float>& got = r.fetched[m.outputs[k]];
    const std::vector<double>& want = c.outputs[k].v;
    if (got.size() != want.size()) return "output size " + std::to_string(got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      if (!(std::fabs(got[i] - want[i]) <= kAtol + kRtol * std::fabs(want[i]))) {
        return "output " + std::to_string(k) + "[" + std::to_string(i) +
               "] = " + std::to_string(got[i]) + ", expected " + std::to_string(want[i]);
      }
    }
  }
  return "";
}

struct Row {
  int cases = 0, passed = 0, refused = 0;
};

TEST(OnnxConformance, EveryKnownOpCaseMatchesOrIsRefusedClearly) {
  if (!fs::exists(kCases)) GTEST_SKIP() << kCases << " missing: install libonnx-testdata";
  std::vector<fs::path> dirs(fs::directory_iterator(kCases), fs::directory_iterator{});
  std::sort(dirs.begin(), dirs.end());
  std::map<std::string, Row> table;
  for (const fs::path& dir : dirs) {
    Case c;
    if (!load_case(dir, c)) continue;
    const std::string path = (dir / "model.onnx").string();
    Row& row = table[c.op];
    ++row.cases;
    absl::Status refusal;
    bool done = false;
    for (int attempt = 0; attempt < 4 && !done; ++attempt) {
      const OnnxImportOptions o = options_for(c, attempt % 2 == 1, attempt >= 2);
      auto m = import_onnx(path, o);
      if (!m.ok()) {
        refusal = m.status();
        continue;
      }
      const std::string err = run_case(c, *m, o);
      EXPECT_EQ(err, "") << c.name;
      row.passed += err.empty();
      done = true;
      break;
    }
    if (done) continue;
    ++row.refused;
    std::printf("  refused %s: %.150s\n", c.name.c_str(), std::string(refusal.message()).c_str());
    EXPECT_EQ(refusal.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << refusal;
    const std::string msg(refusal.message());
    EXPECT_EQ(msg.rfind("ONNX ", 0), 0u) << c.name << ": " << msg;  // the importer's own
  }
  std::printf("%-24s %6s %7s %8s\n", "op", "cases", "passed", "refused");
  Row total;
  for (const auto& [op, row] : table) {
    std::printf("%-24s %6d %7d %8d\n", op.c_str(), row.cases, row.passed, row.refused);
    total.cases += row.cases, total.passed += row.passed, total.refused += row.refused;
  }
  std::printf("%-24s %6d %7d %8d\n", "total", total.cases, total.passed, total.refused);
  EXPECT_GT(total.passed, 0);
}

// ONNX's MatMul cases, rank 2 (linear) and batched rank 3 and 4 (matmul),
// import with both operands fed and match the expected outputs.
TEST(OnnxConformance, MatMulCasesPass) {
  if (!fs::exists(kCases)) GTEST_SKIP() << kCases << " missing: install libonnx-testdata";
  for (const char* name : {"test_matmul_2d", "test_matmul_3d", "test_matmul_4d"}) {
    const fs::path dir = fs::path(kCases) / name;
    Case c;
    ASSERT_TRUE(load_case(dir, c)) << name;
    const OnnxImportOptions o = options_for(c, false, false);
    auto m = import_onnx((dir / "model.onnx").string(), o);
    ASSERT_TRUE(m.ok()) << name << ": " << m.status();
    EXPECT_EQ(run_case(c, *m, o), "") << name;
  }
}

}  // namespace
}  // namespace lms
