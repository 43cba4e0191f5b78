// The chunked language-model head (Note [Chunked language-model head]),
// through include/lms only: a matmul feeding softmax_cross_entropy, as a
// user or the ONNX importer writes it, planned for the CPU device with
// LmsConfig::chunked_head (off, the head stays as written). The
// planned graph computes the head and its loss as linear_cross_entropy and
// holds no tensor of N·V elements; the loss and every gradient match
// PyTorch's unchunked F.cross_entropy (float64), untied and tied to the
// embedding, with ignored positions; a fetched logits tensor keeps the
// head unfused; a plan with LMS gives the same bits as the plan without.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "budget_check.h"
#include "torch_compare.h"
#include "torch_reference.h"

namespace lms {
namespace {

using torch_ref::random_values;
using torch_ref::relative_l2;
using torch_ref::TorchTensors;
using user::kMiB;

constexpr int64_t kB = 2, kT = 13, kD = 8, kV = 300;

// Labels in [0, V) with every fifth position ignored (-100).
std::vector<int64_t> labels_for(std::mt19937_64& gen) {
  std::uniform_int_distribution<int64_t> cls(0, kV - 1);
  std::vector<int64_t> labels(kB * kT);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = i % 5 == 3 ? -100 : cls(gen);
  return labels;
}

// loss = cross-entropy(x · wᵀ, labels): x a parameter [B,T,D] (untied) or
// embedding(ids, w) + p (tied), w [V,D].
absl::StatusOr<Graph> head_model(bool tied, double lr = 0.0) {
  Graph g;
  const TensorId w = g.parameter("w", {kV, kD}, Init::he_normal(1, kD));
  TensorId x;
  if (tied) {
    const TensorId ids = g.input("ids", {kB, kT}, DType::kInt64);
    x = add(g, "x", embedding(g, "emb", ids, w),
            g.parameter("p", {kB, kT, kD}, Init::he_normal(2, kD)));
  } else {
    x = g.parameter("x", {kB, kT, kD}, Init::he_normal(3, kD));
  }
  const TensorId logits = matmul(g, "logits", x, w, false, true);
  g.set_loss(softmax_cross_entropy(g, "loss", logits, g.input("labels", {kB, kT}, DType::kInt64)));
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, g.loss(), Sgd{.lr = lr});
}

// The training graph planned without LMS for the CPU device.
absl::StatusOr<Graph> planned(const Graph& train, Device& device,
                              const std::vector<std::string>& fetched) {
  Graph g = train;
  LmsConfig off;
  off.enabled = false;
  off.chunked_head = true;
  RewriteOptions options;
  options.fetched = fetched;
  LMS_RETURN_IF_ERROR(rewrite(g, off, device, options).status());
  return g;
}

int count_op(const Graph& g, OpKind op) {
  int n = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) n += g.node(id).op == op;
  return n;
}

