// Graph core: builders' error recording, schedule, verify, text round trip.
#include "lms/graph.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "graph/text_parser.h"
#include "lms/ops.h"
#include "lms/training.h"

namespace lms {
namespace {

// conv -> relu -> conv -> mse, the smallest graph with parameters and a loss.
Graph small_net() {
  Graph g;
  TensorId x = g.input("x", {2, 1, 8, 8});
  TensorId t = g.input("t", {2, 1, 8, 8});
  TensorId h = conv2d(g, "c1", x, 4, {3}, {.pad = {1}, .seed = 1});
  h = relu(g, "r1", h);
  h = conv2d(g, "c2", h, 1, {3}, {.pad = {1}, .seed = 2});
  g.set_loss(mse_loss(g, "loss", h, t));
  return g;
}

TEST(GraphTest, BuilderErrorIsRecordedAndPropagated) {
  Graph g;
  TensorId x = g.input("x", {2, 3, 8, 8});
  TensorId w = g.parameter("w", {4, 5, 3, 3}, Init::he_normal(1, 45));  // C mismatch
  TensorId y = conv(g, "bad_conv", x, w);
  EXPECT_EQ(y, kNoTensor);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(g.status().message()).find("bad_conv"), std::string::npos) << g.status();
  EXPECT_EQ(relu(g, "after", y), kNoTensor);  // later builders propagate
  EXPECT_EQ(g.num_nodes(), 0);
}

TEST(GraphTest, DuplicateAndMalformedNamesAreRejected) {
  Graph g;
  EXPECT_NE(g.input("x", {1}), kNoTensor);
  EXPECT_EQ(g.input("x", {1}), kNoTensor);
  EXPECT_FALSE(g.status().ok());
  Graph h;
  EXPECT_EQ(h.input("a b", {1}), kNoTensor);
  Graph k;
  EXPECT_EQ(k.input("z", {0, 3}), kNoTensor);
  EXPECT_NE(std::string(k.status().message()).find("positive"), std::string::npos);
}

TEST(GraphTest, AbsurdLeafShapesAndInitsAreRecorded) {
  constexpr int64_t k40 = int64_t{1} << 40;
  struct Case {
    Shape shape;
    Init init;
    std::string message;  // "" = accepted
  };
  const Case cases[] = {
      {{k40, k40}, Init::zeros(), "tensor 't': [1099511627776,1099511627776] is too large"},
      {{std::numeric_limits<int64_t>::max(), 2}, Init::zeros(), "too large"},
      {{int64_t{1} << 61}, Init::zeros(), "too large"},  // 2^63 bytes
      {{(int64_t{1} << 61) - 1}, Init::zeros(), ""},     // 2^63 - 4 bytes
      {{2, -3}, Init::zeros(), "every dimension must be positive, got [2,-3]"},
      {{2}, Init::he_normal(1, 0), "he_normal fan_in must be >= 1, got 0"},
      {{2}, Init::he_normal(std::numeric_limits<uint64_t>::max(), 1), ""},
  };
  for (const Case& c : cases) {
    Graph g;
    const TensorId t = g.parameter("t", c.shape, c.init);
    if (c.message.empty()) {
      EXPECT_NE(t, kNoTensor) << g.status();
      EXPECT_EQ(g.tensor(t).bytes(), static_cast<uint64_t>(num_elements(c.shape)) * 4);
      continue;
    }
    EXPECT_EQ(t, kNoTensor) << c.message;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(g.status().message()).find(c.message), std::string::npos) << g.status();
  }
  Graph g;
  EXPECT_EQ(g.input("x", {k40, k40}), kNoTensor);
  EXPECT_NE(std::string(g.status().message()).find("tensor 'x'"), std::string::npos);
  EXPECT_EQ(checked_shape_bytes({k40, k40}), std::nullopt);
  EXPECT_EQ(checked_num_elements({k40, k40}), std::nullopt);
  EXPECT_EQ(checked_num_elements({k40, 1 << 22}), int64_t{1} << 62);
  EXPECT_EQ(checked_shape_bytes({k40, 1 << 22}), std::nullopt);  // 2^64 bytes
}

