// Graph core: builders' error recording, schedule, verify, text round trip.
#include "lms/graph.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

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

TEST(GraphTest, UnknownOpAndBadInputNameTheNode) {
  Graph g;
  TensorId x = g.input("x", {1, 1, 4, 4});
  auto r = g.add_node("no_such_op", "n1", {x}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("n1"), std::string::npos);
  auto r2 = g.add_node("relu", "n2", {42}, {});
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

}  // namespace
}  // namespace lms
