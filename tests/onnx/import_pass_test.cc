// The importer's pass list (import_pass.h, Note [ONNX import]): the passes
// run in the declared order; each reports changed only on a graph holding
// its pattern, and leaves any other graph as it was; a fused chain whose
// constants decline imports as its separate nodes; a pass that fails, or
// leaves the nodes out of order, fails the import naming the pass; a causal
// mask from positions and nn.MultiheadAttention's scaled-q rank-3 form join
// the attention chain. The
// graphs are ONNX's text format, parsed by ONNX's own parser.
#include "onnx/import_pass.h"

#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "lms/graph.h"
#include "lms/onnx.h"
#include "lms/strings.h"
#include "onnx/importer.h"

namespace lms::onnx_import {
namespace {

using ::onnx::GraphProto;
using ::onnx::ModelProto;
using ::onnx::NodeProto;

constexpr const char* kHeader = R"(<ir_version: 8, opset_import: ["" : 14]>)";

// PyTorch's opset-14 layer norm decomposition over the last axis.
constexpr const char* kLayerNorm = R"(
ln (float[2,4] x) => (float[2,4] y)
<float[4] w = {1,1,1,1}, float[4] b = {0,0,0,0}, float two = {2.0}, float eps = {1e-5}>
{
  mean = ReduceMean <axes = [-1]> (x)
  d = Sub(x, mean)
  sq = Pow(d, two)
  var = ReduceMean <axes = [-1]> (sq)
  ve = Add(var, eps)
  sd = Sqrt(ve)
  nrm = Div(d, sd)
  sc = Mul(nrm, w)
  y = Add(sc, b)
})";

// The exact GELU as torch.onnx.export writes it; HALF is 0.5 or not.
std::string gelu(const std::string& half = "0.5") {
  return absl::StrCat(R"(
gelu (float[2,4] x) => (float[2,4] y)
{
  s = Constant <value = float {1.4142135}> ()
  d = Div(x, s)
  e = Erf(d)
  one = Constant <value = float {1.0}> ()
  a = Add(e, one)
  m = Mul(x, a)
  h = Constant <value = float {)",
                      half, R"(}> ()
  y = Mul(m, h)
})");
}

// softmax(q @ k^T * SCALE) @ v; with K_INIT, k is an initializer.
std::string attention(const std::string& scale = "0.5", bool k_init = false) {
  const std::string k = k_init ? "" : ", float[1,2,3,4] k";
  const std::string init =
      k_init
          ? "<float[1,2,3,4] k = {0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23}>"
          : "";
  return absl::StrCat("attn (float[1,2,3,4] q", k, R"(, float[1,2,3,4] v) => (float[1,2,3,4] y)
)",
                      init, R"(
{
  kt = Transpose <perm = [0,1,3,2]> (k)
  s = MatMul(q, kt)
  scale = Constant <value = float {)",
                      scale, R"(}> ()
  c = Mul(s, scale)
  p = Softmax <axis = -1> (c)
  y = MatMul(p, v)
})");
}

// softmax(q @ k^T * 0.5 + mask) @ v with the mask from the positions
// i = arange(3) (Note [Causal mask from positions]): (i[None,:] CMP
// i[:,None]).float() * -1e9, CMP Greater (causal) or Less (masking below
// the diagonal).
std::string positions_attention(const std::string& cmp = "Greater") {
  return absl::StrCat(R"(
attn (float[1,2,3,4] q, float[1,2,3,4] k, float[1,2,3,4] v) => (float[1,2,3,4] y)
{
  zero = Constant <value = int64 {0}> ()
  three = Constant <value = int64 {3}> ()
  step = Constant <value = int64 {1}> ()
  i = Range(zero, three, step)
  ax0 = Constant <value = int64[1] {0}> ()
  row = Unsqueeze(i, ax0)
  ax1 = Constant <value = int64[1] {1}> ()
  col = Unsqueeze(i, ax1)
  after = )",
                      cmp, R"((row, col)
  after_f = Cast <to = 1> (after)
  big = Constant <value = float {-1e9}> ()
  mask = Mul(after_f, big)
  kt = Transpose <perm = [0,1,3,2]> (k)
  s = MatMul(q, kt)
  scale = Constant <value = float {0.5}> ()
  c = Mul(s, scale)
  m = Add(c, mask)
  p = Softmax <axis = -1> (m)
  y = MatMul(p, v)
})");
}