// Init::from_values: the count must be the shape's; copies of the graph
// share the values; the text form names the count and parse_graph refuses
// it (the values are not in the text).
TEST(GraphTest, ValuesInitIsCheckedSharedAndNotInTheText) {
  auto values = std::make_shared<const std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  Graph g;
  EXPECT_EQ(g.parameter("short", {7}, Init::from_values(values)), kNoTensor);
  EXPECT_NE(std::string(g.status().message())
                .find("tensor 'short': values init holds 6 values, the shape has 7 elements"),
            std::string::npos)
      << g.status();
  Graph h;
  const TensorId w = h.parameter("w", {2, 3}, Init::from_values(values));
  ASSERT_NE(w, kNoTensor) << h.status();
  const Graph copy = h;
  EXPECT_EQ(copy.tensor(w).init.values.get(), values.get());
  const std::string text = to_text(h);
  EXPECT_NE(text.find("parameter w f32[2,3] values(elements=6)"), std::string::npos) << text;
  auto parsed = parse_graph(text);
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(std::string(parsed.status().message()).find("Init::from_values"), std::string::npos)
      << parsed.status();
}

// Names are written verbatim into the text form: a quote or a control
// character would end the name or the line there.
TEST(GraphTest, NamesTheTextFormCannotHoldAreRejected) {
  for (const char* bad : {"a\"b", "a\rb", "a\vb", "a\x7f", "a\x01", "tab\t"}) {
    Graph g;
    EXPECT_EQ(g.input(bad, {1}), kNoTensor) << bad;
    EXPECT_NE(std::string(g.status().message()).find("not allowed"), std::string::npos)
        << g.status();
  }
  Graph g;
  EXPECT_NE(g.input("caf\u00e9/\u65e5#1->x", {1}), kNoTensor) << g.status();
  auto parsed = parse_graph(to_text(g));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(to_text(*parsed), to_text(g));
}

TEST(GraphTest, UnknownOpAndBadInputNameTheNode) {
  Graph g;
  g.input("x", {1, 1, 4, 4});
  auto r =
      parse_graph("input x f32[1,1,4,4]\nnode n1 = no_such_op(x) -> n1 f32[1,1,4,4] activation\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("node 'n1' (no_such_op): unknown op"),
            std::string::npos)
      << r.status();
  auto r2 = g.add_node(OpKind::kRelu, "n2", {42}, {});
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(std::string(r2.status().message()).find("n2"), std::string::npos);
}

TEST(ScheduleTest, KeepsAValidPreferredOrderAndRespectsControlEdges) {
  Graph g = small_net();
  auto order = schedule(g);
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_EQ(*order, g.order());
  // Ask for relu to run last: impossible for data deps, schedule must fix it.
  std::vector<NodeId> pref = g.order();
  NodeId r1 = g.find_node("r1");
  pref.erase(std::find(pref.begin(), pref.end(), r1));
  pref.push_back(r1);
  ASSERT_TRUE(g.set_order(pref).ok());
  auto fixed = schedule(g);
  ASSERT_TRUE(fixed.ok());
  auto pos = [&](const std::string& n) {
    return std::find(fixed->begin(), fixed->end(), g.find_node(n)) - fixed->begin();
  };
  EXPECT_LT(pos("c1"), pos("r1"));
  EXPECT_LT(pos("r1"), pos("c2"));
  // A control edge loss -> c2 (after c2 already reads from c1) closes a cycle.
  g.add_control_edge(g.find_node("loss"), g.find_node("c1"));
  auto cyclic = schedule(g);
  ASSERT_FALSE(cyclic.ok());
  EXPECT_NE(std::string(cyclic.status().message()).find("cycle"), std::string::npos);
  EXPECT_FALSE(verify(g).ok());
}

TEST(ScheduleTest, SetOrderRejectsNonPermutations) {
  Graph g = small_net();
  EXPECT_FALSE(g.set_order({0, 0, 1, 2}).ok());
  EXPECT_FALSE(g.set_order({}).ok());
}