void check_against_torch(bool tied, uint64_t seed) {
  SCOPED_TRACE(tied ? "tied" : "untied");
  std::printf("head_loss seed %" PRIu64 "\n", seed);
  auto train = head_model(tied);
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(seed);
  TorchTensors in;
  in["w"] = {{kV, kD}, random_values(kV * kD, gen, 0.5f)};
  const std::vector<int64_t> labels = labels_for(gen);
  in["labels"] = {{kB, kT}, std::vector<float>(labels.begin(), labels.end())};
  Int64Feeds int64_feeds = {{"labels", labels}};
  std::vector<std::string> trained = {"w"};
  if (tied) {
    std::uniform_int_distribution<int64_t> tok(0, kV - 1);
    std::vector<int64_t> ids(kB * kT);
    for (int64_t& id : ids) id = tok(gen);
    in["ids"] = {{kB, kT}, std::vector<float>(ids.begin(), ids.end())};
    in["p"] = {{kB, kT, kD}, random_values(kB * kT * kD, gen, 1.0f)};
    int64_feeds["ids"] = ids;
    trained.push_back("p");
  } else {
    in["x"] = {{kB, kT, kD}, random_values(kB * kT * kD, gen, 2.0f)};
    trained.push_back("x");
  }
  auto ref = torch_ref::torch_reference("head_cross_entropy", {{"tied", {tied ? 1.0 : 0.0}}}, in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();

  std::vector<std::string> fetches = {"loss"};
  for (const std::string& t : trained) fetches.push_back(t + "/grad");
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  auto g = planned(*train, **device, fetches);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(count_op(*g, OpKind::kLinearCrossEntropy), 1);
  EXPECT_EQ(count_op(*g, OpKind::kLinearCrossEntropyBwd), 1);
  EXPECT_EQ(count_op(*g, OpKind::kSoftmaxCrossEntropy), 0);
  for (TensorId t = 0; t < g->num_tensors(); ++t) {
    EXPECT_LT(num_elements(g->tensor(t).shape), kB * kT * kV) << g->tensor(t).name;
  }
  auto session = Session::create(*g, **device, {.fetches = fetches});
  ASSERT_TRUE(session.ok()) << session.status();
  for (const std::string& t : trained) {
    ASSERT_TRUE((*session)->write(t, in.at(t).values).ok()) << t;
  }
  StepResult r;
  ASSERT_TRUE((*session)->run({}, int64_feeds, &r).ok());
  for (const std::string& name : fetches) {
    const double err = relative_l2(r.fetched.at(name), ref->at(name).values);
    std::printf("  %-8s relative L2 error %.3g\n", name.c_str(), err);
    EXPECT_LE(err, 1e-5) << name;
  }
}

TEST(HeadLoss, UntiedHeadMatchesPyTorch) { check_against_torch(false, 91); }

TEST(HeadLoss, TiedHeadMatchesPyTorch) { check_against_torch(true, 92); }

// A user who reads the logits keeps them, and without chunked_head
// nothing fuses: the head stays a matmul.
TEST(HeadLoss, FetchedLogitsOrTheDefaultKeepTheHeadUnfused) {
  auto train = head_model(false);
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  auto g = planned(*train, **device, {"loss", "logits"});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(count_op(*g, OpKind::kLinearCrossEntropy), 0);
  EXPECT_EQ(count_op(*g, OpKind::kSoftmaxCrossEntropy), 1);
  EXPECT_NE(g->find_tensor("logits"), kNoTensor);
  Graph plain = *train;
  LmsConfig defaults;
  defaults.enabled = false;
  ASSERT_TRUE(rewrite(plain, defaults, **device).ok());
  EXPECT_EQ(count_op(plain, OpKind::kLinearCrossEntropy), 0);
  EXPECT_EQ(count_op(plain, OpKind::kSoftmaxCrossEntropy), 1);
}

// A label outside [0, V) fails the step, naming the node and the label, as
// softmax_cross_entropy does.
TEST(HeadLoss, LabelOutOfRangeFailsTheStepNamingIt) {
  auto train = head_model(false);
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  auto g = planned(*train, **device, {"loss"});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(count_op(*g, OpKind::kLinearCrossEntropy), 1);
  auto session = Session::create(*g, **device, {.fetches = {"loss"}});
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<int64_t> labels(kB * kT, 1);
  labels[5] = kV;
  StepResult r;
  const absl::Status s = (*session)->run({}, {{"labels", labels}}, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("'loss'"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("label 300 at position 5"), absl::string_view::npos) << s;
}

// A tied language model with four MLP blocks, whose saved activations
// outweigh the head's chunk of logits: batch 4 x 64 tokens, width 32.
absl::StatusOr<Graph> tied_mlp_model() {
  constexpr int64_t kBatch = 4, kTokens = 64, kWidth = 32;
  Graph g;
  const TensorId w = g.parameter("w", {kV, kWidth}, Init::he_normal(1, kWidth));
  const TensorId ids = g.input("ids", {kBatch, kTokens}, DType::kInt64);
  TensorId x = add(g, "x", embedding(g, "emb", ids, w),
                   g.parameter("p", {kBatch, kTokens, kWidth}, Init::he_normal(2, kWidth)));
  for (int i = 0; i < 4; ++i) {
    const std::string b = "block" + std::to_string(i);
    const TensorId up =
        g.parameter(b + "/up/w", {kWidth, 4 * kWidth}, Init::he_normal(3 + i, kWidth));
    const TensorId down =
        g.parameter(b + "/down/w", {4 * kWidth, kWidth}, Init::he_normal(7 + i, 4 * kWidth));
    const TensorId h = gelu(g, b + "/gelu", matmul(g, b + "/up", x, up));
    x = add(g, b + "/out", x, matmul(g, b + "/down", h, down));
  }
  const TensorId logits = matmul(g, "logits", x, w, false, true);
  g.set_loss(softmax_cross_entropy(g, "loss", logits,
                                   g.input("labels", {kBatch, kTokens}, DType::kInt64)));
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, g.loss(), Sgd{.lr = 0.5});
}

// Planned with LMS at a budget that needs it, the fused head trains to the
// same bits as without LMS, at the predicted peak.
TEST(HeadLoss, TiedHeadWithLmsIsBitIdentical) {
  auto train = tied_mlp_model();
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(93);
  std::printf("head_loss seed 93\n");
  std::uniform_int_distribution<int64_t> tok(0, kV - 1);
  std::vector<int64_t> ids(4 * 64), labels(4 * 64);
  for (int64_t& id : ids) id = tok(gen);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = i % 7 == 2 ? -100 : tok(gen);
  const Int64Feeds int64_feeds = {{"ids", ids}, {"labels", labels}};
  LmsConfig config;
  config.chunked_head = true;
  user::expect_lms_steps_bit_identical(*train, {}, 3, int64_feeds, config);
}

}  // namespace
}  // namespace lms
