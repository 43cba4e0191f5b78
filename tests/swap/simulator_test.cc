#include "swap/simulator.h"

#include "gtest/gtest.h"
#include "lms/ops.h"
#include "lms/training.h"
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

// SimOptions::input_upload_s: the executor uploads the step's inputs
// before it issues the first node, so every stream starts that much later;
// the compute stream's stall (its idle time between its first and last
// node) is the same.
TEST(Simulator, TheInputUploadComesBeforeEveryStream) {
  Scenario s = make("e", 0.5, 0.5);
  SimResult r = simulate(s.graph, s.live, s.times, {.input_upload_s = 0.25});
  EXPECT_DOUBLE_EQ(r.step_time_s, 6.75);
  EXPECT_DOUBLE_EQ(r.stall_s, 0.5);
  EXPECT_DOUBLE_EQ(r.start_s[0], 0.25);
  const int32_t d = s.live.position[s.graph.find_node("d")];
  EXPECT_DOUBLE_EQ(r.start_s[d], 4.75);
}

TEST(Simulator, HostBlocksOnDeferredFreeUnderABudget) {
  // The swap-out follows b, so it is a's last reader; its D2H waits for the
  // compute stream to reach b (Note [Swap-out]) and takes 3 s: [2,5]; a's
  // buffer returns only then. c [2,3]. With 3 KiB the allocation of e (4 KiB
  // in use with a) waits for it: e starts at 5 (2 s stall: compute waits for
  // memory a swap-out has not released), swap_in [6,6.5], d [6.5,7.5] (0.5 s
  // stall), loss [7.5,8.5].
  Scenario s = make("e", 3.0, 0.5, "b");
  SimResult r = simulate(s.graph, s.live, s.times, {.device_budget_bytes = 3072});
  EXPECT_DOUBLE_EQ(r.step_time_s, 8.5);
  EXPECT_DOUBLE_EQ(r.stall_s, 2.5);
  EXPECT_DOUBLE_EQ(r.host_blocked_s, 5.0);  // the host was at t = 0 when it blocked
  EXPECT_LE(r.peak_device_bytes, 3072u);
  EXPECT_FALSE(r.out_of_memory);
  // Without a budget nothing blocks, but a's deferred free raises the peak;
  // the swap-in waits for the swap-out: [5,5.5], d [5.5,6.5], loss [6.5,7.5].
  SimResult free_run = simulate(s.graph, s.live, s.times, {});
  EXPECT_DOUBLE_EQ(free_run.step_time_s, 7.5);
  EXPECT_DOUBLE_EQ(free_run.stall_s, 1.5);
  EXPECT_DOUBLE_EQ(free_run.host_blocked_s, 0.0);
  EXPECT_EQ(free_run.peak_device_bytes, 4096u);
  // Under the planned profile's peak minus one byte the step cannot fit.
  SimResult tight = simulate(s.graph, s.live, s.times, {.device_budget_bytes = 3071});
  EXPECT_TRUE(tight.out_of_memory);
}

TEST(Simulator, WaitAtReleaseMakesTheComputeStreamWaitAtTheSwapOut) {
  // As above, but a is released right after the swap-out, stream-ordered
  // (Note [Swap-out release]): the compute stream waits for the 3 s D2H
  // [2,5] before its next node, c [5,6] (3 s stall), e [6,7], swap_in
  // [7,7.5], d [7.5,8.5] (0.5 s), loss [8.5,9.5]. The host never blocks.
  Scenario s = make("e", 3.0, 0.5, "b");
  SimResult r = simulate(s.graph, s.live, s.times, {.wait_at_release = true});
  EXPECT_DOUBLE_EQ(r.step_time_s, 9.5);
  EXPECT_DOUBLE_EQ(r.stall_s, 3.5);
  EXPECT_DOUBLE_EQ(r.host_blocked_s, 0.0);
  EXPECT_DOUBLE_EQ(r.start_s[s.live.position[s.graph.find_node("c")]], 5.0);
  EXPECT_EQ(r.peak_device_bytes, memory_profile(s.live).peak);  // frees at fixed points
}