// nn.MultiheadAttention's form: q [N*H,T,D] scaled first, k read from
// x [S,N*H,D] through perm [1,2,0].
constexpr const char* kScaledQ = R"(
mha (float[4,3,8] q, float[3,4,8] x, float[4,3,8] v) => (float[4,3,8] y)
{
  r = Constant <value = float {2.828427}> ()
  qs = Div(q, r)
  kt = Transpose <perm = [1,2,0]> (x)
  s = MatMul(qs, kt)
  p = Softmax <axis = -1> (s)
  y = MatMul(p, v)
})";

constexpr const char* kRelu = R"(
relu (float[2,4] x) => (float[2,4] y)
{
  y = Relu(x)
})";

ModelProto parse(const std::string& graph) {
  ModelProto m;
  const std::string text = absl::StrCat(kHeader, graph);
  const auto status = ::onnx::OnnxParser::Parse(m, text.c_str());
  EXPECT_TRUE(status.IsOK()) << status.ErrorMessage() << "\n" << text;
  return m;
}

// One line per node, "y = lms.fused.Gelu(x, s, one, h)".
std::string summary(const GraphProto& g) {
  std::vector<std::string> lines;
  for (const NodeProto& n : g.node()) {
    const std::string op = n.domain().empty() ? n.op_type() : n.domain() + "." + n.op_type();
    lines.push_back(absl::StrCat(absl::StrJoin(n.output(), ", "), " = ", op, "(",
                                 absl::StrJoin(n.input(), ", "), ")"));
  }
  return absl::StrJoin(lines, "\n");
}

std::string write(const ModelProto& m, const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "import_pass_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream out(path, std::ios::binary);
  EXPECT_TRUE(m.SerializeToOstream(&out));
  return path;
}

std::vector<std::string> op_names(const Graph& g) {
  std::vector<std::string> ops;
  for (NodeId id = 0; id < g.num_nodes(); ++id) ops.push_back(op_name(g.node(id).op));
  return ops;
}

TEST(ImportPipelineTest, RunsTheFusionsInTheDeclaredOrder) {
  const ImportPipeline p = import_pipeline("");
  std::vector<std::string> names;
  for (const auto& pass : p.passes()) names.emplace_back(pass->name());
  EXPECT_EQ(names, (std::vector<std::string>{"fuse_layer_norm", "fuse_gelu", "fuse_attention"}));
}

// Each pass on each model: changed exactly on its own pattern, the graph
// unchanged otherwise, and a second run on its own result finds nothing.
TEST(ImportPipelineTest, EachPassReportsChangedOnlyOnItsPattern) {
  const std::vector<std::pair<std::string, std::string>> models = {{"fuse_layer_norm", kLayerNorm},
                                                                   {"fuse_gelu", gelu()},
                                                                   {"fuse_attention", attention()},
                                                                   {"", kRelu}};
  const ImportPipeline p = import_pipeline("");
  for (const auto& [owner, text] : models) {
    const GraphProto original = parse(text).graph();
    for (const auto& pass : p.passes()) {
      SCOPED_TRACE(absl::StrCat(to_absl(pass->name()), " on the model of '", owner, "'"));
      GraphProto g = original;
      absl::StatusOr<bool> changed = pass->run(g);
      ASSERT_TRUE(changed.ok()) << changed.status();
      EXPECT_EQ(*changed, pass->name() == owner);
      if (!*changed) {
        EXPECT_EQ(g.SerializeAsString(), original.SerializeAsString());
        continue;
      }
      EXPECT_TRUE(check_file_order(g).ok()) << check_file_order(g);
      absl::StatusOr<bool> again = pass->run(g);
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_FALSE(*again);
    }
  }
}

