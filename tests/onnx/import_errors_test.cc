// What lms::import_onnx refuses, and that each refusal says why: the
// models come from tests/onnx/make_error_fixtures.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <variant>
#include <vector>

#include "lms/device.h"
#include "lms/onnx.h"
#include "lms/session.h"
#include "reference.h"

namespace lms {
namespace {

using onnx_test::data_dir;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string errors_dir() { return data_dir() + "/errors/"; }

absl::Status import_status(const std::string& path, const OnnxImportOptions& o = {}) {
  return import_onnx(path, o).status();
}

// A copy of the U-Net fixture cut to `keep` bytes, in the test's temp dir.
std::string truncated_copy(size_t keep, const std::string& name) {
  std::ifstream in(data_dir() + "/unet_small.onnx", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string path = testing::TempDir() + name;
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(keep));
  return path;
}

TEST(ImportErrors, MissingFileIsNotFound) {
  absl::Status s = import_status(errors_dir() + "no_such.onnx");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no_such.onnx' not found"));
}

TEST(ImportErrors, TruncatedAndCorruptFilesAreInvalid) {
  for (size_t keep : {size_t{10}, size_t{1000}, size_t{5001}}) {
    absl::Status s = import_status(truncated_copy(keep, "cut.onnx"));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << keep << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("truncated or corrupt")) << keep;
  }
  const std::string path = testing::TempDir() + "garbage.onnx";
  std::ofstream(path) << "this is not a protobuf \xff\xff\xff\xff";
  EXPECT_THAT(std::string(import_status(path).message()), HasSubstr("truncated or corrupt"));
}

TEST(ImportErrors, MissingExternalDataFileIsNamed) {
  absl::Status s = import_status(errors_dir() + "external_missing.onnx");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("initializer 'w'"), HasSubstr("missing_weights.bin' not found")));
}

