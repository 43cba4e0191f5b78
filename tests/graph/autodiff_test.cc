// training_graph structure: backward ops emitted, gradient names and shapes,
// optimizer state and update ordering, accumulation, errors.
#include <algorithm>
#include <map>

#include "graph/op_registry.h"
#include "gtest/gtest.h"
#include "lms/ops.h"
#include "lms/training.h"

namespace lms {
namespace {

// x -> conv1 -> relu -> conv2 -> mse(target).
struct Net {
  Graph g;
  TensorId loss = kNoTensor;
};

Net conv_relu_conv() {
  Net n;
  TensorId x = n.g.input("x", {2, 1, 8, 8});
  TensorId t = n.g.input("target", {2, 1, 8, 8});
  TensorId h = conv2d(n.g, "conv1", x, 4, {3, 3}, {.pad = {1}, .seed = 1});
  h = relu(n.g, "relu1", h);
  TensorId y = conv2d(n.g, "conv2", h, 1, {3, 3}, {.pad = {1}, .seed = 2});
  n.loss = mse_loss(n.g, "loss", y, t);
  return n;
}

// op -> count over the nodes added after the forward graph.
std::map<OpKind, int> new_op_counts(const Graph& train, int forward_nodes) {
  std::map<OpKind, int> counts;
  for (NodeId n = forward_nodes; n < train.num_nodes(); ++n) ++counts[train.node(n).op];
  return counts;
}

std::vector<int> positions(const std::vector<NodeId>& order, int num_nodes) {
  std::vector<int> pos(num_nodes);
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int>(i);
  return pos;
}

TEST(Autodiff, ConvReluConvSgdStructure) {
  Net net = conv_relu_conv();
  ASSERT_TRUE(net.g.status().ok()) << net.g.status();
  auto train = training_graph(net.g, net.loss, Sgd{.lr = 0.1, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  const Graph& g = *train;
  EXPECT_EQ(g.loss(), net.loss);
  ASSERT_TRUE(verify(g).ok()) << verify(g);
  // Golden list of added op kinds: seed, mse bwd, conv2 data+weights, relu
  // bwd, conv1 weights only (its input is a graph input), one scale(1) per
  // parameter gradient that came from a multi-output node, 4 updates.
  const std::map<OpKind, int> expected = {{OpKind::kFill, 1},        {OpKind::kMseLossBwd, 1},
                                          {OpKind::kConvBwdData, 1}, {OpKind::kConvBwdWeights, 2},
                                          {OpKind::kReluBwd, 1},     {OpKind::kScale, 4},
                                          {OpKind::kSgdUpdate, 4}};
  EXPECT_EQ(new_op_counts(g, net.g.num_nodes()), expected);
  // conv_bwd_data reads conv2's weight, never conv1's.
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    if (g.node(n).op == OpKind::kConvBwdData) {
      EXPECT_EQ(g.tensor(g.node(n).inputs[1]).name, "conv2/w");
    }
  }
  for (const char* p : {"conv1/w", "conv1/b", "conv2/w", "conv2/b"}) {
    const TensorId param = g.find_tensor(p);
    const TensorId grad = g.find_tensor(std::string(p) + "/grad");
    ASSERT_NE(grad, kNoTensor) << p;
    EXPECT_EQ(g.tensor(grad).shape, g.tensor(param).shape) << p;
    EXPECT_EQ(g.tensor(grad).role, TensorRole::kGradient) << p;
    const TensorId velocity = g.find_tensor(std::string(p) + "/velocity");
    ASSERT_NE(velocity, kNoTensor) << p;
    EXPECT_EQ(g.tensor(velocity).role, TensorRole::kOptimizerState);
    EXPECT_EQ(g.tensor(velocity).shape, g.tensor(param).shape);
    const NodeId update = g.find_node(std::string("update/") + p);
    ASSERT_NE(update, kNoNode) << p;
    EXPECT_EQ(g.node(update).inputs[0], param);
    EXPECT_EQ(g.node(update).inputs[1], grad);
    EXPECT_EQ(g.node(update).inputs[2], velocity);
  }
  EXPECT_EQ(g.find_node("optimizer/global_norm"), kNoNode);
}

// x -> fc1 (w[K,C]) -> relu -> fc2 (w[C,K], no bias) -> mse: fc2's data
// gradient is a linear with trans_b flipped; fc1 gets no data gradient (its
// input is a graph input) and one linear_bwd_weights with db.
TEST(Autodiff, LinearGradients) {
  Graph f;
  const TensorId x = f.input("x", {4, 6});
  const TensorId w1 = f.parameter("fc1/w", {5, 6}, Init::he_normal(1, 6));
  const TensorId b1 = f.parameter("fc1/b", {5}, Init::constant(0.1));
  const TensorId w2 = f.parameter("fc2/w", {5, 3}, Init::he_normal(2, 5));
  TensorId h = relu(f, "relu", linear(f, "fc1", x, w1, b1, true));
  const TensorId loss =
      mse_loss(f, "loss", linear(f, "fc2", h, w2, kNoTensor, false), f.input("target", {4, 3}));
  ASSERT_TRUE(f.status().ok()) << f.status();
  auto train = training_graph(f, loss, Sgd{.lr = 0.1});
  ASSERT_TRUE(train.ok()) << train.status();
  const Graph& g = *train;
  ASSERT_TRUE(verify(g).ok()) << verify(g);
  const std::map<OpKind, int> added = new_op_counts(g, f.num_nodes());
  EXPECT_EQ(added.at(OpKind::kLinear), 1);
  EXPECT_EQ(added.at(OpKind::kLinearBwdWeights), 2);
  for (NodeId n = f.num_nodes(); n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (node.op == OpKind::kLinear) {
      EXPECT_EQ(g.tensor(node.inputs[1]).name, "fc2/w");
      EXPECT_EQ(std::get<int64_t>(node.attrs.at("trans_b")), 1);
      EXPECT_EQ(g.tensor(node.outputs[0]).shape, (Shape{4, 5}));
    }
    if (node.op == OpKind::kLinearBwdWeights) {
      EXPECT_EQ(node.outputs.size(), g.tensor(node.inputs[0]).name == "x" ? 2u : 1u);
    }
  }
  for (const char* p : {"fc1/w", "fc1/b", "fc2/w"}) {
    const TensorId grad = g.find_tensor(std::string(p) + "/grad");
    ASSERT_NE(grad, kNoTensor) << p;
    EXPECT_EQ(g.tensor(grad).shape, g.tensor(g.find_tensor(p)).shape) << p;
  }
}

// matmul: gradients are matmuls with the transposes folded into their flags
// (no transpose node). A shared rank-2 weight gets one matmul over all rows
// of the reshaped a and dy (no sum_to); a rank-2 a broadcast over b's batch
// gets its batched gradient summed back with one sum_to.
TEST(Autodiff, MatMulGradients) {
  Graph f;
  const TensorId x = f.parameter("x", {2, 5, 4}, Init::zeros());
  const TensorId w = f.parameter("w", {6, 4}, Init::he_normal(1, 4));  // used as wᵀ
  const TensorId a = f.parameter("a", {5, 3}, Init::he_normal(2, 5));  // used as aᵀ
  const TensorId h = matmul(f, "h", x, w, false, true);                // [2,5,6]
  const TensorId y = matmul(f, "y", a, h, true, false);                // [2,3,6]
  const TensorId loss = mse_loss(f, "loss", y, f.input("target", {2, 3, 6}));
  ASSERT_TRUE(f.status().ok()) << f.status();
  auto train = training_graph(f, loss, Sgd{.lr = 0.1});
  ASSERT_TRUE(train.ok()) << train.status();
  const Graph& g = *train;
  ASSERT_TRUE(verify(g).ok()) << verify(g);
  const std::map<OpKind, int> counts = new_op_counts(g, f.num_nodes());
  EXPECT_EQ(counts.at(OpKind::kMatMul), 4);   // da, dh; dx, dw
  EXPECT_EQ(counts.at(OpKind::kSumTo), 1);    // da over y's batch
  EXPECT_EQ(counts.at(OpKind::kReshape), 2);  // x and dh as rows for dw
  EXPECT_FALSE(counts.contains(OpKind::kTranspose));
  for (const char* p : {"x", "w", "a"}) {
    const TensorId grad = g.find_tensor(std::string(p) + "/grad");
    ASSERT_NE(grad, kNoTensor) << p;
    EXPECT_EQ(g.tensor(grad).shape, g.tensor(g.find_tensor(p)).shape) << p;
  }
  // dw[6,4] = dh[10,6]ᵀ · x[10,4]: one matmul with trans_a on the rows.
  const TensorId dw = g.find_tensor("w/grad");
  NodeId producer = g.tensor(dw).producer;
  while (g.node(producer).op == OpKind::kScale)
    producer = g.tensor(g.node(producer).inputs[0]).producer;
  ASSERT_EQ(g.node(producer).op, OpKind::kMatMul);
  EXPECT_EQ(g.tensor(g.node(producer).inputs[0]).shape, (Shape{10, 6}));
  EXPECT_EQ(g.tensor(g.node(producer).inputs[1]).shape, (Shape{10, 4}));
  EXPECT_EQ(g.node(producer).attrs, (Attrs{{"trans_a", int64_t{1}}, {"trans_b", int64_t{0}}}));
}

// layer_norm: one layer_norm_bwd node reading x, gamma and dy with the
// forward node's eps only; its dgamma and dbeta become the parameters'
// gradients.
TEST(Autodiff, LayerNormGradients) {
  Graph f;
  const TensorId x = f.input("x", {2, 3, 8});
  const TensorId h = layer_norm(f, "ln", x, {.eps = 1e-6});
  const TensorId w = f.parameter("fc/w", {4, 8}, Init::he_normal(1, 8));
  const TensorId y = linear(f, "fc", reshape(f, "flat", h, {6, 8}), w, kNoTensor, true);
  const TensorId loss = mse_loss(f, "loss", y, f.input("target", {6, 4}));
  ASSERT_TRUE(f.status().ok()) << f.status();
  auto train = training_graph(f, loss, Sgd{.lr = 0.1});
  ASSERT_TRUE(train.ok()) << train.status();
  const Graph& g = *train;
  ASSERT_TRUE(verify(g).ok()) << verify(g);
  EXPECT_EQ(new_op_counts(g, f.num_nodes()).at(OpKind::kLayerNormBwd), 1);
  for (NodeId n = f.num_nodes(); n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (node.op != OpKind::kLayerNormBwd) continue;
    EXPECT_EQ(g.tensor(node.inputs[0]).name, "x");
    EXPECT_EQ(g.tensor(node.inputs[1]).name, "ln/gamma");
    EXPECT_EQ(g.tensor(node.inputs[2]).shape, (Shape{2, 3, 8}));
    EXPECT_EQ(node.attrs, (Attrs{{"eps", 1e-6}}));
    EXPECT_EQ(node.outputs.size(), 3u);
  }
  for (const char* p : {"ln/gamma", "ln/beta"}) {
    const TensorId grad = g.find_tensor(std::string(p) + "/grad");
    ASSERT_NE(grad, kNoTensor) << p;
    EXPECT_EQ(g.tensor(grad).shape, (Shape{8})) << p;
  }
}

// attention: one attention_bwd node reading q, k, v, the forward's out and
// lse, and dout, with the forward node's attributes; q, a graph input, gets
// no gradient, k and v (parameters) do. A gradient reaching lse is an error.
TEST(Autodiff, AttentionGradientsReadTheSavedOutputs) {
  Graph f;
  const TensorId q = f.input("q", {1, 2, 5, 4});
  const TensorId k = f.parameter("k", {1, 2, 3, 4}, Init::he_normal(1, 4));
  const TensorId v = f.parameter("v", {1, 2, 3, 4}, Init::he_normal(2, 4));
  const TensorId y = attention(f, "attn", q, k, v, 0.5, false);
  const TensorId loss = mse_loss(f, "loss", y, f.input("target", {1, 2, 5, 4}));
  ASSERT_TRUE(f.status().ok()) << f.status();
  EXPECT_EQ(f.tensor(y).name, "attn:0");
  EXPECT_EQ(f.tensor(f.find_tensor("attn:1")).shape, (Shape{1, 2, 5}));
  auto train = training_graph(f, loss, Sgd{.lr = 0.1});
  ASSERT_TRUE(train.ok()) << train.status();
  const Graph& g = *train;
  ASSERT_TRUE(verify(g).ok()) << verify(g);
  EXPECT_EQ(new_op_counts(g, f.num_nodes()).at(OpKind::kAttentionBwd), 1);
  for (NodeId n = f.num_nodes(); n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (node.op != OpKind::kAttentionBwd) continue;
    std::vector<std::string> inputs;
    for (TensorId t : node.inputs) inputs.push_back(g.tensor(t).name);
    EXPECT_EQ(inputs[0], "q");
    EXPECT_EQ(inputs[1], "k");
    EXPECT_EQ(inputs[2], "v");
    EXPECT_EQ(inputs[3], "attn:0");
    EXPECT_EQ(inputs[4], "attn:1");
    EXPECT_EQ(g.tensor(node.inputs[5]).role, TensorRole::kGradient);
    EXPECT_EQ(node.attrs, (Attrs{{"softmax_scale", 0.5}, {"causal", int64_t{0}}}));
  }
  EXPECT_EQ(g.find_tensor("q/grad"), kNoTensor);
  for (const char* p : {"k", "v"}) {
    const TensorId grad = g.find_tensor(std::string(p) + "/grad");
    ASSERT_NE(grad, kNoTensor) << p;
    EXPECT_EQ(g.tensor(grad).shape, (Shape{1, 2, 3, 4})) << p;
  }

  Graph bad;
  const TensorId bq = bad.parameter("q", {1, 2, 5, 4}, Init::he_normal(3, 4));
  attention(bad, "attn", bq, bq, bq, 0.5, true);
  const TensorId lse = bad.find_tensor("attn:1");
  const TensorId bad_loss = mse_loss(bad, "loss", lse, bad.input("target", {1, 2, 5}));
  ASSERT_TRUE(bad.status().ok()) << bad.status();
  auto refused = training_graph(bad, bad_loss, Sgd{.lr = 0.1});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            "training_graph: gradient of node 'attn' (attention): its output lse (the row "
            "log-sum-exp) is saved for the backward only; no gradient may reach it (read the "
            "attention output instead)");
}

// softmax_cross_entropy: one backward node reading the logits, the int64
// labels and dloss, with the forward node's ignore_index; the labels get no
// gradient.
TEST(Autodiff, CrossEntropyGradientReachesTheLogitsOnly) {
  Graph f;
  const TensorId x = f.input("x", {4, 6});
  const TensorId w = f.parameter("fc/w", {3, 6}, Init::he_normal(1, 6));
  const TensorId labels = f.input("labels", {4}, DType::kInt64);
  const TensorId loss = softmax_cross_entropy(f, "loss", linear(f, "fc", x, w), labels, 2);
  ASSERT_TRUE(f.status().ok()) << f.status();
  auto train = training_graph(f, loss, Sgd{.lr = 0.1});
  ASSERT_TRUE(train.ok()) << train.status();
  const Graph& g = *train;
  ASSERT_TRUE(verify(g).ok()) << verify(g);
  // Seed, the loss's gradient, fc's weight gradient (and the scale(1) that
  // names it "fc/w/grad"), the update; no data gradient for x.
  const std::map<OpKind, int> expected = {{OpKind::kFill, 1},
                                          {OpKind::kSoftmaxCrossEntropyBwd, 1},
                                          {OpKind::kLinearBwdWeights, 1},
                                          {OpKind::kScale, 1},
                                          {OpKind::kSgdUpdate, 1}};
  EXPECT_EQ(new_op_counts(g, f.num_nodes()), expected);
  for (NodeId n = f.num_nodes(); n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (node.op != OpKind::kSoftmaxCrossEntropyBwd) continue;
    EXPECT_EQ(node.name, "grad/loss/logits");
    ASSERT_EQ(node.inputs.size(), 3u);
    EXPECT_EQ(g.tensor(node.inputs[0]).name, "fc");
    EXPECT_EQ(node.inputs[1], labels);
    EXPECT_EQ(std::get<int64_t>(node.attrs.at("ignore_index")), 2);
    EXPECT_EQ(g.tensor(node.outputs[0]).shape, (Shape{4, 3}));
  }
  EXPECT_EQ(g.find_tensor("labels/grad"), kNoTensor);
}

// x -> fc1 -> gelu -> fc2 -> mse: one gelu_bwd reading the forward input
// (fc1's output, not gelu's) and the gradient of gelu's output, giving
// fc1's output gradient.
TEST(Autodiff, GeluGradientKeepsTheForwardInput) {
  Graph f;
  const TensorId x = f.input("x", {4, 6});
  const TensorId w1 = f.parameter("fc1/w", {5, 6}, Init::he_normal(1, 6));
  const TensorId w2 = f.parameter("fc2/w", {3, 5}, Init::he_normal(2, 5));
  const TensorId pre = linear(f, "fc1", x, w1);
  const TensorId act = gelu(f, "gelu", pre);
  const TensorId loss = mse_loss(f, "loss", linear(f, "fc2", act, w2), f.input("target", {4, 3}));
  ASSERT_TRUE(f.status().ok()) << f.status();
  auto train = training_graph(f, loss, Sgd{.lr = 0.1});
  ASSERT_TRUE(train.ok()) << train.status();
  const Graph& g = *train;
  ASSERT_TRUE(verify(g).ok()) << verify(g);
  EXPECT_EQ(new_op_counts(g, f.num_nodes()).at(OpKind::kGeluBwd), 1);
  for (NodeId n = f.num_nodes(); n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (node.op != OpKind::kGeluBwd) continue;
    ASSERT_EQ(node.inputs.size(), 2u);
    EXPECT_EQ(node.inputs[0], pre);
    EXPECT_EQ(g.tensor(node.inputs[1]).shape, (Shape{4, 5}));
    ASSERT_EQ(node.outputs.size(), 1u);
    EXPECT_EQ(g.tensor(node.outputs[0]).shape, (Shape{4, 5}));
    EXPECT_TRUE(node.attrs.empty());
  }
}

TEST(Autodiff, UpdatesRunAfterEveryReaderOfTheirParameter) {
  Net net = conv_relu_conv();
  auto train = training_graph(net.g, net.loss, Adam{.lr = 1e-3});
  ASSERT_TRUE(train.ok()) << train.status();
  const Graph& g = *train;
  auto order = schedule(g);
  ASSERT_TRUE(order.ok()) << order.status();
  const std::vector<int> pos = positions(*order, g.num_nodes());
  const NodeId increment = g.find_node("optimizer/increment");
  ASSERT_NE(increment, kNoNode);
  int updates = 0;
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (node.op != OpKind::kAdamUpdate) continue;
    ++updates;
    EXPECT_LT(pos[increment], pos[n]) << node.name;
    for (NodeId reader : g.tensor(node.inputs[0]).consumers) {
      if (reader != n) {
        EXPECT_LT(pos[reader], pos[n]) << g.node(reader).name << " / " << node.name;
      }
    }
  }
  EXPECT_EQ(updates, 4);
  // conv2/w is read by conv2 (forward) and conv_bwd_data (backward).
  EXPECT_GE(g.tensor(g.find_tensor("conv2/w")).consumers.size(), 3u);
}

// A batch_norm with running statistics gets one bn_stats_update, fed by the
// forward node's saved batch statistics and scheduled after every optimizer
// update, so the step commit stays at the first update.
TEST(Autodiff, RunningStatisticsUpdateAfterTheOptimizer) {
  Graph fwd;
  const TensorId x = fwd.input("x", {2, 3, 4, 4});
  TensorId h = conv2d(fwd, "conv", x, 4, {3, 3}, {.pad = {1, 1}, .seed = 1});
  h = batch_norm(fwd, "bn", h, BatchNormOptions{.momentum = 0.25});
  const TensorId loss = mse_loss(fwd, "loss", h, fwd.input("t", {2, 4, 4, 4}));
  ASSERT_TRUE(fwd.status().ok()) << fwd.status();
  auto train = training_graph(fwd, loss, Adam{});
  ASSERT_TRUE(train.ok()) << train.status();
  const Graph& g = *train;
  ASSERT_TRUE(verify(g).ok()) << verify(g);
  const NodeId bn = g.find_node("bn"), stats = g.find_node("bn_stats/bn");
  ASSERT_NE(stats, kNoNode);
  const Node& update = g.node(stats);
  EXPECT_EQ(update.op, OpKind::kBnStatsUpdate);
  EXPECT_EQ(update.inputs, (std::vector<TensorId>{g.find_tensor("bn/running_mean"),
                                                  g.find_tensor("bn/running_var"),
                                                  g.node(bn).outputs[1], g.node(bn).outputs[2]}));
  EXPECT_EQ(std::get<double>(update.attrs.at("momentum")), 0.25);
  EXPECT_EQ(std::get<int64_t>(update.attrs.at("count")), 2 * 4 * 4);
  EXPECT_EQ(g.tensor(g.find_tensor("bn/running_var")).role, TensorRole::kOptimizerState);
  auto order = schedule(g);
  ASSERT_TRUE(order.ok()) << order.status();
  const std::vector<int> pos = positions(*order, g.num_nodes());
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const OpKind op = g.node(n).op;
    if (op == OpKind::kAdamUpdate || op == OpKind::kIncrement || op == OpKind::kBatchNorm) {
      EXPECT_LT(pos[n], pos[stats]) << g.node(n).name;
    }
  }
  // The backward pass reads x and gamma only, not the running statistics.
  EXPECT_EQ(g.node(g.find_node("grad/bn/bwd")).inputs.size(), 3u);
  // The text form carries the new attributes and op.
  auto parsed = parse_graph(to_text(g));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(to_text(*parsed), to_text(g));
}

