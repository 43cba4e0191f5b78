#include "swap/insert.h"

#include <random>

#include "gtest/gtest.h"
#include "swap/planner.h"
#include "swap_test_util.h"

namespace lms::swap {
namespace {

using swap_test::kSkipGraph;
using swap_test::parse_or_die;

std::vector<std::string> schedule_names(const Graph& g) {
  auto order = schedule(g);
  EXPECT_TRUE(order.ok());
  std::vector<std::string> names;
  for (NodeId n : *order) names.push_back(g.node(n).name);
  return names;
}

SwapPlan skip_plan(const Graph& g) {
  SwapPlan plan;
  plan.items.push_back(
      {g.find_tensor("a"), g.find_node("a"), {{g.find_node("e"), {g.find_node("d")}}}, kNoNode});
  return plan;
}

TEST(Insert, SkipGraphStructureAndProfile) {
  Graph g = parse_or_die(kSkipGraph);
  auto live = analyze(g, {});
  ASSERT_TRUE(live.ok());
  SwapPlan plan = skip_plan(g);
  const uint64_t planned = plan_profile(*live, plan).peak;
  ASSERT_TRUE(insert_swaps(g, *live, plan).ok());
  ASSERT_TRUE(verify(g).ok());
  EXPECT_EQ(schedule_names(g), (std::vector<std::string>{"a", "swap_out/a", "b", "c", "e",
                                                         "swap_in/a/0", "d", "loss"}));
  const Node& d = g.node(g.find_node("d"));
  EXPECT_EQ(g.tensor(d.inputs[1]).name, "swap_in/a/0");
  EXPECT_EQ(g.tensor(g.find_tensor("swap_out/a")).role, TensorRole::kHost);
  const Node& in = g.node(g.find_node("swap_in/a/0"));
  EXPECT_EQ(in.control_inputs, std::vector<NodeId>{g.find_node("e")});
  // "needs 4 KiB without, 3 KiB with one swap" (swap_test_util.h).
  auto after = analyze(g, {});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(memory_profile(*after).peak, 3072u);
  EXPECT_EQ(planned, 3072u);
  // Applying the same plan again would reuse the names.
  auto again = analyze(g, {});
  EXPECT_EQ(insert_swaps(g, *again, skip_plan(g)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Insert, RejectsInvalidPlansAndLeavesTheGraph) {
  Graph g = parse_or_die(kSkipGraph);
  auto live = analyze(g, {});
  ASSERT_TRUE(live.ok());
  const std::string before = to_text(g);
  const NodeId a = g.find_node("a"), b = g.find_node("b"), d = g.find_node("d"),
               e = g.find_node("e");
  const TensorId ta = g.find_tensor("a");
  std::vector<SwapPlan::Item> bad = {
      {ta, d, {{e, {d}}}, kNoNode},                               // trigger before the swap-out
      {ta, a, {{e, {g.find_node("loss")}}}, kNoNode},             // loss does not read a
      {ta, a, {{d, {d}}}, kNoNode},                               // consumer not after trigger
      {ta, a, {{b, {d}}, {e, {d}}}, kNoNode},                     // d served twice
      {g.find_tensor("loss"), g.find_node("loss"), {}, kNoNode},  // fetched
      {ta, a, {{e, {}}}, kNoNode},                                // serves nobody
      {ta, a, {{e, {d}}}, a},                                     // sync_before not after
      {999, a, {}, kNoNode},                                      // no such tensor
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    SwapPlan plan;
    plan.items.push_back(bad[i]);
    absl::Status s = insert_swaps(g, *live, plan);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "case " << i << ": " << s;
    EXPECT_EQ(to_text(g), before) << "case " << i;
  }
  SwapPlan twice;
  twice.items = {{ta, a, {{e, {d}}}, kNoNode}, {ta, a, {{e, {d}}}, kNoNode}};
  EXPECT_EQ(insert_swaps(g, *live, twice).code(), absl::StatusCode::kInvalidArgument);
}

// Property: for TFLMS plans with random options on random chain/skip graphs,
// the rewritten graph verifies and its exact profile peak equals the
// planner's plan_profile peak (insertion order of insert.h).
TEST(Insert, PlanProfileIsExactOnRandomGraphs) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937_64 rng(seed);
    Graph g = swap_test::random_chain(seed, 10 + static_cast<int>(rng() % 40));
    auto live = analyze(g, {});
    ASSERT_TRUE(live.ok());
    TflmsOptions options{static_cast<int32_t>(rng() % 4), 1 + static_cast<int32_t>(rng() % 4),
                         static_cast<int32_t>(rng() % 4), static_cast<int32_t>(rng() % 4), 0};
    SwapPlan plan = plan_tflms(*live, options);
    const MemoryProfile planned = plan_profile(*live, plan);
    ASSERT_TRUE(insert_swaps(g, *live, plan).ok());
    ASSERT_TRUE(verify(g).ok());
    auto after = analyze(g, {});
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(memory_profile(*after).peak, planned.peak);
    EXPECT_LE(planned.peak, memory_profile(*live).peak);
  }
}

}  // namespace
}  // namespace lms::swap