TEST(VerifyTest, AcceptsBuiltGraphsAndCatchesInconsistency) {
  Graph g = small_net();
  EXPECT_TRUE(verify(g).ok()) << verify(g);
  auto train = training_graph(g, g.loss(), Adam{1e-3});
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_TRUE(verify(*train).ok()) << verify(*train);
  // Corrupt a shape: verify must name the node.
  Graph bad = small_net();
  bad.mutable_tensor(bad.find_tensor("r1")).shape = {2, 4, 8, 9};
  absl::Status s = verify(bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("r1"), std::string::npos) << s;
}

TEST(TextTest, RoundTripIsExactForATrainingGraph) {
  Graph g = small_net();
  auto train = training_graph(g, g.loss(), Adam{1e-3, 0.9, 0.999, 1e-8, 1e-4, 1.0});
  ASSERT_TRUE(train.ok()) << train.status();
  std::string text = to_text(*train);
  auto parsed = parse_graph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(to_text(*parsed), text);
  EXPECT_TRUE(verify(*parsed).ok());
  EXPECT_EQ(parsed->num_nodes(), train->num_nodes());
  EXPECT_EQ(parsed->num_tensors(), train->num_tensors());
  EXPECT_NE(text.find("he_normal(seed=1,fan_in=9)"), std::string::npos);
  EXPECT_NE(text.find("loss loss"), std::string::npos);
}

// int64 inputs print as i64[...] (float32 tensors as before, f32[...]), read
// back with their dtype; the op registry and verify check every input's
// dtype. The training graph of an embedding keeps the ids out of autodiff.
TEST(TextTest, Int64InputsRoundTripAndDtypesAreChecked) {
  Graph g;
  const TensorId ids = g.input("ids", {2, 3}, DType::kInt64);
  const TensorId table = g.parameter("table", {5, 4}, Init::constant(0.5));
  const TensorId t = g.input("t", {2, 1, 4});
  const TensorId y = softmax(g, "sm", embedding(g, "emb", ids, table), -1);
  g.set_loss(mse_loss(g, "loss", reduce_mean(g, "mean", y, 1), t));
  auto train = training_graph(g, g.loss(), Adam{1e-3});
  ASSERT_TRUE(train.ok()) << train.status();
  const std::string text = to_text(*train);
  EXPECT_NE(text.find("input ids i64[2,3]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("input t f32[2,1,4]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("= embedding_bwd(ids, "), std::string::npos) << text;
  EXPECT_NE(text.find("{axis=1, input_shape=[2,3,4]}"), std::string::npos) << text;
  auto parsed = parse_graph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(to_text(*parsed), text);
  EXPECT_EQ(parsed->tensor(parsed->find_tensor("ids")).dtype, DType::kInt64);
  EXPECT_TRUE(verify(*parsed).ok()) << verify(*parsed);

  // Persistent tensors are float32; a float where the ids go is refused.
  EXPECT_FALSE(parse_graph("parameter w i64[2] zeros\n").ok());
  auto wrong = parse_graph(
      "input ids f32[2]\nparameter w f32[3,4] zeros\n"
      "node e = embedding(ids, w) -> e f32[2,4] activation\n");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(std::string(wrong.status().message()).find("input 0 'ids' has dtype f32"),
            std::string::npos)
      << wrong.status();
  Graph bad = *parsed;
  bad.mutable_tensor(bad.find_tensor("ids")).dtype = DType::kFloat32;
  absl::Status s = verify(bad);
  EXPECT_NE(std::string(s.message()).find("node 'emb'"), std::string::npos) << s;
}

TEST(TextTest, MalformedLinesGiveLineNumbers) {
  const char* cases[] = {
      "input x f32[1,2\n",
      "input x f32[1,2]\nnode y = relu(x) -> y f32[1,3] activation\n",
      "input x f32[1,2]\nnode y = relu(nope) -> y f32[1,2] activation\n",
      "banana x\n",
      "parameter w f32[2] he_normal(seed=1)\n",
      "input x f32[1,2]\nnode y = relu(x) {a=\"unterminated} -> y f32[1,2] activation\n",
      "input x f32[1,2]\nnode y = relu(x) after(ghost) -> y f32[1,2] activation\n",
      "input x f32[1,2]\nloss missing\n",
  };
  for (const char* text : cases) {
    auto g = parse_graph(text);
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(g.status().message()).find("line "), std::string::npos) << g.status();
  }
}

