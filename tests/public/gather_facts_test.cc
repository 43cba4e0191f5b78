// lms::gather_facts and the failure sites of lms/status.h, used as a user
// would (include/lms only), on a small image classifier whose convolutions
// feed relus directly and whose loss is a cross-entropy over int64 labels:
//  - the default lms::rewrite on the CPU device (conv + relu fused) plans
//    and trains it, and every tensor the fusion keeps has its dtype (the
//    labels stay int64);
//  - facts gathered once and passed to lms::rewrite give the plan that
//    rewrite gathers itself, by NodeId of the graph the user holds;
//  - with a communicator of one rank the facts are rank 0's own;
//  - a step or a session that runs out of device memory carries where
//    (lms::failure_site), so no caller parses the message.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "lms/config.h"
#include "lms/device.h"
#include "lms/distributed.h"
#include "lms/facts.h"
#include "lms/graph.h"
#include "lms/ops.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/training.h"
#include "one_rank.h"

namespace lms {
namespace {

constexpr uint64_t kSeed = 4411;
constexpr int64_t kBatch = 4;
constexpr int64_t kClasses = 10;

// conv -> relu -> conv -> relu -> global average pool -> linear -> cross-
// entropy: what VGG without batch norm or a user's small CNN looks like.
absl::StatusOr<Graph> classifier() {
  Graph g;
  const TensorId x = g.input("image", {kBatch, 3, 16, 16});
  const TensorId labels = g.input("labels", {kBatch}, DType::kInt64);
  TensorId y = conv2d(g, "conv1", x, 16, {3}, {.pad = {1, 1}});
  y = relu(g, "relu1", y);
  y = conv2d(g, "conv2", y, 16, {3}, {.pad = {1, 1}});
  y = relu(g, "relu2", y);
  y = flatten(g, "flat", global_avg_pool(g, "pool", y));
  const TensorId w = g.parameter("fc/w", {kClasses, 16}, Init::he_normal(kSeed, 16));
  y = linear(g, "fc", y, w);
  const TensorId loss = softmax_cross_entropy(g, "loss", y, labels);
  if (!g.status().ok()) return g.status();
  return training_graph(g, loss, Sgd{.lr = 0.05, .momentum = 0.9});
}

Feeds image_feeds(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> image(kBatch * 3 * 16 * 16);
  for (float& v : image) v = u(rng);
  return {{"image", image}};
}

Int64Feeds label_feeds() { return {{"labels", {3, 1, 4, 1}}}; }

TEST(ConvReluClassifier, PlansAndTrainsWithTheDefaultFusionAndKeepsTheLabelsInt64) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  absl::StatusOr<Graph> train = classifier();
  ASSERT_TRUE(train.ok()) << train.status();
  absl::StatusOr<std::unique_ptr<Device>> device = make_cpu_device({});
  ASSERT_TRUE(device.ok()) << device.status();
  Graph planned = *train;
  absl::StatusOr<RewriteReport> rep = rewrite(planned, LmsConfig{}, **device);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->fused, (std::vector<std::string>{"relu1", "relu2"}));
  // Every tensor the fusion kept has its dtype, shape and role.
  int kept = 0;
  for (TensorId t = 0; t < train->num_tensors(); ++t) {
    const Tensor& before = train->tensor(t);
    const TensorId u = planned.find_tensor(before.name);
    if (u == kNoTensor) continue;
    ++kept;
    EXPECT_EQ(planned.tensor(u).dtype, before.dtype) << before.name;
    EXPECT_EQ(planned.tensor(u).shape, before.shape) << before.name;
    EXPECT_EQ(planned.tensor(u).role, before.role) << before.name;
  }
  EXPECT_GT(kept, train->num_tensors() / 2);
  EXPECT_EQ(planned.tensor(planned.find_tensor("labels")).dtype, DType::kInt64);
  absl::StatusOr<std::unique_ptr<Session>> session = Session::create(planned, **device);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<float> losses;
  for (int step = 0; step < 3; ++step) {
    StepResult r;
    ASSERT_TRUE((*session)->run(image_feeds(kSeed), label_feeds(), &r).ok());
    losses.push_back(r.fetched.at("loss").at(0));
  }
  // The same batch three times: SGD lowers its loss.
  EXPECT_LT(losses.back(), losses.front());
}