TEST(Autodiff, AdamAddsMomentsAndStep) {
  Net net = conv_relu_conv();
  auto train = training_graph(net.g, net.loss, Adam{.lr = 1e-3, .clip_norm = 1.0});
  ASSERT_TRUE(train.ok()) << train.status();
  const Graph& g = *train;
  ASSERT_TRUE(verify(g).ok()) << verify(g);
  const TensorId step = g.find_tensor("optimizer/step");
  ASSERT_NE(step, kNoTensor);
  EXPECT_TRUE(g.tensor(step).shape.empty());
  EXPECT_EQ(g.tensor(step).role, TensorRole::kOptimizerState);
  const NodeId norm_node = g.find_node("optimizer/global_norm");
  ASSERT_NE(norm_node, kNoNode);
  EXPECT_EQ(g.node(norm_node).inputs.size(), 4u);
  const TensorId norm = g.node(norm_node).outputs[0];
  for (const char* p : {"conv1/w", "conv1/b", "conv2/w", "conv2/b"}) {
    for (const char* suffix : {"/adam_m", "/adam_v"}) {
      const TensorId s = g.find_tensor(std::string(p) + suffix);
      ASSERT_NE(s, kNoTensor) << p << suffix;
      EXPECT_EQ(g.tensor(s).shape, g.tensor(g.find_tensor(p)).shape);
    }
    const Node& update = g.node(g.find_node(std::string("update/") + p));
    EXPECT_EQ(update.op, OpKind::kAdamUpdate);
    ASSERT_EQ(update.inputs.size(), 6u);
    EXPECT_EQ(update.inputs[4], step);
    EXPECT_EQ(update.inputs[5], norm);
    EXPECT_EQ(std::get<double>(update.attrs.at("clip_norm")), 1.0);
    EXPECT_FALSE(update.attrs.contains("decay_steps")) << "constant lr by default";
  }
}