TEST(TextTest, AttributeTypesSurviveTheRoundTrip) {
  Graph g;
  TensorId x = g.input("x", {1, 2, 4, 4});
  ASSERT_NE(leaky_relu(g, "lr", x, 0.25), kNoTensor);
  ASSERT_NE(scale(g, "s", x, 2.0), kNoTensor);
  ASSERT_NE(upsample(g, "u", x, {2}, "linear"), kNoTensor);
  std::string text = to_text(g);
  EXPECT_NE(text.find("alpha=0.25"), std::string::npos) << text;
  EXPECT_NE(text.find("factor=2.0"), std::string::npos) << text;
  EXPECT_NE(text.find("mode=\"linear\""), std::string::npos) << text;
  auto parsed = parse_graph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(to_text(*parsed), text);
}

// Equal, with reals compared bit for bit (-0.0 differs from 0.0, NaN equals
// the same NaN).
bool same_bits(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (const double* x = std::get_if<double>(&a)) {
    return std::bit_cast<uint64_t>(*x) == std::bit_cast<uint64_t>(std::get<double>(b));
  }
  return a == b;
}

std::string printable(const AttrValue& v) { return absl::CEscape(attr_value_text(v)); }

TEST(TextTest, EveryAttributeValueRoundTripsExactly) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  using L = std::numeric_limits<double>;
  using I = std::numeric_limits<int64_t>;
  const std::vector<AttrValue> values = {
      int64_t{0},
      int64_t{-1},
      I::min(),
      I::max(),
      0.0,
      -0.0,
      L::denorm_min(),
      -L::denorm_min(),
      L::min(),
      L::max(),
      -L::max(),
      kInf,
      -kInf,
      L::quiet_NaN(),
      0.1,
      1.0 / 3.0,
      -2.5e-310,
      1e22,
      123456789.0,
      std::string(),
      std::string("linear"),
      std::string("with \"quotes\""),
      std::string("back\\slash and trailing \\"),
      std::string("\\\""),
      std::string("a,b{c}[d](e)=f -> g # h"),
      std::string("  spaces  "),
      std::string("line\nbreak\r\n"),
      std::string("tab\tand \x01\x1f\x7f"),
      std::string("nul\0byte", 8),
      std::string("unicode: caf\u00e9 \u65e5\u672c \U0001F642"),
      std::string("\\x41 is not an escape here"),
      std::vector<int64_t>{},
      std::vector<int64_t>{5},
      std::vector<int64_t>{I::min(), -1, 0, I::max()},
  };
  for (const AttrValue& v : values) {
    const std::string text = attr_value_text(v);
    EXPECT_EQ(text.find_first_of("\n\r"), std::string::npos) << printable(v);
    auto parsed = parse_attr_value_text(text);
    ASSERT_TRUE(parsed.ok()) << printable(v) << ": " << parsed.status();
    EXPECT_TRUE(same_bits(*parsed, v)) << printable(v) << " read back as " << printable(*parsed);
    EXPECT_EQ(attr_value_text(*parsed), text);
  }
  // Reals always look like reals, so they are never read back as integers.
  EXPECT_EQ(attr_value_text(2.0), "2.0");
  EXPECT_EQ(attr_value_text(-0.0), "-0.0");
  for (const char* bad :
       {"\"abc", "\"a\\q\"", "\"\\x4\"", "\"a\" b", "1.5x", "9223372036854775808"}) {
    EXPECT_FALSE(parse_attr_value_text(bad).ok()) << bad;
  }
}