TEST(ImportPipelineTest, EachFusionWritesOneNodeInPlaceOfItsChain) {
  const ImportPipeline p = import_pipeline("");
  GraphProto ln = parse(kLayerNorm).graph();
  ASSERT_TRUE(p.run(ln).value());
  EXPECT_EQ(summary(ln), "y = LayerNormalization(x, w, b)");

  GraphProto g = parse(gelu()).graph();
  ASSERT_TRUE(p.run(g).value());
  EXPECT_EQ(summary(g),
            "s = Constant()\none = Constant()\nh = Constant()\ny = lms.fused.Gelu(x, s, one, h)");
  ASSERT_NE(fused_body(g.node(3)), nullptr);
  EXPECT_EQ(summary(*fused_body(g.node(3))),
            "d = Div(x, s)\ne = Erf(d)\na = Add(e, one)\nm = Mul(x, a)\ny = Mul(m, h)");

  GraphProto a = parse(attention()).graph();
  ASSERT_TRUE(p.run(a).value());
  EXPECT_EQ(summary(a), "scale = Constant()\ny = lms.fused.Attention(k, q, scale, v)");
  ASSERT_NE(fused_body(a.node(1)), nullptr);
  EXPECT_EQ(summary(*fused_body(a.node(1))),
            "kt = Transpose(k)\ns = MatMul(q, kt)\nc = Mul(s, scale)\np = Softmax(c)\n"
            "y = MatMul(p, v)");
}

