// The registry itself: every op of docs/ops.md is registered, attribute
// helpers, shared checks (arity, unknown / missing attributes), mutated
// inputs, FLOPs.
#include "graph/op_registry.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "lms/ops.h"

namespace lms {
namespace {

// Op names in the tables of docs/ops.md: the first `backquoted` cell of each row.
std::set<std::string> ops_in_catalog() {
  std::ifstream in(std::string(LMS_SOURCE_DIR) + "/docs/ops.md");
  std::stringstream text;
  text << in.rdbuf();
  std::set<std::string> names;
  std::regex row(R"(^\| `([a-z_0-9]+)`)");
  std::string line;
  while (std::getline(text, line)) {
    std::smatch m;
    if (std::regex_search(line, m, row)) names.insert(m[1]);
  }
  return names;
}

TEST(OpRegistry, RegistersExactlyTheCatalog) {
  std::set<std::string> catalog = ops_in_catalog();
  ASSERT_GE(catalog.size(), 40u) << "docs/ops.md parse found too few ops";
  std::set<std::string> registered;
  for (OpKind op : all_op_kinds()) {
    const OpDef& def = op_def(op);
    EXPECT_EQ(def.kind, op) << op_name(op);
    EXPECT_EQ(def.name, op_name(op));
    EXPECT_TRUE(def.infer) << op_name(op);
    EXPECT_TRUE(def.flops) << op_name(op);
    EXPECT_TRUE(def.bytes) << op_name(op);
    registered.insert(def.name);
  }
  EXPECT_EQ(registered, catalog);
}

TEST(OpKind, NamesParseBack) {
  std::set<std::string> names;
  for (OpKind op : all_op_kinds()) {
    EXPECT_EQ(parse_op_kind(op_name(op)), op) << op_name(op);
    names.insert(op_name(op));
  }
  EXPECT_EQ(names.size(), kNumOpKinds);  // no two kinds share a name
  EXPECT_EQ(parse_op_kind("convolution"), std::nullopt);
  EXPECT_EQ(parse_op_kind(""), std::nullopt);
  EXPECT_EQ(parse_op_kind("Conv"), std::nullopt);
  static_assert(parse_op_kind("swap_in") == OpKind::kSwapIn);
  static_assert(std::string_view(op_name(OpKind::kConvBwdData)) == "conv_bwd_data");
}

TEST(OpRegistry, GradientRulesExactlyForForwardOps) {
  const std::set<OpKind> differentiable = {
      OpKind::kConv,         OpKind::kDeconv,     OpKind::kUpsample,
      OpKind::kRelu,         OpKind::kLeakyRelu,  OpKind::kSigmoid,
      OpKind::kSoftmax,      OpKind::kAdd,        OpKind::kMul,
      OpKind::kScale,        OpKind::kDropout,    OpKind::kConcat,
      OpKind::kSlice,        OpKind::kFill,       OpKind::kMaxPool,
      OpKind::kInstanceNorm, OpKind::kBatchNorm,  OpKind::kMseLoss,
      OpKind::kSoftDiceLoss, OpKind::kReduceMean, OpKind::kEmbedding,
      OpKind::kLinear,       OpKind::kAvgPool,    OpKind::kClip,
      OpKind::kGelu,         OpKind::kReshape,    OpKind::kSoftmaxCrossEntropy,
      OpKind::kTranspose,    OpKind::kLayerNorm,  OpKind::kMatMul,
      OpKind::kAttention,    OpKind::kCast,       OpKind::kHardSigmoid,
      OpKind::kHardSwish,    OpKind::kTanh,       OpKind::kLinearCrossEntropy};
  for (OpKind op : all_op_kinds()) {
    EXPECT_EQ(static_cast<bool>(op_def(op).grad), differentiable.contains(op)) << op_name(op);
  }
}

// A backward op is named after its forward op plus "_bwd" (docs/ops.md), and
// only forward ops with a gradient rule (fill aside) may be recomputed.
TEST(OpRegistry, BackwardAndRecomputableFlags) {
  for (OpKind op : all_op_kinds()) {
    const std::string name = op_name(op);
    EXPECT_EQ(op_def(op).backward, name.find("_bwd") != std::string::npos) << name;
    if (op_def(op).recomputable) {
      EXPECT_TRUE(op_def(op).grad) << name;
      EXPECT_EQ(op_def(op).exec, OpExec::kKernel) << name;
    }
  }
  EXPECT_TRUE(op_def(OpKind::kConv).recomputable);
  EXPECT_TRUE(op_def(OpKind::kLayerNorm).recomputable);
  EXPECT_TRUE(op_def(OpKind::kMatMul).recomputable);
  EXPECT_TRUE(op_def(OpKind::kAttention).recomputable);
  EXPECT_FALSE(op_def(OpKind::kFill).recomputable);
  EXPECT_FALSE(op_def(OpKind::kMseLoss).recomputable);
}

TEST(OpRegistry, ExecutionOfSwapAndCollectiveOps) {
  EXPECT_EQ(op_def(OpKind::kSwapOut).exec, OpExec::kCopyToHost);
  EXPECT_EQ(op_def(OpKind::kSwapIn).exec, OpExec::kCopyToDevice);
  EXPECT_EQ(op_def(OpKind::kAllReduce).exec, OpExec::kCollective);
  int kernels = 0;
  for (OpKind op : all_op_kinds()) kernels += has_kernel(op) ? 1 : 0;
  EXPECT_EQ(kernels, static_cast<int>(kNumOpKinds) - 3);
}

TEST(OpRegistry, AttributeSchemaIsTypedAndSorted) {
  for (OpKind op : all_op_kinds()) {
    const std::vector<AttrSchema>& attrs = op_def(op).attrs;
    EXPECT_TRUE(
        std::is_sorted(attrs.begin(), attrs.end(),
                       [](const AttrSchema& a, const AttrSchema& b) { return a.name < b.name; }))
        << op_name(op);
  }
  auto find = [](OpKind op, std::string_view name) -> const AttrSchema* {
    for (const AttrSchema& a : op_def(op).attrs) {
      if (a.name == name) return &a;
    }
    return nullptr;
  };
  ASSERT_NE(find(OpKind::kConv, "stride"), nullptr);
  EXPECT_EQ(find(OpKind::kConv, "stride")->type, AttrType::kInts);
  EXPECT_TRUE(find(OpKind::kConv, "stride")->required);
  ASSERT_NE(find(OpKind::kConv, kWorkspaceAttr), nullptr);
  EXPECT_EQ(find(OpKind::kConv, kWorkspaceAttr)->type, AttrType::kStr);
  EXPECT_FALSE(find(OpKind::kConv, kWorkspaceAttr)->required);
  EXPECT_EQ(find(OpKind::kLeakyRelu, "alpha")->type, AttrType::kReal);
  EXPECT_EQ(find(OpKind::kSlice, "begin")->type, AttrType::kInt);
  EXPECT_EQ(find(OpKind::kAdamUpdate, "decay_steps")->type, AttrType::kInt);
  EXPECT_FALSE(find(OpKind::kAdamUpdate, "decay_steps")->required);
  EXPECT_TRUE(op_def(OpKind::kRelu).attrs.empty());
  EXPECT_STREQ(attr_type_name(AttrType::kInts), "ints");
}

TEST(OpRegistry, MutatedInputs) {
  EXPECT_EQ(op_def(OpKind::kSgdUpdate).mutated_inputs, (std::vector<int>{0, 2}));
  EXPECT_EQ(op_def(OpKind::kAdamUpdate).mutated_inputs, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(op_def(OpKind::kIncrement).mutated_inputs, (std::vector<int>{0}));
  EXPECT_EQ(op_def(OpKind::kBnStatsUpdate).mutated_inputs, (std::vector<int>{0, 1}));
  EXPECT_EQ(op_def(OpKind::kAmpUpdateScale).mutated_inputs, (std::vector<int>{0, 1}));
  for (OpKind op : all_op_kinds()) {
    if (op != OpKind::kSgdUpdate && op != OpKind::kAdamUpdate && op != OpKind::kIncrement &&
        op != OpKind::kBnStatsUpdate && op != OpKind::kAmpUpdateScale) {
      EXPECT_TRUE(op_def(op).mutated_inputs.empty()) << op_name(op);
    }
  }
}

TEST(OpRegistry, AttrHelpers) {
  Attrs a = {
      {"i", int64_t{3}}, {"r", 0.5}, {"s", std::string("x")}, {"l", std::vector<int64_t>{1, 2}}};
  EXPECT_EQ(*attr_int(a, "i"), 3);
  EXPECT_EQ(*attr_real(a, "r"), 0.5);
  EXPECT_EQ(*attr_str(a, "s"), "x");
  EXPECT_EQ(*attr_ints(a, "l"), (std::vector<int64_t>{1, 2}));
  auto wrong = attr_int(a, "r");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("'r'"), absl::string_view::npos);
  EXPECT_NE(wrong.status().message().find("int"), absl::string_view::npos);
  auto missing = attr_ints(a, "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'nope'"), absl::string_view::npos);
  EXPECT_EQ(attr_int_or(a, "nope", 7), 7);
  EXPECT_EQ(attr_int_or(a, "i", 7), 3);
  EXPECT_EQ(attr_real_or(a, "s", 1.5), 1.5);
  EXPECT_EQ(attr_real_or(a, "r", 1.5), 0.5);
}

TEST(OpRegistry, SharedChecksNameTheProblem) {
  const OpDef* relu = &op_def(OpKind::kRelu);
  auto arity = relu->infer(OpInstance{"r", OpKind::kRelu, {}, {{2, 3}, {2, 3}}});
  ASSERT_FALSE(arity.ok());
  EXPECT_NE(arity.status().message().find("takes 1 inputs, got 2"), absl::string_view::npos)
      << arity.status();
  auto unknown = relu->infer(OpInstance{"r", OpKind::kRelu, {{"alpha", 0.1}}, {{2, 3}}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown attribute 'alpha'"), absl::string_view::npos);
  auto missing = op_def(OpKind::kConv)
                     .infer(OpInstance{"c",
                                       OpKind::kConv,
                                       {{"stride", std::vector<int64_t>{1, 1}}},
                                       {{1, 1, 8, 8}, {4, 1, 3, 3}}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing attribute 'dilation'"),
            absl::string_view::npos)
      << missing.status();
  auto zero_dim = relu->infer(OpInstance{"r", OpKind::kRelu, {}, {{2, 0}}});
  EXPECT_FALSE(zero_dim.ok());
}

// Hand count: N=2, K=8, C=3, k=3x3, S'=(10+2-3)/1+1 = 10 -> 10x10.
// 2*N*K*C*prod(k)*prod(S') = 2*2*8*3*9*100 = 86400.
TEST(OpRegistry, ConvFlopsByHand) {
  Graph g;
  TensorId x = g.input("x", {2, 3, 10, 10});
  TensorId w = g.parameter("w", {8, 3, 3, 3}, Init::he_normal(1, 27));
  TensorId y = conv(g, "c", x, w, kNoTensor, {.pad = {1, 1}});
  ASSERT_TRUE(g.status().ok()) << g.status();
  EXPECT_EQ(g.tensor(y).shape, (Shape{2, 8, 10, 10}));
  EXPECT_DOUBLE_EQ(node_flops(g, g.find_node("c")), 86400.0);
  // Stride 2: S' = (10+2-3)/2+1 = 5 -> 2*2*8*3*9*25 = 21600.
  conv(g, "c2", x, w, kNoTensor, {.stride = {2, 2}, .pad = {1, 1}});
  EXPECT_DOUBLE_EQ(node_flops(g, g.find_node("c2")), 21600.0);
  EXPECT_EQ(node_flops(g, 99), 0.0);
}

// 2·batch·M·N·K: [2,3,5,4] x [2,3,4,6] is 2·6·5·6·4 = 1440; with a
// transposed a [2,3,4,5] the same; a shared weight [4,6] counts per matrix.
TEST(OpRegistry, MatMulFlopsByHand) {
  Graph g;
  TensorId a = g.input("a", {2, 3, 5, 4});
  TensorId at = g.input("at", {2, 3, 4, 5});
  TensorId b = g.input("b", {2, 3, 4, 6});
  TensorId w = g.input("w", {4, 6});
  matmul(g, "mm", a, b);
  matmul(g, "mm_t", at, b, true, false);
  matmul(g, "mm_w", a, w);
  ASSERT_TRUE(g.status().ok()) << g.status();
  EXPECT_DOUBLE_EQ(node_flops(g, g.find_node("mm")), 1440.0);
  EXPECT_DOUBLE_EQ(node_flops(g, g.find_node("mm_t")), 1440.0);
  EXPECT_DOUBLE_EQ(node_flops(g, g.find_node("mm_w")), 1440.0);
}

// The default byte cost: inputs read once, outputs written once.
TEST(OpRegistry, BytesOfInputsAndOutputs) {
  Graph g;
  TensorId x = g.input("x", {2, 3, 10, 10});
  TensorId w = g.parameter("w", {8, 3, 3, 3}, Init::he_normal(1, 27));
  conv(g, "c", x, w, kNoTensor, {.pad = {1, 1}});
  ASSERT_TRUE(g.status().ok()) << g.status();
  EXPECT_DOUBLE_EQ(node_bytes(g, g.find_node("c")), 4.0 * (600 + 216 + 1600));
  EXPECT_EQ(node_bytes(g, 99), 0.0);
}

TEST(OpRegistry, BackwardConvFlopsEqualForward) {
  const Attrs geom = {{"stride", std::vector<int64_t>{1, 1}},
                      {"pad", std::vector<int64_t>{1, 1}},
                      {"dilation", std::vector<int64_t>{1, 1}}};
  const Shape x = {2, 3, 10, 10}, w = {8, 3, 3, 3}, y = {2, 8, 10, 10};
  const double fwd = op_def(OpKind::kConv).flops(geom, {x, w}, {y});
  Attrs data = geom;
  data["input_shape"] = x;
  Attrs weights = geom;
  weights["weight_shape"] = w;
  weights["has_bias"] = int64_t{1};
  EXPECT_DOUBLE_EQ(op_def(OpKind::kConvBwdData).flops(data, {y, w}, {x}), fwd);
  EXPECT_DOUBLE_EQ(op_def(OpKind::kConvBwdWeights).flops(weights, {x, y}, {w, {8}}), fwd);
}

// The time model's counts: 4·N·H·T·S·D forward (q·kᵀ and P·v), 10·N·H·T·S·D
// backward (the recomputed scores and four products).
TEST(OpRegistry, AttentionFlopsScaleWithTimesKeys) {
  const Shape q = {2, 3, 7, 4}, k = {2, 3, 5, 4}, lse = {2, 3, 7};
  const Attrs a = {{"softmax_scale", 0.5}, {"causal", int64_t{0}}};
  const double nhtsd = 2 * 3 * 7 * 5 * 4;
  EXPECT_DOUBLE_EQ(op_def(OpKind::kAttention).flops(a, {q, k, k}, {q, lse}), 4 * nhtsd);
  EXPECT_DOUBLE_EQ(op_def(OpKind::kAttentionBwd).flops(a, {q, k, k, q, lse, q}, {q, k, k}),
                   10 * nhtsd);
}

TEST(OpRegistry, ElementwiseAndNormFlopsScaleWithElements) {
  const Shape s = {2, 4, 6, 6};
  const double n = 2 * 4 * 6 * 6;
  EXPECT_DOUBLE_EQ(op_def(OpKind::kRelu).flops({}, {s}, {s}), n);
  EXPECT_DOUBLE_EQ(op_def(OpKind::kAdd).flops({}, {s, s}, {s}), n);
  EXPECT_DOUBLE_EQ(op_def(OpKind::kInstanceNorm).flops({{"eps", 1e-5}}, {s, {4}, {4}}, {s}), 5 * n);
  EXPECT_DOUBLE_EQ(op_def(OpKind::kLayerNorm).flops({{"eps", 1e-5}}, {s, {6}, {6}}, {s}), 5 * n);
  EXPECT_DOUBLE_EQ(op_def(OpKind::kLayerNormBwd).flops({{"eps", 1e-5}}, {s, {6}, s}, {s, {6}, {6}}),
                   5 * n);
  EXPECT_EQ(op_def(OpKind::kSwapOut).flops({}, {s}, {s}), 0.0);
}

}  // namespace
}  // namespace lms