TEST(GatherFacts, GatheredOnceGiveTheSamePlanAsTheRewriteGathersItself) {
  absl::StatusOr<Graph> train = classifier();
  ASSERT_TRUE(train.ok()) << train.status();
  absl::StatusOr<std::unique_ptr<Device>> device = make_cpu_device({});
  ASSERT_TRUE(device.ok()) << device.status();
  LmsConfig config;
  config.time_model = TimeModel::kRoofline;  // the same times on both sides
  absl::StatusOr<PlanningFacts> facts = gather_facts(*train, config, **device);
  ASSERT_TRUE(facts.ok()) << facts.status();
  // By NodeId of the user's graph; a relu fused into its conv has none.
  ASSERT_TRUE(facts->workspace_bytes.has_value());
  EXPECT_EQ(facts->workspace_bytes->size(), static_cast<size_t>(train->num_nodes()));
  EXPECT_EQ((*facts->workspace_bytes)[train->find_node("relu1")], 0u);
  EXPECT_EQ(facts->device_capacity_bytes, (*device)->memory_stats().capacity_bytes);
  EXPECT_EQ(facts->device_kind, (*device)->kind());
  EXPECT_EQ((*device)->memory_stats().bytes_in_use, 0u);

  // A budget halfway between the working-set limit and the unplanned peak
  // makes the plan swap or recompute, whatever workspaces the kernels need.
  Graph probe = *train;
  LmsConfig off = config;
  off.enabled = false;
  absl::StatusOr<RewriteReport> none = rewrite(probe, off, **device);
  ASSERT_TRUE(none.ok()) << none.status();
  config.device_memory_limit = (none->working_set_limit_bytes + none->peak_bytes_before) / 2;
  Graph a = *train, b = *train;
  absl::StatusOr<RewriteReport> by_itself = rewrite(a, config, **device);
  absl::StatusOr<RewriteReport> with_facts = rewrite(b, config, **device, {}, *facts);
  ASSERT_TRUE(by_itself.ok()) << by_itself.status();
  ASSERT_TRUE(with_facts.ok()) << with_facts.status();
  EXPECT_FALSE(by_itself->swapped.empty() && by_itself->recomputed.empty());
  EXPECT_EQ(with_facts->plan_text, by_itself->plan_text);
  EXPECT_EQ(with_facts->peak_bytes_after, by_itself->peak_bytes_after);
  EXPECT_EQ(to_text(b), to_text(a));
  // Generated nodes are typed by their origin (insert's names only for the
  // reader): swap copies, recompute clones, the fused conv + relu.
  int generated = 0;
  for (NodeId id = 0; id < a.num_nodes(); ++id) {
    const Node& n = a.node(id);
    NodeOrigin expected = NodeOrigin::kOriginal;
    if (n.op == OpKind::kSwapOut || n.op == OpKind::kSwapIn) expected = NodeOrigin::kSwap;
    if (n.name.starts_with("recompute/")) expected = NodeOrigin::kRecompute;
    if (n.name == "relu1" || n.name == "relu2") expected = NodeOrigin::kFused;
    EXPECT_EQ(n.origin, expected) << n.name << " is " << node_origin_name(n.origin);
    generated += expected != NodeOrigin::kOriginal;
  }
  EXPECT_GT(generated, 2);
}

TEST(GatherFacts, MeasuredTimesComeFromRankZeroAndNameWhereTheyWereMeasured) {
  absl::StatusOr<Graph> train = classifier();
  ASSERT_TRUE(train.ok()) << train.status();
  absl::StatusOr<std::unique_ptr<Device>> device = make_cpu_device({});
  ASSERT_TRUE(device.ok()) << device.status();
  LmsConfig config;  // time_model "measured"
  absl::StatusOr<PlanningFacts> alone = gather_facts(*train, config, **device);
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_EQ(alone->node_time_s.size(), static_cast<size_t>(train->num_nodes()));
  EXPECT_GT(alone->node_time_s[train->find_node("conv1")], 0);
  EXPECT_EQ(alone->node_time_s[train->find_node("relu1")], 0);  // fused into conv1
  EXPECT_TRUE(alone->link.has_value());
  EXPECT_TRUE(alone->roofline.has_value());
  EXPECT_EQ(alone->measured_on, (*device)->name());
  // One rank: no collective is needed, and the facts say one rank.
  user::OneRank one;
  absl::StatusOr<PlanningFacts> ranked = gather_facts(*train, config, **device, &one);
  ASSERT_TRUE(ranked.ok()) << ranked.status();
  EXPECT_EQ(ranked->ranks, 1);
  // The rewrite given the facts measures nothing more and says where they
  // come from.
  Graph g = *train;
  absl::StatusOr<RewriteReport> rep = rewrite(g, config, **device, {}, *alone);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_NE(rep->time_model.find("measured on " + (*device)->name()), std::string::npos)
      << rep->time_model;
}

TEST(GatherFacts, RefusesADeviceThatHoldsMemory) {
  absl::StatusOr<Graph> train = classifier();
  ASSERT_TRUE(train.ok()) << train.status();
  absl::StatusOr<std::unique_ptr<Device>> device = make_cpu_device({});
  ASSERT_TRUE(device.ok()) << device.status();
  absl::StatusOr<void*> held = (*device)->allocate(4096);
  ASSERT_TRUE(held.ok());
  absl::StatusOr<PlanningFacts> facts = gather_facts(*train, LmsConfig{}, **device);
  EXPECT_EQ(facts.status().code(), absl::StatusCode::kFailedPrecondition) << facts.status();
  (*device)->deallocate(*held);
}

TEST(FailureSite, AnOutOfMemorySessionOrStepNamesWhereWithoutParsing) {
  absl::StatusOr<Graph> train = classifier();
  ASSERT_TRUE(train.ok()) << train.status();
  // A device far too small for the unplanned step's arena.
  absl::StatusOr<std::unique_ptr<Device>> tiny = make_cpu_device({.capacity_bytes = 64 << 10});
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  absl::StatusOr<std::unique_ptr<Session>> session = Session::create(*train, **tiny);
  absl::Status status = session.status();
  if (session.ok()) {
    StepResult r;
    status = (*session)->run(image_feeds(kSeed), label_feeds(), &r);
  }
  ASSERT_TRUE(absl::IsResourceExhausted(status)) << status;
  const std::optional<FailureSite> site = failure_site(status);
  ASSERT_TRUE(site.has_value()) << status;
  EXPECT_TRUE(site->stage == kStageNode || site->stage == kStageArena ||
              site->stage == kStagePersistent)
      << site->stage;
  if (site->stage != kStageArena) {
    EXPECT_NE(status.message().find(site->name), absl::string_view::npos) << status;
  }
  // Context added by with_message keeps the site.
  const absl::Status wrapped = with_message(status, "outer: " + std::string(status.message()));
  ASSERT_TRUE(failure_site(wrapped).has_value());
  EXPECT_EQ(failure_site(wrapped)->name, site->name);
  EXPECT_FALSE(failure_site(absl::InternalError("no site")).has_value());
}

}  // namespace
}  // namespace lms
