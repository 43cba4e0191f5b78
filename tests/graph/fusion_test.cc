// fuse_conv_relu (Note [Conv + ReLU fusion]): which relus fold into their
// conv, the names, node map, order and control edges of the fused graph,
// the cases that must not fuse, and the gradient of a conv with activation
// = "relu" built by model code.
#include "graph/fusion.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lms/ops.h"
#include "lms/training.h"
#include "lms/types.h"

namespace lms {
namespace {

// x -> c1 -> r1 -> c2 -> r2 -> c3 -> r3; concat(r3, r1) -> c4 -> + x -> mse.
// c2's output is also read by `tap` (so c2 + r2 must not fuse).
Graph net(bool tap_c2) {
  Graph g;
  TensorId x = g.input("x", {2, 1, 8, 8});
  TensorId target = g.input("target", {2, 1, 8, 8});
  TensorId r1 = relu(g, "r1", conv2d(g, "c1", x, 4, {3}, {.pad = {1}, .seed = 1}));
  TensorId c2 = conv2d(g, "c2", r1, 4, {3}, {.pad = {1}, .seed = 2});
  TensorId r2 = relu(g, "r2", c2);
  if (tap_c2) r2 = add(g, "tap", r2, c2);
  TensorId r3 = relu(g, "r3", conv2d(g, "c3", r2, 4, {3}, {.pad = {1}, .seed = 3}));
  TensorId cat = concat(g, "cat", {r3, r1});
  TensorId y = add(g, "residual", conv2d(g, "c4", cat, 1, {3}, {.pad = {1}, .seed = 4}), x);
  return *training_graph(g, mse_loss(g, "loss", y, target), Sgd{.lr = 0.1});
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(FusionTest, FusesEachReluThatIsItsConvsOnlyReader) {
  const Graph g = net(false);
  auto f = fuse_conv_relu(g, {"loss"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(sorted(f->fused), (std::vector<std::string>{"r1", "r2", "r3"}));
  EXPECT_EQ(f->graph.num_nodes(), g.num_nodes() - 3);
  EXPECT_EQ(f->graph.num_tensors(), g.num_tensors() - 3);
  for (const char* name : {"r1", "r2", "r3"}) {
    const NodeId id = f->graph.find_node(name);
    ASSERT_NE(id, kNoNode) << name;
    const Node& n = f->graph.node(id);
    EXPECT_EQ(n.op, OpKind::kConv) << name;
    EXPECT_EQ(std::get<std::string>(n.attrs.at(std::string(kActivationAttr))), kActivationRelu);
    // The relu's output keeps its name and is what relu_bwd reads.
    const TensorId y = f->graph.find_tensor(name);
    ASSERT_NE(y, kNoTensor);
    EXPECT_EQ(f->graph.tensor(y).producer, id);
    bool read_by_relu_bwd = false;
    for (NodeId c : f->graph.tensor(y).consumers) {
      read_by_relu_bwd = read_by_relu_bwd || f->graph.node(c).op == OpKind::kReluBwd;
    }
    EXPECT_TRUE(read_by_relu_bwd) << name;
  }
  // The pre-activation tensors and the conv node names are gone; c4 stays.
  for (const char* gone : {"c1", "c2", "c3"}) {
    EXPECT_EQ(f->graph.find_tensor(gone), kNoTensor) << gone;
    EXPECT_EQ(f->graph.find_node(gone), kNoNode) << gone;
  }
  EXPECT_NE(f->graph.find_node("c4"), kNoNode);
  // Both nodes of a pair map to the fused node; every other node to its copy.
  ASSERT_EQ(f->node_map.size(), static_cast<size_t>(g.num_nodes()));
  EXPECT_EQ(f->node_map[g.find_node("c2")], f->node_map[g.find_node("r2")]);
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const NodeId m = f->node_map[id];
    ASSERT_GE(m, 0);
    const std::string& old_name = g.node(id).name;
    if (old_name != "c1" && old_name != "c2" && old_name != "c3") {
      EXPECT_EQ(f->graph.node(m).name, old_name);
    }
  }
  EXPECT_EQ(f->graph.tensor(f->graph.loss()).name, "loss");
  // Fusing again finds nothing more.
  auto again = fuse_conv_relu(f->graph, {"loss"});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->fused.empty());
  EXPECT_EQ(again->graph.num_nodes(), f->graph.num_nodes());
}

TEST(FusionTest, KeepsConvOutputsWithOtherReadersOrFetched) {
  auto tapped = fuse_conv_relu(net(true), {"loss"});
  ASSERT_TRUE(tapped.ok()) << tapped.status();
  EXPECT_EQ(sorted(tapped->fused), (std::vector<std::string>{"r1", "r3"}));
  EXPECT_NE(tapped->graph.find_tensor("c2"), kNoTensor);

  auto fetched = fuse_conv_relu(net(false), {"loss", "c3"});
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ(sorted(fetched->fused), (std::vector<std::string>{"r1", "r2"}));
  EXPECT_NE(fetched->graph.find_tensor("c3"), kNoTensor);

  auto unknown = fuse_conv_relu(net(false), {"nope"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("'nope'"), std::string::npos) << unknown.status();
}

TEST(FusionTest, LeavesLeakyReluDeconvAndTheLossAlone) {
  Graph g;
  TensorId x = g.input("x", {1, 2, 4, 4});
  TensorId a = leaky_relu(g, "a", conv2d(g, "ca", x, 2, {3}, {.pad = {1}, .seed = 1}));
  TensorId w = g.parameter("dw", {2, 2, 2, 2}, Init::he_normal(2, 8));
  TensorId b = relu(g, "b", deconv(g, "cb", a, w, kNoTensor, {.stride = {2, 2}}));
  TensorId loss = relu(g, "l", conv(g, "cl", b, g.parameter("lw", {1, 2, 1, 1}, Init::zeros())));
  g.set_loss(loss);
  auto f = fuse_conv_relu(g, {});
  ASSERT_TRUE(f.ok()) << f.status();
  // leaky_relu and deconv never fuse; cl + l does: the loss is l itself,
  // which keeps its name, now produced by the fused node.
  EXPECT_EQ(f->fused, (std::vector<std::string>{"l"}));
  EXPECT_NE(f->graph.find_node("a"), kNoNode);
  EXPECT_EQ(f->graph.node(f->graph.find_node("a")).op, OpKind::kLeakyRelu);
  EXPECT_EQ(f->graph.node(f->graph.find_node("b")).op, OpKind::kRelu);
  EXPECT_EQ(f->graph.tensor(f->graph.loss()).name, "l");

  // A conv output that is itself the loss is kept.
  Graph h;
  TensorId hx = h.input("x", {1, 2, 4, 4});
  TensorId hc = conv(h, "hc", hx, h.parameter("hw", {2, 2, 1, 1}, Init::zeros()));
  relu(h, "hr", hc);
  h.set_loss(hc);
  auto fh = fuse_conv_relu(h, {});
  ASSERT_TRUE(fh.ok()) << fh.status();
  EXPECT_TRUE(fh->fused.empty());
}

TEST(FusionTest, CarriesControlEdgesAndOrder) {
  Graph g = net(false);
  g.add_control_edge(g.find_node("c2"), g.find_node("c4"));  // from the conv of a pair
  g.add_control_edge(g.find_node("r1"), g.find_node("c4"));  // from the relu of a pair
  auto f = fuse_conv_relu(g, {"loss"});
  ASSERT_TRUE(f.ok()) << f.status();
  const Node& fc4 = f->graph.node(f->graph.find_node("c4"));
  std::vector<std::string> before;
  for (NodeId id : fc4.control_inputs) before.push_back(f->graph.node(id).name);
  EXPECT_EQ(sorted(before), (std::vector<std::string>{"r1", "r2"}));
  // The preferred order is the old one with each pair in its conv's place.
  std::vector<std::string> old_order, new_order;
  for (NodeId id : g.order()) {
    const std::string& n = g.node(id).name;
    if (n == "r1" || n == "r2" || n == "r3") continue;
    old_order.push_back(n == "c1" ? "r1" : n == "c2" ? "r2" : n == "c3" ? "r3" : n);
  }
  for (NodeId id : f->graph.order()) new_order.push_back(f->graph.node(id).name);
  EXPECT_EQ(new_order, old_order);
}

TEST(FusionTest, ConvActivationAttributeIsCheckedAndDifferentiated) {
  Graph g;
  TensorId x = g.input("x", {1, 2, 4, 4});
  TensorId w = g.parameter("w", {2, 2, 3, 3}, Init::he_normal(1, 18));
  Attrs a = {{"stride", std::vector<int64_t>{1, 1}},
             {"pad", std::vector<int64_t>{1, 1}},
             {"dilation", std::vector<int64_t>{1, 1}},
             {std::string(kActivationAttr), std::string("tanh")}};
  auto bad = g.add_node(OpKind::kConv, "bad", {x, w}, a);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'activation' must be the string \"relu\""),
            std::string::npos)
      << bad.status();

  Graph h;
  TensorId hx = h.input("x", {1, 2, 4, 4});
  TensorId hw = h.parameter("w", {2, 2, 3, 3}, Init::he_normal(1, 18));
  a[std::string(kActivationAttr)] = std::string(kActivationRelu);
  auto y = h.add_node(OpKind::kConv, "y", {hx, hw}, a);
  ASSERT_TRUE(y.ok()) << y.status();
  TensorId loss = mse_loss(h, "loss", (*y)[0], h.input("t", {1, 2, 4, 4}));
  auto train = training_graph(h, loss, Sgd{.lr = 0.1});
  ASSERT_TRUE(train.ok()) << train.status();
  // The gradient reads the node's output through relu_bwd before the conv's
  // backward ops, as for a separate relu.
  int relu_bwd = 0;
  for (NodeId id = 0; id < train->num_nodes(); ++id) {
    const Node& n = train->node(id);
    if (n.op != OpKind::kReluBwd) continue;
    ++relu_bwd;
    EXPECT_EQ(train->tensor(n.inputs[0]).name, "y");
    for (NodeId c : train->tensor(n.outputs[0]).consumers) {
      const OpKind op = train->node(c).op;
      EXPECT_TRUE(op == OpKind::kConvBwdData || op == OpKind::kConvBwdWeights) << op_name(op);
    }
  }
  EXPECT_EQ(relu_bwd, 1);
}

}  // namespace
}  // namespace lms