TEST(Autodiff, AdamPolyDecayIsAnAttributeOfEveryUpdate) {
  Net net = conv_relu_conv();
  auto train = training_graph(net.g, net.loss, Adam{.lr = 1e-3, .decay_steps = 50});
  ASSERT_TRUE(train.ok()) << train.status();
  int updates = 0;
  for (NodeId n = 0; n < train->num_nodes(); ++n) {
    const Node& node = train->node(n);
    if (node.op != OpKind::kAdamUpdate) continue;
    ++updates;
    EXPECT_EQ(std::get<int64_t>(node.attrs.at("decay_steps")), 50) << node.name;
    EXPECT_EQ(std::get<double>(node.attrs.at("decay_power")), 0.9) << node.name;
  }
  EXPECT_EQ(updates, 4);
}

TEST(Autodiff, TensorUsedTwiceAccumulatesWithAdd) {
  Graph fwd;
  TensorId x = fwd.input("x", {1, 2, 4, 4});
  TensorId h = conv2d(fwd, "c", x, 2, {3}, {.pad = {1}, .bias = false, .seed = 5});
  TensorId r = relu(fwd, "r", h);
  TensorId s = add(fwd, "skip", r, h);  // h feeds relu and the skip
  TensorId loss = reduce_mean(fwd, "loss", s);
  ASSERT_TRUE(fwd.status().ok()) << fwd.status();
  auto train = training_graph(fwd, loss, Sgd{.lr = 0.1});
  ASSERT_TRUE(train.ok()) << train.status();
  const Graph& g = *train;
  ASSERT_TRUE(verify(g).ok()) << verify(g);
  // The gradient of h is relu_bwd(...) + dskip: an add of gradient tensors
  // feeding conv_bwd_weights.
  const TensorId h_grad = g.find_tensor("grad/c/sum");
  ASSERT_NE(h_grad, kNoTensor);
  const Node& sum = g.node(g.tensor(h_grad).producer);
  EXPECT_EQ(sum.op, OpKind::kAdd);
  EXPECT_EQ(g.node(g.tensor(sum.inputs[1]).producer).op, OpKind::kReluBwd);
  EXPECT_EQ(new_op_counts(g, fwd.num_nodes()).at(OpKind::kAdd), 1);
  const TensorId wg = g.find_tensor("c/w/grad");
  ASSERT_NE(wg, kNoTensor);
  const Node& scale_node = g.node(g.tensor(wg).producer);
  const Node& bwd = g.node(g.tensor(scale_node.inputs[0]).producer);
  EXPECT_EQ(bwd.op, OpKind::kConvBwdWeights);
  EXPECT_EQ(bwd.inputs[1], h_grad);
}