TEST(ImportErrors, ExternalDataIsRead) {
  auto m = import_onnx(errors_dir() + "external_ok.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  const Tensor& w = m->graph.tensor(m->graph.find_tensor("w"));
  ASSERT_EQ(w.init.kind, Init::Kind::kValues);
  ASSERT_EQ(w.init.values->size(), 16u);
  EXPECT_EQ((*w.init.values)[5], 5.0f / 16);  // np.arange(16) / 16
  // No metadata: the default rule makes a Conv weight trainable.
  EXPECT_EQ(m->parameters, std::vector<std::string>{"w"});
}

// Gather of int64 ids from a constant [V,D] table is an embedding; the
// table (np.arange(15) / 10 as [5,3]) is trainable by the default rule.
TEST(ImportErrors, GatherFromATableIsAnEmbedding) {
  auto m = import_onnx(errors_dir() + "embedding.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->parameters, std::vector<std::string>{"table"});
  auto device = make_cpu_device({});
  ASSERT_TRUE(device.ok()) << device.status();
  SessionOptions o;
  o.fetches = m->outputs;
  auto s = Session::create(m->graph, **device, o);
  ASSERT_TRUE(s.ok()) << s.status();
  StepResult r;
  ASSERT_TRUE((*s)->run({}, {{"ids", {4, 0, 2, 2}}}, &r).ok());
  const std::vector<float> want = {1.2f, 1.3f, 1.4f, 0.0f, 0.1f, 0.2f,
                                   0.6f, 0.7f, 0.8f, 0.6f, 0.7f, 0.8f};
  ASSERT_EQ(r.fetched["y"].size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_FLOAT_EQ(r.fetched["y"][k], want[k]) << k;
}

TEST(ImportErrors, UnknownDomainAndOpset) {
  EXPECT_THAT(std::string(import_status(errors_dir() + "unknown_domain.onnx").message()),
              AllOf(HasSubstr("domain 'com.example'"), HasSubstr("opsets 13 to 17")));
  EXPECT_THAT(std::string(import_status(errors_dir() + "opset18.onnx").message()),
              HasSubstr("ONNX opset 18 not supported; supported: 13 to 17"));
}

TEST(ImportErrors, DefaultEvalExportIsRecognised) {
  absl::Status s = import_status(errors_dir() + "eval_export.onnx");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("(Conv)"), HasSubstr("default (eval) export"),
                    HasSubstr("TrainingMode.TRAINING"), HasSubstr("scripts/export_onnx.py")));
}

TEST(ImportErrors, UnsupportedOpsAndAttributesNameNodeOpAndWhatIsSupported) {
  struct Case {
    const char* file;
    std::vector<const char*> parts;
  };
  const Case cases[] = {
      {"grouped_deconv.onnx",
       {"ONNX node 'deconv1' (ConvTranspose)", "attribute group=2", "supported: 1"}},
      {"gemm_alpha.onnx", {"ONNX node 'fc1' (Gemm)", "attribute alpha=0.5", "supported: 1"}},
      {"gemm_trans_a.onnx", {"'fc1' (Gemm)", "attribute transA=1", "supported: 0"}},
      {"gemm_bias_rows.onnx",
       {"'fc1' (Gemm)", "input 2 (C) has shape [2,4]", "supported: [N] or [1,N] with N = 4"}},
      {"matmul_1d.onnx", {"'fc1' (MatMul)", "input 0 (A) has shape [3]", "supported: rank 2 to 4"}},
      {"avg_pool_ceil.onnx",
       {"'pool1' (AveragePool)", "ceil_mode with count_include_pad",
        "spatial dim 0 runs 1 past the padded input", "use count_include_pad = 0"}},
      {"clip_dynamic.onnx", {"'clip1' (Clip)", "min (input 1) must be a constant"}},
      {"pad_conv.onnx",
       {"'conv1' (Conv)", "the output of Pad 'pad1' is taken only as the padding of an "
                          "AveragePool"}},
      {"einsum_three.onnx",
       {"'einsum1' (Einsum)", "equation \"bij,bjk->bk\"", "a batched matrix product"}},
      {"slice_step.onnx",
       {"'slice1' (Slice)", "steps=2 from 0 along axis 1 of [2,8] not supported",
        "a step that divides the axis"}},
      {"reshape_dynamic.onnx", {"'reshape1' (Reshape)", "shape (input 1) must be a constant"}},
      {"asymmetric_pads.onnx", {"'conv1' (Conv)", "attribute pads=[0,0,1,1]", "symmetric"}},
      {"broadcast_add.onnx",
       {"'add1' (Add)", "broadcasting 'a' [2,1,4,4] with 'b' [1,3,1,1]",
        "one operand to the other's shape"}},
      {"dropout.onnx", {"'drop1' (Dropout)", "ratio 1 is outside [0, 1)"}},
      {"dropout_mask.onnx", {"graph output 'mask'", "the dropout mask", "not supported"}},
      {"symbolic_batch.onnx", {"input 'x'", "symbolic dimension 'N'", "input_shapes"}},
  };
  for (const Case& c : cases) {
    absl::Status s = import_status(errors_dir() + c.file);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.file << ": " << s;
    for (const char* part : c.parts) {
      EXPECT_THAT(std::string(s.message()), HasSubstr(part)) << c.file;
    }
  }
}

// Runs `m` on the CPU device with `feeds`; its first output.
std::vector<float> run_first_output(const ImportedModel& m, const Feeds& feeds) {
  auto device = make_cpu_device({});
  EXPECT_TRUE(device.ok()) << device.status();
  if (!device.ok()) return {};
  SessionOptions o;
  o.fetches = m.outputs;
  auto s = Session::create(m.graph, **device, o);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return {};
  StepResult r;
  EXPECT_TRUE((*s)->run(feeds, &r).ok());
  return r.fetched[m.outputs.at(0)];
}

// Einsums that are batched matrix products import as one matmul and give
// the products: "bid,bjd->bij" (q k^T, b read transposed) and
// "bdi,bjd->bji" (the output takes b's free letter first: b a, both read
// transposed or not as their letters say).
TEST(ImportErrors, EinsumBatchedProductsAreMatmuls) {
  struct Case {
    const char* file;
    bool a_transposed;  // a is [B,D,I] rather than [B,I,D]
    bool swapped;       // y[b,j,i] rather than y[b,i,j]
  };
  for (const Case& c : {Case{"einsum_qk.onnx", false, false},
                        Case{"einsum_swapped.onnx", true, true}}) {
    SCOPED_TRACE(c.file);
    auto m = import_onnx(errors_dir() + c.file);
    ASSERT_TRUE(m.ok()) << m.status();
    int matmuls = 0;
    for (NodeId n = 0; n < m->graph.num_nodes(); ++n) {
      matmuls += m->graph.node(n).op == OpKind::kMatMul;
    }
    EXPECT_EQ(matmuls, 1);
    constexpr int B = 2, I = 5, J = 4, D = 3;
    std::vector<float> a(B * I * D), b(B * J * D);
    for (size_t k = 0; k < a.size(); ++k) a[k] = float(k % 7) / 7 - 0.5f;
    for (size_t k = 0; k < b.size(); ++k) b[k] = float(k % 5) / 5 - 0.3f;
    const std::vector<float> y = run_first_output(*m, {{"a", a}, {"b", b}});
    ASSERT_EQ(y.size(), size_t{B * I * J});
    for (int n = 0; n < B; ++n) {
      for (int i = 0; i < I; ++i) {
        for (int j = 0; j < J; ++j) {
          double want = 0;
          for (int d = 0; d < D; ++d) {
            const float av = c.a_transposed ? a[(n * D + d) * I + i] : a[(n * I + i) * D + d];
            want += double(av) * b[(n * J + j) * D + d];
          }
          const float got = c.swapped ? y[(n * J + j) * I + i] : y[(n * I + i) * J + j];
          EXPECT_NEAR(got, want, 1e-5) << n << "," << i << "," << j;
        }
      }
    }
  }
}

// torch.onnx.export of nn.Linear(16, 2) is Gemm with transB = 1: linear on
// the parameters "weight" [2,16] and "bias" [2] under their PyTorch names.
TEST(ImportErrors, GemmOfNnLinearIsLinear) {
  auto m = import_onnx(errors_dir() + "linear.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->parameters, (std::vector<std::string>{"weight", "bias"}));
  const Graph& g = m->graph;
  const Tensor& w = g.tensor(g.find_tensor("weight"));
  const Tensor& b = g.tensor(g.find_tensor("bias"));
  ASSERT_EQ(w.shape, (Shape{2, 16}));
  ASSERT_EQ(w.init.kind, Init::Kind::kValues);
  ASSERT_EQ(b.init.kind, Init::Kind::kValues);
  std::vector<float> x(2 * 16);
  for (size_t k = 0; k < x.size(); ++k) x[k] = float(k % 7) / 7 - 0.5f;
  const std::vector<float> y = run_first_output(*m, {{"input", x}});
  ASSERT_EQ(y.size(), 4u);
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 2; ++j) {
      double want = (*b.init.values)[j];
      for (int c = 0; c < 16; ++c) want += double(x[n * 16 + c]) * (*w.init.values)[j * 16 + c];
      EXPECT_NEAR(y[n * 2 + j], want, 1e-5) << n << "," << j;
    }
  }
}