// A graph with every kind of attribute the ops carry (ints, int lists, reals,
// strings) and every kind of initialiser, with extreme values: to_text,
// parse_graph and to_text again give the same text, and the parsed graph has
// the same values bit for bit.
TEST(TextTest, EveryAttributeAndInitOfAGraphRoundTripsExactly) {
  using L = std::numeric_limits<double>;
  constexpr uint64_t kSeedMax = std::numeric_limits<uint64_t>::max();
  Graph g;
  TensorId x = g.input("x", {2, 3, 8, 8});
  TensorId t = g.input("t", {2, 4, 16, 16});
  TensorId h = conv2d(g, "c1", x, 4, {3}, {.pad = {1}, .seed = kSeedMax});
  h = leaky_relu(g, "lr1", h, -0.0);
  h = leaky_relu(g, "lr2", h, L::denorm_min());
  h = scale(g, "s1", h, 1.0 / 3.0);
  h = scale(g, "s2", h, -L::max());
  h = conv_transpose(g, "up", h, 4, {2}, {.stride = {2}, .seed = uint64_t{1} << 63});
  h = instance_norm(g, "in", h, 1e-300);
  h = upsample(g, "u", max_pool2d(g, "pool", h, 3, 2, 1), {2}, "linear");
  h = concat(g, "cat", {h, slice(g, "sl", h, 1, 2)});
  h = slice(g, "sl2", batch_norm(g, "bn", sigmoid(g, "sig", h), 0.5), 0, 4);
  TensorId loss = mse_loss(g, "mse", h, t);
  g.parameter("p_seed", {3}, Init::he_normal(kSeedMax - 1, 1));
  g.parameter("p_neg0", {3}, Init::constant(-0.0));
  g.parameter("p_tiny", {3}, Init::constant(-L::denorm_min()));
  g.parameter("p_inf", {3}, Init::constant(L::infinity()));
  g.optimizer_state("o_big", {1}, Init::constant(L::max()));
  fill(g, "f_scalar", {}, -0.0);
  fill(g, "f_tiny", {1, 3}, L::denorm_min());
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, loss, Adam{1e-3, 0.9, 0.999, 1e-8, 1e-4, 1.0});
  ASSERT_TRUE(train.ok()) << train.status();

  const std::string text = to_text(*train);
  EXPECT_NE(text.find("seed=18446744073709551615,"), std::string::npos);
  EXPECT_NE(text.find("seed=9223372036854775808,"), std::string::npos);
  EXPECT_NE(text.find("alpha=-0.0"), std::string::npos);
  EXPECT_NE(text.find("constant(-0.0)"), std::string::npos);
  EXPECT_NE(text.find("shape=[]"), std::string::npos);
  auto parsed = parse_graph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(to_text(*parsed), text);
  EXPECT_TRUE(verify(*parsed).ok()) << verify(*parsed);
  ASSERT_EQ(parsed->num_nodes(), train->num_nodes());
  for (NodeId n = 0; n < train->num_nodes(); ++n) {
    const Node& want = train->node(n);
    const Node& got = parsed->node(parsed->find_node(want.name));
    ASSERT_EQ(got.attrs.size(), want.attrs.size()) << want.name;
    for (const auto& [key, value] : want.attrs) {
      EXPECT_TRUE(same_bits(got.attrs.at(key), value)) << want.name << " " << key;
    }
  }
  for (TensorId id = 0; id < train->num_tensors(); ++id) {
    const Tensor& want = train->tensor(id);
    const Tensor& got = parsed->tensor(parsed->find_tensor(want.name));
    EXPECT_EQ(got.init.seed, want.init.seed) << want.name;
    EXPECT_EQ(got.init.fan_in, want.init.fan_in) << want.name;
    EXPECT_TRUE(same_bits(got.init.value, want.init.value)) << want.name;
  }
}

TEST(TextTest, SeedsAndOutputRolesAreChecked) {
  auto big = parse_graph("parameter w f32[2] he_normal(seed=18446744073709551615,fan_in=3)\n");
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->tensor(0).init.seed, std::numeric_limits<uint64_t>::max());
  for (const char* bad : {
           "parameter w f32[2] he_normal(seed=-1,fan_in=3)\n",
           "parameter w f32[2] he_normal(seed=18446744073709551616,fan_in=3)\n",
           "parameter w f32[2] he_normal(seed=1,fan_in=0)\n",
           "input x f32[2]\nnode y = relu(x) -> y f32[2] parameter\n",
           "input x f32[2]\nnode y = relu(x) -> y f32[2] input\n",
           "input x f32[1099511627776,1099511627776]\n",
       }) {
    auto g = parse_graph(bad);
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(g.status().message()).find("line "), std::string::npos) << g.status();
  }
}

}  // namespace
}  // namespace lms
