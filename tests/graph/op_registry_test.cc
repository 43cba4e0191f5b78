// The registry itself: every op of docs/ops.md is registered, attribute
// helpers, shared checks (arity, unknown / missing attributes), mutated
// inputs, FLOPs.
#include "graph/op_registry.h"

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

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
  std::vector<std::string> ops = registered_ops();
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
  EXPECT_EQ(std::set<std::string>(ops.begin(), ops.end()), catalog);
  for (const std::string& op : ops) {
    const OpDef* def = find_op(op);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_EQ(def->name, op);
    EXPECT_TRUE(def->infer) << op;
    EXPECT_TRUE(def->flops) << op;
  }
  EXPECT_EQ(find_op("convolution"), nullptr);
}

TEST(OpRegistry, GradientRulesExactlyForForwardOps) {
  const std::set<std::string> differentiable = {
      "conv",       "deconv",   "upsample",      "relu",       "leaky_relu", "sigmoid",
      "softmax",    "add",      "mul",           "scale",      "concat",     "slice",
      "fill",       "max_pool", "instance_norm", "batch_norm", "mse_loss",   "soft_dice_loss",
      "reduce_mean"};
  for (const std::string& op : registered_ops()) {
    EXPECT_EQ(static_cast<bool>(find_op(op)->grad), differentiable.contains(op)) << op;
  }
}

TEST(OpRegistry, MutatedInputs) {
  EXPECT_EQ(find_op("sgd_update")->mutated_inputs, (std::vector<int>{0, 2}));
  EXPECT_EQ(find_op("adam_update")->mutated_inputs, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(find_op("increment")->mutated_inputs, (std::vector<int>{0}));
  for (const std::string& op : registered_ops()) {
    if (op != "sgd_update" && op != "adam_update" && op != "increment") {
      EXPECT_TRUE(find_op(op)->mutated_inputs.empty()) << op;
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
  const OpDef* relu = find_op("relu");
  auto arity = relu->infer({}, {{2, 3}, {2, 3}});
  ASSERT_FALSE(arity.ok());
  EXPECT_NE(arity.status().message().find("takes 1 inputs, got 2"), absl::string_view::npos)
      << arity.status();
  auto unknown = relu->infer({{"alpha", 0.1}}, {{2, 3}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown attribute 'alpha'"), absl::string_view::npos);
  auto missing = find_op("conv")->infer({{"stride", std::vector<int64_t>{1, 1}}},
                                        {{1, 1, 8, 8}, {4, 1, 3, 3}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing attribute 'dilation'"),
            absl::string_view::npos)
      << missing.status();
  auto zero_dim = relu->infer({}, {{2, 0}});
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

TEST(OpRegistry, BackwardConvFlopsEqualForward) {
  const Attrs geom = {{"stride", std::vector<int64_t>{1, 1}},
                      {"pad", std::vector<int64_t>{1, 1}},
                      {"dilation", std::vector<int64_t>{1, 1}}};
  const Shape x = {2, 3, 10, 10}, w = {8, 3, 3, 3}, y = {2, 8, 10, 10};
  const double fwd = find_op("conv")->flops(geom, {x, w}, {y});
  Attrs data = geom;
  data["input_shape"] = x;
  Attrs weights = geom;
  weights["weight_shape"] = w;
  weights["has_bias"] = int64_t{1};
  EXPECT_DOUBLE_EQ(find_op("conv_bwd_data")->flops(data, {y, w}, {x}), fwd);
  EXPECT_DOUBLE_EQ(find_op("conv_bwd_weights")->flops(weights, {x, y}, {w, {8}}), fwd);
}

TEST(OpRegistry, ElementwiseAndNormFlopsScaleWithElements) {
  const Shape s = {2, 4, 6, 6};
  const double n = 2 * 4 * 6 * 6;
  EXPECT_DOUBLE_EQ(find_op("relu")->flops({}, {s}, {s}), n);
  EXPECT_DOUBLE_EQ(find_op("add")->flops({}, {s, s}, {s}), n);
  EXPECT_DOUBLE_EQ(find_op("instance_norm")->flops({{"eps", 1e-5}}, {s, {4}, {4}}, {s}), 5 * n);
  EXPECT_EQ(find_op("swap_out")->flops({}, {s}, {s}), 0.0);
}

}  // namespace
}  // namespace lms
