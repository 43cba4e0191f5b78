// lms::attach_loss (lms/loss.h) through include/lms only: what it adds for
// each loss (the labels or target input, the loss node, graph.loss()), that
// the result trains, and each error with its message, the graph unchanged
// after every one. The numbers of the cross-entropy it attaches are checked
// against PyTorch in cross_entropy_test.cc.
#include <gtest/gtest.h>

#include <cinttypes>
#include <functional>
#include <random>
#include <string>

#include "lms/loss.h"
#include "torch_reference.h"
#include "user_models.h"

namespace lms {
namespace {

using user::kMiB;

// A forward graph without a loss, as import_onnx gives one: x[8,16] ->
// linear -> "logits" [8,5], and a pooled head "pooled" [8,5,1,1] beside it.
Graph classifier() {
  Graph g;
  const TensorId x = g.input("x", {8, 16});
  const TensorId w = g.parameter("w", {5, 16}, Init::he_normal(1, 16));
  const TensorId logits = linear(g, "logits", x, w);
  reshape(g, "pooled", logits, {8, 5, 1, 1});
  return g;
}

// A segmentation-like output [2,3,4,4] (N, C, H, W).
Graph segmenter() {
  Graph g;
  const TensorId x = g.input("image", {2, 1, 4, 4});
  conv2d(g, "head", x, 3, {1}, {.seed = 2});
  return g;
}

TEST(AttachLoss, CrossEntropyAddsInt64LabelsAndTheLossNode) {
  Graph g = classifier();
  auto loss = attach_loss(g, "logits", CrossEntropy{.labels = "y", .ignore_index = 3});
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(g.loss(), *loss);
  EXPECT_EQ(g.tensor(*loss).name, "loss");
  EXPECT_EQ(g.tensor(*loss).shape, Shape{});
  const TensorId labels = g.find_tensor("y");
  ASSERT_NE(labels, kNoTensor);
  EXPECT_EQ(g.tensor(labels).dtype, DType::kInt64);
  EXPECT_EQ(g.tensor(labels).shape, Shape{8});
  EXPECT_EQ(g.tensor(labels).role, TensorRole::kInput);
  const Node& node = g.node(g.tensor(*loss).producer);
  EXPECT_EQ(node.op, OpKind::kSoftmaxCrossEntropy);
  EXPECT_EQ(node.inputs, (std::vector<TensorId>{g.find_tensor("logits"), labels}));
  EXPECT_EQ(std::get<int64_t>(node.attrs.at("ignore_index")), 3);
}

// A sequence model's logits [N,T,V]: with classes_last the labels are
// [N,T], one next token per position.
TEST(AttachLoss, CrossEntropyWithClassesLastTakesLabelsPerPosition) {
  Graph g;
  const TensorId x = g.input("x", {2, 7, 16});
  const TensorId w = g.parameter("w", {16, 11}, Init::he_normal(1, 16));
  const TensorId logits =
      reshape(g, "logits", linear(g, "flat", reshape(g, "rows", x, {14, 16}), w, kNoTensor, false),
              {2, 7, 11});
  auto loss = attach_loss(g, "logits", CrossEntropy{.labels = "next", .classes_last = true});
  ASSERT_TRUE(loss.ok()) << loss.status();
  const TensorId labels = g.find_tensor("next");
  ASSERT_NE(labels, kNoTensor);
  EXPECT_EQ(g.tensor(labels).shape, (Shape{2, 7}));
  EXPECT_EQ(g.tensor(labels).dtype, DType::kInt64);
  EXPECT_EQ(g.node(g.tensor(*loss).producer).inputs, (std::vector<TensorId>{logits, labels}));
}

TEST(AttachLoss, MseAndSoftDiceAddAFloatTargetOfTheOutputsShape) {
  Graph g = segmenter();
  auto mse = attach_loss(g, "head", Mse{.target = "mask"}, "mse");
  ASSERT_TRUE(mse.ok()) << mse.status();
  EXPECT_EQ(g.node(g.tensor(*mse).producer).op, OpKind::kMseLoss);
  EXPECT_EQ(g.tensor(g.find_tensor("mask")).shape, (Shape{2, 3, 4, 4}));
  EXPECT_EQ(g.tensor(g.find_tensor("mask")).dtype, DType::kFloat32);

  Graph d = segmenter();
  auto dice = attach_loss(d, "head", SoftDice{.eps = 1.0, .softmax = true});
  ASSERT_TRUE(dice.ok()) << dice.status();
  const Node& node = d.node(d.tensor(*dice).producer);
  EXPECT_EQ(node.op, OpKind::kSoftDiceLoss);
  EXPECT_EQ(std::get<double>(node.attrs.at("eps")), 1.0);
  // With softmax the loss reads the probabilities over the channels.
  const TensorId probs = d.find_tensor("loss/probs");
  ASSERT_NE(probs, kNoTensor);
  EXPECT_EQ(d.node(d.tensor(probs).producer).op, OpKind::kSoftmax);
  EXPECT_EQ(node.inputs, (std::vector<TensorId>{probs, d.find_tensor("target")}));
}

// The graph attach_loss gives goes through training_graph and a Session
// as it is: the loss falls over a few SGD steps.
TEST(AttachLoss, TheResultTrains) {
  constexpr uint64_t kSeed = 71;
  std::printf("seed %" PRIu64 "\n", kSeed);
  Graph g = classifier();
  auto loss = attach_loss(g, "logits", CrossEntropy{});
  ASSERT_TRUE(loss.ok()) << loss.status();
  auto train = training_graph(g, *loss, Sgd{.lr = 0.5});
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_cpu_device({.capacity_bytes = 16 * kMiB, .host_pool_bytes = kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session = Session::create(*train, **device, {.fetches = {"loss"}});
  ASSERT_TRUE(session.ok()) << session.status();
  std::mt19937_64 gen(kSeed);
  const Feeds x = {{"x", torch_ref::random_values(8 * 16, gen)}};
  const Int64Feeds labels = {{"labels", {0, 1, 2, 3, 4, 0, 1, 2}}};
  std::vector<float> losses;
  for (int s = 0; s < 5; ++s) {
    StepResult r;
    ASSERT_TRUE((*session)->run(x, labels, &r).ok());
    losses.push_back(r.fetched.at("loss")[0]);
  }
  EXPECT_LT(losses.back(), losses.front());
}

// Each error names what was wrong and what is allowed, and leaves the graph
// as it was.
void expect_error(Graph g, const std::function<absl::StatusOr<TensorId>(Graph&)>& attach,
                  const std::string& want) {
  SCOPED_TRACE(want);
  const int32_t tensors = g.num_tensors(), nodes = g.num_nodes();
  const TensorId loss_before = g.loss();
  absl::StatusOr<TensorId> loss = attach(g);
  ASSERT_FALSE(loss.ok());
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(loss.status().message().find(want), absl::string_view::npos) << loss.status();
  EXPECT_NE(loss.status().message().find("attach_loss: "), absl::string_view::npos);
  EXPECT_EQ(g.num_tensors(), tensors);
  EXPECT_EQ(g.num_nodes(), nodes);
  EXPECT_EQ(g.loss(), loss_before);
  EXPECT_TRUE(g.status().ok()) << g.status();
}

TEST(AttachLoss, ErrorsNameTheProblemAndLeaveTheGraphUnchanged) {
  const Graph c = classifier();
  expect_error(
      c, [](Graph& g) { return attach_loss(g, "logit", CrossEntropy{}); },
      "no tensor named 'logit' in the graph; its outputs are: pooled");
  expect_error(
      c, [](Graph& g) { return attach_loss(g, TensorId{99}, CrossEntropy{}); },
      "output 99 is not a tensor of the graph");
  expect_error(
      c, [](Graph& g) { return attach_loss(g, "pooled", CrossEntropy{}); },
      "CrossEntropy needs logits [N,C] (or [..., C] with CrossEntropy.classes_last, C > 1), but "
      "output 'pooled' is [8,5,1,1]; flatten it first (lms::flatten(graph, \"pooled/flat\", "
      "output) gives [8,5]) and attach the loss to that, or, for logits with the classes on the "
      "last axis ([N,T,V]), set CrossEntropy.classes_last");
  expect_error(
      c, [](Graph& g) { return attach_loss(g, "pooled", CrossEntropy{.classes_last = true}); },
      "but output 'pooled' is [8,5,1,1]; flatten it first");
  expect_error(
      c, [](Graph& g) { return attach_loss(g, "logits", CrossEntropy{.labels = "x"}); },
      "CrossEntropy.labels 'x' is already the name of a tensor or node of the graph");
  expect_error(
      c, [](Graph& g) { return attach_loss(g, "logits", CrossEntropy{}, "w"); },
      "the loss name 'w' is already the name of a tensor or node of the graph");
  expect_error(
      c, [](Graph& g) { return attach_loss(g, "logits", CrossEntropy{.labels = "loss"}); },
      "CrossEntropy.labels and the loss name are both 'loss'; they must differ");
  expect_error(
      c, [](Graph& g) { return attach_loss(g, "logits", CrossEntropy{.labels = "my labels"}); },
      "contains whitespace");
  expect_error(
      c, [](Graph& g) { return attach_loss(g, "logits", CrossEntropy{.labels = ""}); },
      "empty tensor or node name");
  expect_error(
      c, [](Graph& g) { return attach_loss(g, "logits", SoftDice{}); },
      "SoftDice needs an output [N,C,S] with one or more spatial dims, but output 'logits' is "
      "[8,5]");
  expect_error(
      segmenter(), [](Graph& g) { return attach_loss(g, "head", SoftDice{.eps = -1}); },
      "SoftDice.eps is -1; allowed: >= 0");
  expect_error(
      segmenter(), [](Graph& g) { return attach_loss(g, "head", CrossEntropy{}); },
      "flatten it first (lms::flatten(graph, \"head/flat\", output) gives [2,48])");

  Graph ids;
  embedding(ids, "emb", ids.input("ids", {4}, DType::kInt64), ids.parameter("t", {6, 3}, Init{}));
  ASSERT_TRUE(ids.status().ok()) << ids.status();
  expect_error(
      ids, [](Graph& g) { return attach_loss(g, "ids", Mse{}); },
      "output 'ids' is i64; a loss needs a float32 output");

  Graph with_loss = classifier();
  ASSERT_TRUE(attach_loss(with_loss, "logits", CrossEntropy{}).ok());
  expect_error(
      with_loss, [](Graph& g) { return attach_loss(g, "pooled", Mse{}, "loss2"); },
      "the graph already has a loss, 'loss'");
}

TEST(AttachLoss, AGraphWithARecordedErrorIsRefused) {
  Graph g = classifier();
  relu(g, "bad", TensorId{1234});
  ASSERT_FALSE(g.status().ok());
  auto loss = attach_loss(g, "logits", CrossEntropy{});
  ASSERT_FALSE(loss.ok());
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(loss.status().message().find("the graph holds an error: "), absl::string_view::npos)
      << loss.status();
}

}  // namespace
}  // namespace lms