TEST(Autodiff, ParameterUsedTwiceSumsIntoNamedGradient) {
  Graph fwd;
  TensorId x = fwd.input("x", {1, 2, 4, 4});
  TensorId w = fwd.parameter("w", {2, 2, 1, 1}, Init::he_normal(9, 2));
  TensorId a = conv(fwd, "a", x, w);
  TensorId b = conv(fwd, "b", a, w);
  TensorId loss = mse_loss(fwd, "loss", b, x);
  auto train = training_graph(fwd, loss, Sgd{.lr = 0.1});
  ASSERT_TRUE(train.ok()) << train.status();
  const Graph& g = *train;
  const TensorId grad = g.find_tensor("w/grad");
  ASSERT_NE(grad, kNoTensor);
  EXPECT_EQ(g.node(g.tensor(grad).producer).op, OpKind::kAdd);
  EXPECT_EQ(g.tensor(grad).shape, (Shape{2, 2, 1, 1}));
  EXPECT_EQ(new_op_counts(g, fwd.num_nodes()).at(OpKind::kConvBwdWeights), 2);
  // Only b's data gradient is needed (a's input is a graph input).
  EXPECT_EQ(new_op_counts(g, fwd.num_nodes()).at(OpKind::kConvBwdData), 1);
}

TEST(Autodiff, NonDifferentiableOpErrors) {
  Graph fwd;
  TensorId x = fwd.input("x", {1, 1, 4, 4});
  TensorId w = fwd.parameter("w", {1, 1, 1, 1}, Init::constant(1));
  TensorId y = conv(fwd, "c", x, w);
  auto swapped = fwd.add_node(OpKind::kSwapOut, "s", {y}, {});
  ASSERT_TRUE(swapped.ok()) << swapped.status();
  TensorId loss = reduce_mean(fwd, "loss", (*swapped)[0]);
  auto train = training_graph(fwd, loss, Sgd{.lr = 0.1});
  ASSERT_FALSE(train.ok());
  EXPECT_EQ(train.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(train.status().message().find("'s'"), absl::string_view::npos) << train.status();
  EXPECT_NE(train.status().message().find("swap_out"), absl::string_view::npos);
}

TEST(Autodiff, DiceTargetGradientIsRejected) {
  Graph fwd;
  TensorId x = fwd.input("x", {1, 2, 4, 4});
  TensorId p = softmax(fwd, "p", conv2d(fwd, "c", x, 2, {1}, {.seed = 1}));
  TensorId loss = soft_dice_loss(fwd, "dice", p, p);
  auto train = training_graph(fwd, loss, Sgd{.lr = 0.1});
  ASSERT_FALSE(train.ok());
  EXPECT_NE(train.status().message().find("target"), absl::string_view::npos) << train.status();
}

TEST(Autodiff, BadLossAndOptimizerErrors) {
  Net net = conv_relu_conv();
  const TensorId not_scalar = net.g.find_tensor("relu1");
  auto r1 = training_graph(net.g, not_scalar, Sgd{.lr = 0.1});
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find("scalar"), absl::string_view::npos) << r1.status();
  const TensorId scalar_input = net.g.input("s", {});
  auto r2 = training_graph(net.g, scalar_input, Sgd{.lr = 0.1});
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("not produced by a node"), absl::string_view::npos);
  auto r3 = training_graph(net.g, 12345, Sgd{.lr = 0.1});
  EXPECT_FALSE(r3.ok());
  auto r4 = training_graph(net.g, net.loss, Adam{.lr = 1e-3, .beta1 = 1.0});
  ASSERT_FALSE(r4.ok());
  EXPECT_NE(r4.status().message().find("Adam.beta1"), absl::string_view::npos) << r4.status();
  auto r4b = training_graph(net.g, net.loss, Adam{.decay_steps = -1});
  ASSERT_FALSE(r4b.ok());
  EXPECT_NE(r4b.status().message().find("Adam.decay_steps"), absl::string_view::npos)
      << r4b.status();
  auto r4c = training_graph(net.g, net.loss, Adam{.decay_steps = 10, .decay_power = 0});
  ASSERT_FALSE(r4c.ok());
  EXPECT_NE(r4c.status().message().find("Adam.decay_power"), absl::string_view::npos)
      << r4c.status();
  auto r5 = training_graph(net.g, net.loss, Sgd{.lr = -1});
  ASSERT_FALSE(r5.ok());
  EXPECT_NE(r5.status().message().find("Sgd.lr"), absl::string_view::npos) << r5.status();
  // A loss with no parameter behind it.
  Graph plain;
  TensorId a = plain.input("a", {2, 2});
  TensorId l = reduce_mean(plain, "l", a);
  auto r6 = training_graph(plain, l, Sgd{.lr = 0.1});
  ASSERT_FALSE(r6.ok());
  EXPECT_NE(r6.status().message().find("depends on no parameter"), absl::string_view::npos);
}

