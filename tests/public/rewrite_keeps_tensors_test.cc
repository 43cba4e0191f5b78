// Every pass of lms::rewrite that rebuilds a graph (conv + relu fusion, the
// CPU device's blocked layouts, swap insertion, recomputation) keeps each
// tensor it does not remove with its name, dtype, shape and role: checked
// through the public API on two graphs with int64 inputs (a conv -> relu
// classifier with int64 labels, the graph whose fusion once turned the
// labels into float32, and a token model with int64 ids), planned with
// swaps, with recomputation (the token model) and with both at a budget
// that needs them. Each plan then trains a step with the int64 feeds, bit
// for bit as without LMS.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "budget_check.h"
#include "lms/config.h"
#include "lms/device.h"
#include "lms/ops.h"
#include "lms/rewrite.h"
#include "lms/training.h"

namespace lms::user {
namespace {

constexpr uint64_t kSeed = 4711;

// conv -> relu -> conv -> relu -> max_pool -> global_avg_pool -> linear,
// cross-entropy with int64 labels; SGD.
absl::StatusOr<Graph> classifier() {
  Graph g;
  const TensorId x = g.input("x", {4, 3, 16, 16});
  TensorId h = relu(g, "relu1", conv2d(g, "conv1", x, 8, {3}, {.pad = {1}, .seed = 1}));
  h = relu(g, "relu2", conv2d(g, "conv2", h, 16, {3}, {.pad = {1}, .seed = 2}));
  h = flatten(g, "flat", global_avg_pool(g, "gap", max_pool2d(g, "pool", h, 2)));
  const TensorId w = g.parameter("fc/w", {5, 16}, Init::he_normal(3, 16));
  const TensorId logits = linear(g, "fc", h, w);
  g.set_loss(softmax_cross_entropy(g, "loss", logits, g.input("labels", {4}, DType::kInt64)));
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, g.loss(), Sgd{.lr = 0.05, .momentum = 0.9});
}

// embedding of int64 ids -> linear -> gelu -> linear, cross-entropy with
// int64 targets.
absl::StatusOr<Graph> token_model() {
  Graph g;
  const TensorId ids = g.input("ids", {8 * 16}, DType::kInt64);
  const TensorId table = g.parameter("emb/table", {32, 24}, Init::he_normal(4, 24));
  TensorId h = embedding(g, "emb", ids, table);
  h = gelu(g, "act", linear(g, "up", h, g.parameter("up/w", {48, 24}, Init::he_normal(5, 24))));
  const TensorId logits =
      linear(g, "down", h, g.parameter("down/w", {32, 48}, Init::he_normal(6, 48)));
  g.set_loss(softmax_cross_entropy(g, "loss", logits, g.input("targets", {8 * 16}, DType::kInt64)));
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, g.loss(), Sgd{.lr = 0.05});
}

std::vector<int64_t> tokens(size_t n, int64_t vocabulary, uint64_t seed) {
  std::vector<int64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int64_t>((i * 7 + seed) % vocabulary);
  return v;
}

// Every tensor of `before` that `after` still has (by name) keeps its
// dtype, shape and role; those it lost are only fused-away conv outputs.
void expect_tensors_kept(const Graph& before, const Graph& after, const RewriteReport& report) {
  int kept = 0;
  for (TensorId t = 0; t < before.num_tensors(); ++t) {
    const Tensor& x = before.tensor(t);
    const TensorId u = after.find_tensor(x.name);
    if (u == kNoTensor) {
      // A fused conv's output: the fused node takes the relu's name.
      EXPECT_EQ(x.role, TensorRole::kActivation) << x.name;
      EXPECT_FALSE(report.fused.empty()) << x.name << " is gone with nothing fused";
      continue;
    }
    ++kept;
    const Tensor& y = after.tensor(u);
    EXPECT_EQ(y.dtype, x.dtype) << x.name;
    EXPECT_EQ(y.shape, x.shape) << x.name;
    EXPECT_EQ(y.role, x.role) << x.name;
  }
  EXPECT_GT(kept, before.num_tensors() / 2);
}

struct Case {
  const char* name;
  absl::StatusOr<Graph> (*build)();
  Feeds feeds;
  Int64Feeds int64_feeds;
  std::vector<AutoActions> actions;  // the plans to check
};

TEST(RewriteKeepsTensors, EveryPlanKeepsNamesDtypesShapesAndRoles) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  std::mt19937_64 gen(kSeed);
  std::normal_distribution<float> normal;
  std::vector<float> x(4 * 3 * 16 * 16);
  for (float& v : x) v = normal(gen);
  const std::vector<Case> cases = {
      // No budget of the small classifier is met by recomputation alone.
      {"classifier",
       &classifier,
       {{"x", x}},
       {{"labels", {0, 3, 1, 4}}},
       {AutoActions::kSwap, AutoActions::kJoint}},
      {"token model",
       &token_model,
       {},
       {{"ids", tokens(8 * 16, 32, 1)}, {"targets", tokens(8 * 16, 32, 2)}},
       {AutoActions::kSwap, AutoActions::kRecompute, AutoActions::kJoint}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto train = c.build();
    ASSERT_TRUE(train.ok()) << train.status();
    const NoLmsReference ref = no_lms_reference(*train, c.feeds, 1, c.int64_feeds);
    ASSERT_TRUE(ref.ok);
    for (AutoActions actions : c.actions) {
      SCOPED_TRACE(auto_actions_name(actions));
      LmsConfig config;
      config.auto_actions = actions;
      config.time_model = TimeModel::kRoofline;  // the same plans on every machine
      const std::optional<BudgetPlan> plan =
          first_plan_in_sweep(*train, ref, config, 32, [](const Graph&, const RewriteReport& r) {
            return !r.swapped.empty() || !r.recomputed.empty();
          });
      ASSERT_TRUE(plan.has_value()) << "no budget planned to fit with a tensor swapped or "
                                       "recomputed";
      expect_tensors_kept(*train, plan->graph, plan->report);
      expect_steps_bit_identical(*plan, c.feeds, ref, c.int64_feeds);
    }
  }
}

}  // namespace
}  // namespace lms::user
