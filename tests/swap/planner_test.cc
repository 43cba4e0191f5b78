// Planners on hand-written live ranges (positions = node ids 0..n-1).
#include "swap/planner.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace lms::swap {
namespace {

struct Spec {
  int32_t first;
  std::vector<int32_t> uses;
  uint64_t bytes;
  TensorRole role = TensorRole::kActivation;
  bool fetched = false;
};

Liveness make_live(int32_t n, const std::vector<Spec>& specs) {
  Liveness live;
  for (int32_t p = 0; p < n; ++p) {
    live.order.push_back(p);
    live.position.push_back(p);
  }
  live.workspace.assign(n, 0);
  for (const Spec& s : specs) {
    TensorLife t;
    t.on_device = true;
    t.input = s.role == TensorRole::kInput;
    t.role = s.role;
    t.fetched = s.fetched;
    t.first = s.first;
    t.uses = s.uses;
    t.last = s.fetched ? n - 1 : (s.uses.empty() ? s.first : s.uses.back());
    t.bytes = s.bytes;
    live.tensors.push_back(t);
  }
  return live;
}

std::vector<NodeId> ids(std::initializer_list<NodeId> l) { return l; }

TEST(Tflms, ThresholdAheadAndGroupBy) {
  // t0 produced at 0, read at 1 (near), 5, 6 (one group) and 12.
  Liveness live = make_live(14, {{0, {1, 5, 6, 12}, 1024}, {2, {3}, 1024}});
  SwapPlan plan =
      plan_tflms(live, {.swapout_threshold = 2, .swapin_ahead = 1, .swapin_groupby = 3});
  ASSERT_EQ(plan.items.size(), 1u);  // t1's only consumer is 1 node away
  const SwapPlan::Item& item = plan.items[0];
  EXPECT_EQ(item.tensor, 0);
  EXPECT_EQ(item.swap_out_after, 0);
  ASSERT_EQ(item.swap_ins.size(), 2u);
  EXPECT_EQ(item.swap_ins[0].trigger, 4);
  EXPECT_EQ(item.swap_ins[0].consumers, ids({5, 6}));
  EXPECT_EQ(item.swap_ins[1].trigger, 11);
  EXPECT_EQ(item.swap_ins[1].consumers, ids({12}));
  EXPECT_EQ(item.sync_before, kNoNode);

  // Ahead 3 moves the triggers, clamped to the producer; groupby 0 splits 5/6.
  plan = plan_tflms(live, {.swapout_threshold = 2, .swapin_ahead = 8, .swapin_groupby = 0});
  ASSERT_EQ(plan.items[0].swap_ins.size(), 3u);
  EXPECT_EQ(plan.items[0].swap_ins[0].trigger, 0);  // 5 - 8 < 0: clamped
  EXPECT_EQ(plan.items[0].swap_ins[2].trigger, 4);  // 12 - 8
}

TEST(Tflms, SyncModes) {
  Liveness live = make_live(14, {{0, {1, 9}, 1024}});
  for (int mode = 0; mode <= 3; ++mode) {
    SwapPlan plan =
        plan_tflms(live, {.swapout_threshold = 1, .swapin_ahead = 4, .sync_mode = mode});
    ASSERT_EQ(plan.items.size(), 1u);
    const bool sync_out = mode == 1 || mode == 3, sync_in = mode == 2 || mode == 3;
    EXPECT_EQ(plan.items[0].sync_before, sync_out ? 1 : kNoNode) << "mode " << mode;
    EXPECT_EQ(plan.items[0].swap_ins[0].trigger, sync_in ? 8 : 5) << "mode " << mode;
  }
}

TEST(Tflms, Filters) {
  Liveness live = make_live(10, {{0, {8}, 512},                                  // small
                                 {0, {8}, 4096, TensorRole::kGradient},          // not forward
                                 {0, {8}, 4096, TensorRole::kInput},             // input
                                 {0, {8}, 4096, TensorRole::kActivation, true},  // fetched
                                 {1, {9}, 4096}});
  SwapPlan plan = plan_tflms(live, {.swapout_threshold = 1, .min_tensor_bytes = 1024});
  ASSERT_EQ(plan.items.size(), 1u);
  EXPECT_EQ(plan.items[0].tensor, 4);
}

// Four 1 KiB tensors; t0 idles from 1 to 9 while t1..t3 peak at 5.
Liveness auto_scenario() {
  return make_live(
      11, {{0, {1, 9}, 1024}, {3, {4, 5}, 1024}, {4, {5}, 1024}, {5, {6}, 1024}, {9, {10}, 1024}});
}

TEST(Auto, SwapsOnlyWhatTheBudgetRequires) {
  Liveness live = auto_scenario();
  // Profile: 0:1 1:1 2:1 3:2 4:3 5:4 6:2 7:1 8:1 9:2 10:1 KiB; peak 4 KiB at 5;
  // working set of 5 = t1, t2, t3 = 3 KiB.
  EXPECT_EQ(memory_profile(live).peak, 4096u);
  std::vector<double> times(11, 1.0);
  AutoOptions options{.budget_bytes = 4096, .fragmentation_reserve = 0};
  auto plan = plan_auto(nullptr, live, times, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->items.empty());  // fits already

  options.budget_bytes = 3072;
  plan = plan_auto(nullptr, live, times, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->items.size(), 1u);
  EXPECT_EQ(plan->items[0].tensor, 0);
  ASSERT_EQ(plan->items[0].swap_ins.size(), 1u);
  // The default link copies 1 KiB in ~5 us: a trigger at 8 leaves no compute
  // before the consumer at 9, a trigger at 7 leaves node 8 (1 s).
  EXPECT_EQ(plan->items[0].swap_out_after, 0);
  EXPECT_EQ(plan->items[0].swap_ins[0].consumers, ids({9}));
  EXPECT_EQ(plan->items[0].swap_ins[0].trigger, 7);
  EXPECT_LE(plan_profile(live, *plan).peak, 3072u);
}

TEST(Auto, TriggerAsLateAsTheCopyAllows) {
  Liveness live = auto_scenario();
  std::vector<double> times(11, 1.0);
  AutoOptions options{.budget_bytes = 3072,
                      .fragmentation_reserve = 0,
                      .h2d_bytes_per_s = 1024.0 / 1.5,
                      .copy_latency_s = 0};
  // The copy takes 1.5 s: positions 8 and 7 (2 s) hide it, 8 alone does not.
  auto plan = plan_auto(nullptr, live, times, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->items[0].swap_ins[0].trigger, 6);
  // A copy longer than the whole gap still relieves the peak, with a stall.
  options.h2d_bytes_per_s = 1;
  plan = plan_auto(nullptr, live, times, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->items[0].swap_ins[0].trigger, 5);
}

TEST(Auto, ReserveAndResourceExhausted) {
  Liveness live = auto_scenario();
  std::vector<double> times(11, 1.0);
  // 3 KiB working set; 3072 / 0.95 = 3233.7 is the least budget with a 5% reserve.
  auto ok = plan_auto(nullptr, live, times, {.budget_bytes = 3234, .fragmentation_reserve = 0.05});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_LE(plan_profile(live, *ok).peak, usable_budget(3234, 0.05));
  auto fail =
      plan_auto(nullptr, live, times, {.budget_bytes = 3233, .fragmentation_reserve = 0.05});
  EXPECT_EQ(fail.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(fail.status().ToString().find("#5"), std::string::npos) << fail.status();
  EXPECT_NE(fail.status().ToString().find("3072"), std::string::npos) << fail.status();
  EXPECT_EQ(plan_auto(nullptr, live, times, {.budget_bytes = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan_auto(nullptr, live, times, {.budget_bytes = 4096, .fragmentation_reserve = 1})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// AutoOptions::no_swap and force_swap (Note [Plan refinement]): t0 and t5
// are idle at the peak position 5 (4.5 KiB); a 3.5 KiB budget needs t0's
// 1 KiB, t5's 512 B alone is not enough.
TEST(Auto, ForbiddenAndForcedSwaps) {
  Liveness live = make_live(11, {{0, {1, 9}, 1024},
                                 {3, {4, 5}, 1024},
                                 {4, {5}, 1024},
                                 {5, {6}, 1024},
                                 {9, {10}, 1024},
                                 {2, {3, 8}, 512}});
  ASSERT_EQ(memory_profile(live).peak, 4608u);
  std::vector<double> times(11, 1.0);
  AutoOptions options{.budget_bytes = 3584, .fragmentation_reserve = 0};
  auto tensors = [](const SwapPlan& plan) {
    std::vector<TensorId> out;
    for (const SwapPlan::Item& item : plan.items) out.push_back(item.tensor);
    std::sort(out.begin(), out.end());
    return out;
  };
  auto plan = plan_auto(nullptr, live, times, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(tensors(*plan), std::vector<TensorId>{0});
  // Forced: t5 is swapped too, although the budget does not need it.
  options.force_swap.assign(live.tensors.size(), false);
  options.force_swap[5] = true;
  plan = plan_auto(nullptr, live, times, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(tensors(*plan), (std::vector<TensorId>{0, 5}));
  EXPECT_LE(plan_profile(live, *plan).peak, 3584u);
  // Forbidden: without t0 nothing relieves the peak enough.
  options.force_swap.clear();
  options.no_swap.assign(live.tensors.size(), false);
  options.no_swap[0] = true;
  EXPECT_EQ(plan_auto(nullptr, live, times, options).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(Auto, HostLimitIsRespected) {
  Liveness live = auto_scenario();
  std::vector<double> times(11, 1.0);
  // Swapping t0 needs 1 KiB of pinned memory; with 512 B nothing can be swapped.
  auto plan =
      plan_auto(nullptr, live, times,
                {.budget_bytes = 3072, .fragmentation_reserve = 0, .host_limit_bytes = 512});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(Plan, ProfileOfAHandWrittenPlan) {
  Liveness live = auto_scenario();
  SwapPlan plan;
  // t0: the original serves position 1 and is freed there; the copy made
  // after 5 serves 9, so it is live over [6, 9].
  plan.items.push_back({0, 0, {{5, {9}}}, kNoNode});
  EXPECT_EQ(plan_profile(live, plan).during,
            (std::vector<uint64_t>{1024, 1024, 0, 1024, 2048, 3072, 2048, 1024, 1024, 2048, 1024}));
  // Without a swap-in for 9 the original stays until 9: the unswapped profile.
  plan.items[0].swap_ins.clear();
  EXPECT_EQ(plan_profile(live, plan).during, memory_profile(live).during);
}

}  // namespace
}  // namespace lms::swap