TEST(Autodiff, UnetLikeGraphDifferentiatesEveryForwardOp) {
  Graph fwd;
  TensorId x = fwd.input("x", {1, 1, 8, 8, 8});
  TensorId t = fwd.input("t", {1, 2, 8, 8, 8});
  TensorId e = leaky_relu(
      fwd, "e1a", instance_norm(fwd, "e1n", conv3d(fwd, "e1", x, 4, {3}, {.pad = {1}, .seed = 1})));
  TensorId d = max_pool3d(fwd, "pool", e, 2);
  d = conv3d(fwd, "b", d, 4, {3}, {.pad = {1}, .seed = 2});
  d = sigmoid(fwd, "bs", batch_norm(fwd, "bn", d));
  TensorId up = conv_transpose(fwd, "up", d, 4, {2}, {.stride = {2}, .seed = 3});
  TensorId up2 = upsample(fwd, "us", max_pool3d(fwd, "p2", e, 2), {2}, "nearest");
  TensorId cat = concat(fwd, "cat", {e, up, mul(fwd, "gate", up2, scale(fwd, "half", up2, 0.5))});
  TensorId logits = conv3d(fwd, "head", slice(fwd, "sl", cat, 0, 8), 2, {1}, {.seed = 4});
  TensorId loss = soft_dice_loss(fwd, "dice", softmax(fwd, "prob", logits), t);
  ASSERT_TRUE(fwd.status().ok()) << fwd.status();
  auto train = training_graph(fwd, loss, Adam{.lr = 1e-3});
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(verify(*train).ok()) << verify(*train);
  auto counts = new_op_counts(*train, fwd.num_nodes());
  for (OpKind op : {OpKind::kConvBwdData, OpKind::kConvBwdWeights, OpKind::kDeconvBwdData,
                    OpKind::kDeconvBwdWeights, OpKind::kUpsampleBwd, OpKind::kMaxPoolBwd,
                    OpKind::kInstanceNormBwd, OpKind::kBatchNormBwd, OpKind::kLeakyReluBwd,
                    OpKind::kSigmoidBwd, OpKind::kSoftmaxBwd, OpKind::kSoftDiceLossBwd,
                    OpKind::kSlice, OpKind::kConcat, OpKind::kFill}) {
    EXPECT_GE(counts[op], 1) << op_name(op);
  }
  int params = 0;
  for (TensorId p = 0; p < fwd.num_tensors(); ++p) {
    if (fwd.tensor(p).role != TensorRole::kParameter) continue;
    ++params;
    const TensorId grad = train->find_tensor(fwd.tensor(p).name + "/grad");
    ASSERT_NE(grad, kNoTensor) << fwd.tensor(p).name;
    EXPECT_EQ(train->tensor(grad).shape, fwd.tensor(p).shape);
  }
  EXPECT_EQ(counts[OpKind::kAdamUpdate], params);
}

}  // namespace
}  // namespace lms