// x @ w.T (Transpose of the initializer w[4,3] = arange(12) / 12 into MatMul
// input B) is linear on w itself with trans_b = 1, no transposed copy, and
// the default rule makes w trainable through the Transpose.
TEST(ImportErrors, WeightSideTransposeBecomesTransB) {
  auto m = import_onnx(errors_dir() + "transpose_matmul.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->parameters, std::vector<std::string>{"w"});
  const Graph& g = m->graph;
  const Node& linear = g.node(g.tensor(g.find_tensor("y")).producer);
  EXPECT_EQ(linear.op, OpKind::kLinear);
  EXPECT_EQ(std::get<int64_t>(linear.attrs.at("trans_b")), 1);
  EXPECT_EQ(g.tensor(linear.inputs[1]).name, "w");
  EXPECT_EQ(g.find_tensor("wt"), kNoTensor);
  // y[n][j] = Σ_c x[n][c] w[j][c] with w[j][c] = (3j + c) / 12.
  const std::vector<float> y = run_first_output(*m, {{"x", {1, 0, 0, 0, 1, 2}}});
  const std::vector<float> want = {0,        3 / 12.f,  6 / 12.f,  9 / 12.f,
                                   5 / 12.f, 14 / 12.f, 23 / 12.f, 32 / 12.f};
  ASSERT_EQ(y.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_FLOAT_EQ(y[k], want[k]) << k;
}

// x + w.T (w[4,3] = arange(12) / 12, trainable by lms.trainable) reads a
// transpose node of the parameter w, not a transposed copy:
// y[i][j] = x[i][j] + w[j][i] = x[i][j] + (3j + i) / 12.
TEST(ImportErrors, OtherReadersOfATransposedParameterReadATransposeNode) {
  auto m = import_onnx(errors_dir() + "transpose_add.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->parameters, std::vector<std::string>{"w"});
  const Graph& g = m->graph;
  const Node& add = g.node(g.tensor(g.find_tensor("y")).producer);
  ASSERT_EQ(add.op, OpKind::kAdd);
  const Node& t = g.node(g.tensor(add.inputs[1]).producer);
  EXPECT_EQ(t.op, OpKind::kTranspose);
  EXPECT_EQ(std::get<std::vector<int64_t>>(t.attrs.at("perm")), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(g.tensor(t.inputs[0]).name, "w");
  EXPECT_EQ(g.tensor(t.inputs[0]).role, TensorRole::kParameter);
  std::vector<float> x(12);
  for (size_t k = 0; k < x.size(); ++k) x[k] = float(k);
  const std::vector<float> y = run_first_output(*m, {{"x", x}});
  ASSERT_EQ(y.size(), 12u);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      EXPECT_FLOAT_EQ(y[i * 4 + j], x[i * 4 + j] + float(3 * j + i) / 12) << i << "," << j;
    }
  }
}

// Gemm(x, Transpose(w), c) with transB = 1 is linear on w itself with
// trans_b = 0 (x[2,4] · w[4,3], w[c][k] = (3c + k) / 12), and its bias is
// c[1,3] = [0.5, 1, 1.5] reshaped to [3], so both stay trainable as they are.
TEST(ImportErrors, TransposedGemmWeightAndRowBias) {
  auto m = import_onnx(errors_dir() + "transpose_gemm.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->parameters, (std::vector<std::string>{"w", "c"}));
  const Graph& g = m->graph;
  const Node& linear = g.node(g.tensor(g.find_tensor("y")).producer);
  EXPECT_EQ(linear.op, OpKind::kLinear);
  EXPECT_EQ(std::get<int64_t>(linear.attrs.at("trans_b")), 0);
  ASSERT_EQ(linear.inputs.size(), 3u);
  EXPECT_EQ(g.tensor(linear.inputs[1]).name, "w");
  EXPECT_EQ(g.tensor(linear.inputs[2]).shape, (Shape{3}));
  EXPECT_EQ(g.node(g.tensor(linear.inputs[2]).producer).op, OpKind::kReshape);
  const std::vector<float> y = run_first_output(*m, {{"x", {1, 0, 0, 0, 0, 1, 0, 2}}});
  const std::vector<float> want = {
      0.5f, 1 / 12.f + 1, 2 / 12.f + 1.5f, 21 / 12.f + 0.5f, 24 / 12.f + 1, 27 / 12.f + 1.5f};
  ASSERT_EQ(y.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_FLOAT_EQ(y[k], want[k]) << k;
}

// x @ Transpose(Transpose(Identity(w))) reads the initializer w itself
// (trainable by the default rule through all three), not a copy:
// y[n][k] = Σ_c x[n][c] w[c][k] with w[c][k] = (4c + k) / 12.
TEST(ImportErrors, IdentitiesAndDoubleTransposeReadTheInitializer) {
  auto m = import_onnx(errors_dir() + "double_transpose.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->parameters, std::vector<std::string>{"w"});
  const Graph& g = m->graph;
  const Node& linear = g.node(g.tensor(g.find_tensor("y")).producer);
  EXPECT_EQ(std::get<int64_t>(linear.attrs.at("trans_b")), 0);
  EXPECT_EQ(g.tensor(linear.inputs[1]).name, "w");
  EXPECT_EQ(g.tensor(linear.inputs[1]).role, TensorRole::kParameter);
  const std::vector<float> y = run_first_output(*m, {{"x", {1, 0, 0, 0, 1, 1}}});
  const std::vector<float> want = {0,         1 / 12.f,  2 / 12.f,  3 / 12.f,
                                   12 / 12.f, 14 / 12.f, 16 / 12.f, 18 / 12.f};
  ASSERT_EQ(y.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_FLOAT_EQ(y[k], want[k]) << k;
}

// Clip at opset 6 takes min -1 and max 2 as attributes.
TEST(ImportErrors, ClipSixReadsItsAttributes) {
  auto m = import_onnx(errors_dir() + "clip6.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->opset, 6);
  const std::vector<float> y = run_first_output(*m, {{"x", {-3, -1, 0.5f, 1.5f, 2, 7}}});
  EXPECT_EQ(y, (std::vector<float>{-1, -1, 0.5f, 1.5f, 2, 2}));
}

TEST(ImportErrors, SymbolicBatchIsReadWithAGivenShape) {
  auto m = import_onnx(errors_dir() + "symbolic_batch.onnx", {.input_shapes = {{"x", {7, 3}}}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph.tensor(m->graph.find_tensor("y")).shape, (Shape{7, 3}));
}

TEST(ImportErrors, TrainableNameThatIsNoInitializer) {
  absl::Status s = import_status(data_dir() + "/unet_small.onnx",
                                 {.trainable = std::vector<std::string>{"enc1.0.wieght"}});
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("trainable parameter 'enc1.0.wieght' is not an initializer"));
}

}  // namespace
}  // namespace lms
