#include "swap/simulator.h"

#include "gtest/gtest.h"
#include "swap/cost_model.h"
#include "swap/insert.h"
#include "swap_test_util.h"

namespace lms::swap {
namespace {

// The skip graph (swap_test_util.h) with `a` swapped out after its producer
// and swapped in after `trigger` for d. Every compute node takes 1 s.
struct Scenario {
  Graph graph;
  Liveness live;
  std::vector<double> times;
};

Scenario make(const char* trigger, double d2h_s, double h2d_s, const char* anchor = "a") {
  Scenario s{swap_test::parse_or_die(swap_test::kSkipGraph), {}, {}};
  Graph& g = s.graph;
  auto live = analyze(g, {});
  EXPECT_TRUE(live.ok());
  SwapPlan plan;
  plan.items.push_back({g.find_tensor("a"),
                        g.find_node(anchor),
                        {{g.find_node(trigger), {g.find_node("d")}}},
                        kNoNode});
  EXPECT_TRUE(insert_swaps(g, *live, plan).ok());
  auto after = analyze(g, {});
  EXPECT_TRUE(after.ok());
  s.live = *after;
  CostOptions cost;
  cost.copy_latency_s = 0;
  cost.d2h_bytes_per_s = 1024 / d2h_s;  // a is 1024 bytes
  cost.h2d_bytes_per_s = 1024 / h2d_s;
  cost.measured_node_time_s.assign(g.num_nodes(), 1.0);
  s.times = times_by_position(CostModel(g, cost), s.live.order);
  return s;
}

TEST(Simulator, LateSwapInStallsTheConsumer) {
  // a [0,1]; swap_out [1,1.5]; b, c, e until 4; swap_in waits for e: [4,4.5];
  // d waits for it: [4.5,5.5] (0.5 s stall); loss [5.5,6.5].
  Scenario s = make("e", 0.5, 0.5);
  SimResult r = simulate(s.graph, s.live, s.times, {});
  EXPECT_DOUBLE_EQ(r.step_time_s, 6.5);
  EXPECT_DOUBLE_EQ(r.stall_s, 0.5);
  EXPECT_DOUBLE_EQ(r.compute_s, 6.0);
  EXPECT_EQ(r.bytes_d2h, 1024u);
  EXPECT_EQ(r.bytes_h2d, 1024u);
  const int32_t d = s.live.position[s.graph.find_node("d")];
  EXPECT_DOUBLE_EQ(r.start_s[d], 4.5);
  EXPECT_FALSE(r.out_of_memory);
}

TEST(Simulator, EarlyTriggerHidesTheCopy) {
  Scenario s = make("c", 0.5, 0.5);  // swap_in [3,3.5] runs beside e
  SimResult r = simulate(s.graph, s.live, s.times, {});
  EXPECT_DOUBLE_EQ(r.step_time_s, 6.0);
  EXPECT_DOUBLE_EQ(r.stall_s, 0.0);
}

TEST(Simulator, HostBlocksOnDeferredFreeUnderABudget) {
  // The swap-out follows b, so it is a's last reader. Its D2H takes 3 s:
  // [1,4]; a's buffer returns only then. With 3 KiB the allocation of e
  // (4 KiB in use with a) waits for it: e starts at 4 (1 s stall), swap_in
  // [5,5.5], d [5.5,6.5] (0.5 s), loss [6.5,7.5].
  Scenario s = make("e", 3.0, 0.5, "b");
  SimResult r = simulate(s.graph, s.live, s.times, {.device_budget_bytes = 3072});
  EXPECT_DOUBLE_EQ(r.step_time_s, 7.5);
  EXPECT_DOUBLE_EQ(r.stall_s, 1.5);
  EXPECT_DOUBLE_EQ(r.host_blocked_s, 4.0);  // the host was at t = 0 when it blocked
  EXPECT_LE(r.peak_device_bytes, 3072u);
  EXPECT_FALSE(r.out_of_memory);
  // Without a budget nothing blocks, but a's deferred free raises the peak.
  SimResult free_run = simulate(s.graph, s.live, s.times, {});
  EXPECT_DOUBLE_EQ(free_run.step_time_s, 6.5);
  EXPECT_EQ(free_run.peak_device_bytes, 4096u);
  // Under the planned profile's peak minus one byte the step cannot fit.
  SimResult tight = simulate(s.graph, s.live, s.times, {.device_budget_bytes = 3071});
  EXPECT_TRUE(tight.out_of_memory);
}

TEST(Simulator, WaitAtReleaseBlocksTheHostAtTheSwapOut) {
  // As above, but the host waits for the 3 s D2H right at the swap-out
  // (t = 4): c is issued at 4 although the compute stream is free at 2 (2 s
  // stall), e [5,6], swap_in [6,6.5], d [6.5,7.5] (0.5 s), loss [7.5,8.5].
  Scenario s = make("e", 3.0, 0.5, "b");
  SimResult r = simulate(s.graph, s.live, s.times, {.wait_at_release = true});
  EXPECT_DOUBLE_EQ(r.step_time_s, 8.5);
  EXPECT_DOUBLE_EQ(r.stall_s, 2.5);
  EXPECT_DOUBLE_EQ(r.host_blocked_s, 4.0);
  EXPECT_EQ(r.peak_device_bytes, memory_profile(s.live).peak);  // frees at fixed points
}

}  // namespace
}  // namespace lms::swap
