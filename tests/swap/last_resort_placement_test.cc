// Per Note [Last-resort placement], where the plan for the working-set limit
// misses only in its layout, the search lays it out once more with a longer
// placement search before it gives the candidate up. On a ResNet-like graph
// (bottleneck blocks with residual adds) whose convolutions have workspaces
// of 1.5x their output, the workspaces given as planning facts (so no kernel
// choice of the machine enters), each layout placed by the heuristics alone,
// at budgets from the working-set limit towards the no-LMS peak:
//  - every budget that plans without the long search plans with it, and
//    every plan that fits holds its predicted peak within the budget;
//  - some budget plans only with it.
// Per Note [Last-resort plan], where that still misses, the variant
// is planned once more for the working-set limit with every tensor it can
// hide swapped. With every layout by the heuristics alone and no long
// search:
//  - every budget that plans without that plan plans with it, and every plan
//    that fits holds its predicted peak within the budget;
//  - some budget plans only with it, by swapping.
#include <cinttypes>
#include <cstdio>

#include "gtest/gtest.h"
#include "lms/config.h"
#include "lms/ops.h"
#include "lms/status.h"
#include "lms/training.h"
#include "swap/placement.h"
#include "swap/search.h"

namespace lms::swap {
namespace {

constexpr int64_t kBatch = 8, kSize = 32, kBlocks = 4, kMid = 8, kWide = 32;
// Budgets from the working-set limit up to this fraction of the way to the
// no-LMS peak, where the layouts are tight.
constexpr double kRange = 0.3;
constexpr int kSteps = 32;

Graph resnet_like() {
  Graph g;
  const TensorId x = g.input("x", {kBatch, 8, kSize, kSize});
  TensorId h = relu(g, "stem_relu", conv2d(g, "stem", x, kWide, {3}, {.pad = {1}, .seed = 1}));
  for (int b = 0; b < kBlocks; ++b) {
    const std::string p = "block" + std::to_string(b) + "/";
    const uint64_t seed = 10 * static_cast<uint64_t>(b + 1);
    TensorId a = relu(g, p + "relu1", conv2d(g, p + "conv1", h, kMid, {1}, {.seed = seed}));
    a = relu(g, p + "relu2", conv2d(g, p + "conv2", a, kMid, {3}, {.pad = {1}, .seed = seed + 1}));
    a = conv2d(g, p + "conv3", a, kWide, {1}, {.seed = seed + 2});
    h = relu(g, p + "relu3", add(g, p + "residual", a, h));
  }
  const TensorId y = conv2d(g, "head", h, 1, {3}, {.pad = {1}, .seed = 99});
  const TensorId loss = mse_loss(g, "loss", y, g.input("target", {kBatch, 1, kSize, kSize}));
  auto train = training_graph(g, loss, Sgd{.lr = 0.01, .momentum = 0.9});
  EXPECT_TRUE(train.ok()) << train.status();
  return *train;
}

// 1.5x the bytes of each convolution's first output.
std::vector<uint64_t> workspaces(const Graph& g) {
  std::vector<uint64_t> ws(g.num_nodes(), 0);
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (is_conv_family(node.op)) ws[n] = g.tensor(node.outputs[0]).bytes() * 3 / 2;
  }
  return ws;
}

// Every layout with the heuristics alone (no placement search), so that on
// a graph this small the bounded layouts miss as ResNet-50's 1,170 buffers
// do under the bounded search; the last resort searches `last_resort`
// placed buffers (0: none).
absl::StatusOr<RewriteReport> plan(const Graph& train, uint64_t budget, bool enabled,
                                   int64_t last_resort, bool last_resort_plan = false) {
  Graph g = train;
  LmsConfig config;
  config.enabled = enabled;
  config.time_model = TimeModel::kRoofline;
  PlanningFacts facts{.device_capacity_bytes = budget,
                      .host_pool_bytes = uint64_t{1} << 32,
                      .workspace_bytes = workspaces(train)};
  LMS_ASSIGN_OR_RETURN(PlannedStep step, swap::plan(g, config, facts, {.fetched = {"loss"}},
                                                    {.layout_placed_buffers = 0,
                                                     .last_resort_placed_buffers = last_resort,
                                                     .last_resort_plan = last_resort_plan}));
  return step.rep;
}

TEST(LastResortPlacement, PlansWhereTheBoundedSearchGivesUp) {
  const Graph train = resnet_like();
  const int64_t longer = SearchOptions{}.last_resort_placed_buffers;
  auto none = plan(train, uint64_t{1} << 32, false, longer);
  ASSERT_TRUE(none.ok()) << none.status();
  const uint64_t low = none->working_set_limit_bytes, high = none->peak_bytes_after;
  std::printf("working-set limit %" PRIu64 " B, no-LMS peak %" PRIu64 " B\n", low, high);
  ASSERT_LT(low, high);
  int rescued = 0, both = 0;
  for (int i = 0; i <= kSteps; ++i) {
    const uint64_t budget =
        low + static_cast<uint64_t>(kRange * static_cast<double>(high - low) * i / kSteps);
    SCOPED_TRACE(testing::Message() << "budget " << budget);
    auto with = plan(train, budget, true, longer);
    auto without = plan(train, budget, true, 0);
    const bool fits_with = with.ok() && with->fits;
    const bool fits_without = without.ok() && without->fits;
    if (fits_with) {
      EXPECT_LE(with->peak_bytes_after, budget);
    }
    if (fits_without) {
      EXPECT_TRUE(fits_with) << "the long search lost a plan";
      ++both;
    }
    rescued += fits_with && !fits_without;
  }
  std::printf("%d budgets plan either way, %d only with the long search (of %d)\n", both, rescued,
              kSteps + 1);
  EXPECT_GT(rescued, 0);
}

uint64_t swapped_bytes(const RewriteReport& rep) {
  uint64_t bytes = 0;
  for (const TensorDecision& d : rep.decisions) {
    if (d.action == DecisionAction::kSwap) bytes += d.bytes;
  }
  return bytes;
}

TEST(LastResortPlan, PlansWhereTheFloorsPlanDoesNotLayOut) {
  const Graph train = resnet_like();
  auto none = plan(train, uint64_t{1} << 32, false, 0);
  ASSERT_TRUE(none.ok()) << none.status();
  const uint64_t low = none->working_set_limit_bytes, high = none->peak_bytes_after;
  std::printf("working-set limit %" PRIu64 " B, no-LMS peak %" PRIu64 " B\n", low, high);
  ASSERT_LT(low, high);
  int rescued = 0, both = 0;
  for (int i = 0; i <= kSteps; ++i) {
    const uint64_t budget =
        low + static_cast<uint64_t>(kRange * static_cast<double>(high - low) * i / kSteps);
    SCOPED_TRACE(testing::Message() << "budget " << budget);
    auto with = plan(train, budget, true, 0, true);
    auto without = plan(train, budget, true, 0, false);
    const bool fits_with = with.ok() && with->fits;
    const bool fits_without = without.ok() && without->fits;
    if (fits_with) {
      EXPECT_LE(with->peak_bytes_after, budget);
    }
    if (fits_without) {
      EXPECT_TRUE(fits_with) << "the last-resort plan lost a plan";
      ++both;
    } else if (fits_with) {
      ++rescued;
      std::printf("budget %" PRIu64 " B: only the last-resort plan fits, swapping %" PRIu64
                  " B (peak %" PRIu64 " B)\n",
                  budget, swapped_bytes(*with), with->peak_bytes_after);
      EXPECT_GT(swapped_bytes(*with), 0u);
    }
  }
  std::printf("%d budgets plan either way, %d only with the last-resort plan (of %d)\n", both,
              rescued, kSteps + 1);
  EXPECT_GT(rescued, 0);
}

}  // namespace
}  // namespace lms::swap