TEST(Simulator, CommitWaitsForEveryCopyIssuedSoFar) {
  // Per Note [Step commit], the compute stream waits for every copy issued before
  // the commit. With e as the commit (set by hand: the skip graph has no
  // persistent writer) and a 5 s D2H [1,6]: e waits until 6 (3 s stall),
  // swap_in [7,7.5], d [7.5,8.5] (0.5 s), loss [8.5,9.5].
  Scenario s = make("e", 5.0, 0.5);
  SimResult plain = simulate(s.graph, s.live, s.times, {});
  EXPECT_DOUBLE_EQ(plain.stall_s, 2.5);  // d waits for the swap-in [6,6.5]
  s.live.commit = s.live.position[s.graph.find_node("e")];
  SimResult r = simulate(s.graph, s.live, s.times, {});
  EXPECT_DOUBLE_EQ(r.start_s[s.live.commit], 6.0);
  EXPECT_DOUBLE_EQ(r.stall_s, 3.5);
  EXPECT_DOUBLE_EQ(r.step_time_s, 9.5);
}

}  // namespace
}  // namespace lms::swap

namespace lms::swap {
namespace {

// Four conv layers trained data-parallel, one bucket per layer: every
// compute node takes 1 s and every all-reduce 2.5 s.
struct DataParallelScenario {
  Graph graph;
  Liveness live;
  std::vector<double> times;
};

DataParallelScenario data_parallel_scenario() {
  Graph g;
  TensorId x = g.input("x", {1, 4, 8, 8});
  const TensorId target = g.input("y", {1, 4, 8, 8});
  for (int i = 0; i < 4; ++i) {
    x = relu(g, "relu" + std::to_string(i),
             conv2d(g, "conv" + std::to_string(i), x, 4, {3},
                    {.pad = {1}, .bias = false, .seed = static_cast<uint64_t>(i + 1)}));
  }
  const TensorId loss = mse_loss(g, "loss", x, target);
  EXPECT_TRUE(g.status().ok()) << g.status();
  // 4x4x3x3 floats = 576 bytes per layer: one bucket each.
  auto train = training_graph(g, loss, Sgd{}, {.data_parallel = DataParallel{.bucket_bytes = 600}});
  EXPECT_TRUE(train.ok()) << train.status();
  DataParallelScenario s{*std::move(train), {}, {}};
  auto live = analyze(s.graph, {});
  EXPECT_TRUE(live.ok()) << live.status();
  s.live = *live;
  CostOptions cost;
  cost.measured_node_time_s.assign(s.graph.num_nodes(), 1.0);
  cost.ranks = 2;
  cost.allreduce_latency_s = 0;
  cost.allreduce_bytes_per_s = 576 / 2.5;  // 2 (2-1)/2 x 576 bytes in 2.5 s
  CostModel model(s.graph, cost);
  s.times = times_by_position(model, s.live.order);
  return s;
}

TEST(Simulator, AllReduceRunsOnItsOwnStreamBesideTheBackwardPass) {
  DataParallelScenario s = data_parallel_scenario();
  const Graph& g = s.graph;
  SimResult r = simulate(g, s.live, s.times, {.wait_at_release = true});
  int buckets = 0;
  bool overlapped = false;
  for (int32_t p = 0; p < s.live.size(); ++p) {
    const Node& n = g.node(s.live.order[p]);
    if (n.op != OpKind::kAllReduce) continue;
    ++buckets;
    EXPECT_DOUBLE_EQ(r.end_s[p] - r.start_s[p], 2.5) << n.name;
    for (TensorId t : n.inputs) {
      // After its gradient is final, and the gradient stays on the device
      // until the node named by release_after.
      EXPECT_GE(r.start_s[p], r.end_s[s.live.position[g.tensor(t).producer]]) << n.name;
      const NodeId until = g.find_node(std::get<std::string>(n.attrs.at("release_after")));
      EXPECT_EQ(s.live.tensors[t].last, s.live.position[until]) << g.tensor(t).name;
    }
    for (TensorId t : n.outputs) {
      for (NodeId c : g.tensor(t).consumers) {
        EXPECT_GE(r.start_s[s.live.position[c]], r.end_s[p]) << g.node(c).name;
      }
    }
    for (int32_t q = 0; q < s.live.size(); ++q) {
      const OpKind op = g.node(s.live.order[q]).op;
      if (op == OpKind::kAllReduce) continue;
      overlapped = overlapped || (r.start_s[q] < r.end_s[p] && r.end_s[q] > r.start_s[p]);
    }
  }
  EXPECT_EQ(buckets, 4);
  EXPECT_TRUE(overlapped) << "an all-reduce runs while compute goes on";
  // The compute stream is busy for every compute node; what the exchanges
  // do not hide is stall, and the step is no shorter than compute alone.
  EXPECT_GE(r.step_time_s, r.compute_s);
  EXPECT_NEAR(r.step_time_s, r.compute_s + r.stall_s, 1e-9);
}

}  // namespace
}  // namespace lms::swap