TEST(ImportPipelineTest, FusedChainsImportAsOneNodeAndTheRuleSeesTheExportedNodes) {
  absl::StatusOr<ImportedModel> ln = import_onnx(write(parse(kLayerNorm), "ln.onnx"));
  ASSERT_TRUE(ln.ok()) << ln.status();
  EXPECT_EQ(op_names(ln->graph), std::vector<std::string>{"layer_norm"});
  EXPECT_EQ(ln->parameters, (std::vector<std::string>{"w", "b"}));

  absl::StatusOr<ImportedModel> g = import_onnx(write(parse(gelu()), "gelu.onnx"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(op_names(g->graph), std::vector<std::string>{"gelu"});

  // k, read through the Transpose as MatMul input B, is trainable by the
  // default rule although the MatMul is inside the fused node's body.
  absl::StatusOr<ImportedModel> a =
      import_onnx(write(parse(attention("0.5", true)), "attention.onnx"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(op_names(a->graph), std::vector<std::string>{"attention"});
  EXPECT_EQ(a->parameters, std::vector<std::string>{"k"});
}

TEST(ImportPipelineTest, AChainWhoseConstantsDeclineImportsAsItsNodes) {
  // A negative scale is no attention's: the body's five nodes are mapped,
  // the scale a broadcast mul.
  absl::StatusOr<ImportedModel> a =
      import_onnx(write(parse(attention("-0.5")), "negative_scale.onnx"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(op_names(a->graph),
            (std::vector<std::string>{"transpose", "matmul", "mul", "softmax", "matmul"}));

  // A GELU chain with another constant is visited node by node, and Erf is
  // refused, naming the Erf node.
  absl::StatusOr<ImportedModel> g = import_onnx(write(parse(gelu("0.4")), "gelu_04.onnx"));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("ONNX node 'e' (Erf): op not supported"), std::string::npos)
      << g.status();
}

TEST(ImportPipelineTest, ACausalMaskFromPositionsJoinsTheAttentionChain) {
  GraphProto g = parse(positions_attention()).graph();
  ASSERT_TRUE(import_pipeline("").run(g).value());
  const NodeProto& fused = g.node(g.node_size() - 1);
  EXPECT_EQ(summary(g),
            "zero = Constant()\nthree = Constant()\nstep = Constant()\n"
            "i = Range(zero, three, step)\nax0 = Constant()\nrow = Unsqueeze(i, ax0)\n"
            "ax1 = Constant()\ncol = Unsqueeze(i, ax1)\nbig = Constant()\n"
            "scale = Constant()\ny = lms.fused.Attention(k, q, scale, row, col, big, v)");
  ASSERT_NE(fused_body(fused), nullptr);
  EXPECT_EQ(summary(*fused_body(fused)),
            "kt = Transpose(k)\ns = MatMul(q, kt)\nc = Mul(s, scale)\n"
            "after = Greater(row, col)\nafter_f = Cast(after)\nmask = Mul(after_f, big)\n"
            "m = Add(c, mask)\np = Softmax(m)\ny = MatMul(p, v)");
  EXPECT_EQ(attr_int(fused, "mask_nodes", -1), 3);

  absl::StatusOr<ImportedModel> a =
      import_onnx(write(parse(positions_attention()), "positions.onnx"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(op_names(a->graph), std::vector<std::string>{"attention"});
  EXPECT_EQ(std::get<int64_t>(a->graph.node(0).attrs.at("causal")), 1);
}

TEST(ImportPipelineTest, AMaskFromPositionsThatIsNotCausalIsFoldedAndNotFused) {
  // Less(row, col): key < query, masking below the diagonal. The mask's
  // nodes are folded after all, the [3,3] constant is no causal mask
  // either, and the chain's other nodes are mapped one by one.
  absl::StatusOr<ImportedModel> a =
      import_onnx(write(parse(positions_attention("Less")), "positions_less.onnx"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(op_names(a->graph),
            (std::vector<std::string>{"transpose", "matmul", "mul", "add", "softmax", "matmul"}));
}

TEST(ImportPipelineTest, QScaledFirstInRank3IsOneAttentionOfOneHead) {
  GraphProto g = parse(kScaledQ).graph();
  ASSERT_TRUE(import_pipeline("").run(g).value());
  EXPECT_EQ(summary(g), "r = Constant()\ny = lms.fused.Attention(x, q, r, v)");
  EXPECT_EQ(attr_int(g.node(1), "scale_on_q", -1), 1);
  ASSERT_NE(fused_body(g.node(1)), nullptr);
  EXPECT_EQ(summary(*fused_body(g.node(1))),
            "kt = Transpose(x)\nqs = Div(q, r)\ns = MatMul(qs, kt)\np = Softmax(s)\n"
            "y = MatMul(p, v)");

  absl::StatusOr<ImportedModel> a = import_onnx(write(parse(kScaledQ), "scaled_q.onnx"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(op_names(a->graph), (std::vector<std::string>{"transpose", "reshape", "reshape",
                                                          "reshape", "attention", "reshape"}));
  for (NodeId id = 0; id < a->graph.num_nodes(); ++id) {
    const Node& n = a->graph.node(id);
    if (n.op != OpKind::kAttention) continue;
    EXPECT_EQ(a->graph.tensor(n.inputs[0]).shape, (Shape{4, 1, 3, 8}));
    EXPECT_EQ(a->graph.tensor(n.inputs[1]).shape, (Shape{4, 1, 3, 8}));
    EXPECT_NEAR(std::get<double>(n.attrs.at("softmax_scale")), 1 / 2.828427, 1e-6);
  }
}

class Fails : public ImportPass {
 public:
  std::string_view name() const override { return "always_fails"; }
  absl::StatusOr<bool> run(GraphProto&) override { return absl::FailedPreconditionError("cannot"); }
};

// Removes the first node: a later node reads a value nothing writes.
class DropsAProducer : public ImportPass {
 public:
  std::string_view name() const override { return "drops_a_producer"; }
  absl::StatusOr<bool> run(GraphProto& g) override {
    g.mutable_node()->erase(g.mutable_node()->begin());
    return true;
  }
};

TEST(ImportPipelineTest, APassThatFailsFailsTheImportNamingIt) {
  const std::string path = write(parse(gelu()), "gelu_failing.onnx");
  ImportPipeline p = import_pipeline("");
  p.add(std::make_unique<Fails>());
  absl::StatusOr<ImportedModel> m = import_onnx_with(path, {}, p);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.status().message(), "ONNX import pass 'always_fails': cannot");
}

TEST(ImportPipelineTest, APassThatBreaksTheOrderFailsTheImportNamingIt) {
  const std::string path = write(parse(gelu()), "gelu_broken.onnx");
  ImportPipeline p;
  p.add(std::make_unique<DropsAProducer>());
  absl::StatusOr<ImportedModel> m = import_onnx_with(path, {}, p);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(m.status().message(),
            "ONNX import pass 'drops_a_producer' left the nodes out of order: ONNX node 'd' "
            "(Div): reads 's', which no earlier node, initializer or input writes");
}

TEST(ImportPipelineTest, AFilesOwnNodeInTheFusedDomainIsRefused) {
  ModelProto m = parse(kRelu);
  m.mutable_graph()->mutable_node(0)->set_domain(std::string(kFusedDomain));
  absl::StatusOr<ImportedModel> r = import_onnx(write(m, "own_fused.onnx"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("domain 'lms.fused' is unknown to lms"), std::string::npos)
      << r.status();
}

}  // namespace
}  // namespace lms::onnx_import
