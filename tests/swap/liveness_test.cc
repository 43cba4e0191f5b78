#include "swap/liveness.h"

#include "gtest/gtest.h"
#include "swap/cost_model.h"
#include "swap_test_util.h"

namespace lms::swap {
namespace {

using swap_test::kSkipGraph;
using swap_test::parse_or_die;

constexpr uint64_t kKiB = 1024;

int32_t pos(const Graph& g, const Liveness& live, const char* node) {
  return live.position[g.find_node(node)];
}

TEST(Liveness, LiveRangesOfTheSkipGraph) {
  Graph g = parse_or_die(kSkipGraph);
  auto live = analyze(g, {});
  ASSERT_TRUE(live.ok()) << live.status();
  auto range = [&](const char* t) {
    const TensorLife& life = live->tensors[g.find_tensor(t)];
    return std::pair{life.first, life.last};
  };
  EXPECT_EQ(range("x"), std::pair(0, 0));
  EXPECT_EQ(range("a"), std::pair(0, 4));
  EXPECT_EQ(range("b"), std::pair(1, 3));
  EXPECT_EQ(range("e"), std::pair(3, 4));
  EXPECT_EQ(range("loss"), std::pair(5, 5));
  EXPECT_TRUE(live->tensors[g.find_tensor("loss")].fetched);
  EXPECT_TRUE(live->tensors[g.find_tensor("x")].input);
  EXPECT_EQ(live->tensors[g.find_tensor("loss")].bytes, 256u);  // 4 B rounded up
  EXPECT_EQ(live->tensors[g.find_tensor("a")].uses, (std::vector<int32_t>{1, 4}));
}

TEST(Liveness, ProfileFollowsTheMemoryModel) {
  Graph g = parse_or_die(kSkipGraph);
  auto live = analyze(g, {});
  ASSERT_TRUE(live.ok());
  MemoryProfile prof = memory_profile(*live);
  // See swap_test_util.h for the derivation.
  EXPECT_EQ(prof.during,
            (std::vector<uint64_t>{2 * kKiB, 2 * kKiB, 3 * kKiB, 4 * kKiB, 3 * kKiB, kKiB + 256}));
  EXPECT_EQ(prof.peak, 4 * kKiB);
  EXPECT_EQ(prof.peak_position, pos(g, *live, "e"));
}

TEST(Liveness, WorkspaceAlignmentAndFetchedOptions) {
  Graph g = parse_or_die(kSkipGraph);
  LivenessOptions options;
  options.alignment_bytes = 4096;  // every tensor now occupies 4 KiB
  options.workspace_bytes.assign(g.num_nodes(), 0);
  options.workspace_bytes[g.find_node("c")] = 100;  // rounds to 4 KiB
  options.fetched = {"b"};                          // replaces the default (loss)
  auto live = analyze(g, options);
  ASSERT_TRUE(live.ok());
  MemoryProfile prof = memory_profile(*live);
  // c: a, b, c + c's own workspace = 4 x 4 KiB; loss is no longer
  // fetched, b is.
  EXPECT_EQ(live->workspace[pos(g, *live, "c")], 4 * kKiB);
  EXPECT_EQ(prof.during[pos(g, *live, "c")], 16 * kKiB);
  EXPECT_EQ(live->tensors[g.find_tensor("b")].last, live->size() - 1);
  // loss: b (fetched), d, loss; c's workspace is gone (Note [Step buffers]).
  EXPECT_EQ(live->workspace[pos(g, *live, "loss")], 0u);
  EXPECT_EQ(prof.during[pos(g, *live, "loss")], 12 * kKiB);
  EXPECT_EQ(live->persistent_bytes, 0u);
  options.fetched = {"nope"};
  auto bad = analyze(g, options);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().ToString().find("nope"), std::string::npos);
  options.alignment_bytes = 0;
  EXPECT_FALSE(analyze(g, options).ok());
}

TEST(Liveness, RoundedSize) {
  EXPECT_EQ(rounded_size(0, 256), 256u);
  EXPECT_EQ(rounded_size(1, 256), 256u);
  EXPECT_EQ(rounded_size(256, 256), 256u);
  EXPECT_EQ(rounded_size(257, 256), 512u);
}

TEST(Liveness, WorkingSetsAndIdleIntervals) {
  Graph g = parse_or_die(kSkipGraph);
  auto live = analyze(g, {});
  ASSERT_TRUE(live.ok());
  std::vector<uint64_t> sets = working_sets(*live);
  // e reads b, c and writes e; d reads e, a and writes d.
  EXPECT_EQ(sets[pos(g, *live, "e")], 3 * kKiB);
  EXPECT_EQ(sets[pos(g, *live, "d")], 3 * kKiB);
  EXPECT_EQ(sets[pos(g, *live, "loss")], kKiB + 256);
  WorkingSetLimit limit = working_set_limit(*live);
  EXPECT_EQ(limit.bytes, 3 * kKiB);
  EXPECT_EQ(limit.position, pos(g, *live, "e"));  // c reads b only: 2 KiB; e is first
  // The profile never goes below a working set.
  MemoryProfile prof = memory_profile(*live);
  for (int32_t p = 0; p < live->size(); ++p) EXPECT_GE(prof.during[p], sets[p]);

  std::vector<double> times(live->size(), 1.0);
  std::vector<IdleInterval> gaps = idle_intervals(*live, times);
  ASSERT_EQ(gaps.size(), 1u);  // only a idles: between b (1) and d (4)
  EXPECT_EQ(gaps[0].tensor, g.find_tensor("a"));
  EXPECT_EQ(gaps[0].after, 1);
  EXPECT_EQ(gaps[0].before, 4);
  EXPECT_DOUBLE_EQ(gaps[0].seconds, 2.0);  // c and e
}

// A tensor whose next use is at or past the commit (Note [Step commit]) is
// offered to no planner in between, as a weight gradient waiting for its
// update: it belongs to every working set there.
TEST(Liveness, ATensorHeldUntilTheCommitIsInTheWorkingSets) {
  Graph g = parse_or_die(kSkipGraph);
  auto live = analyze(g, {});
  ASSERT_TRUE(live.ok());
  const std::vector<uint64_t> before = working_sets(*live);
  const int32_t d = pos(g, *live, "d");
  live->commit = d;  // by hand: the skip graph writes no persistent tensor
  const std::vector<uint64_t> sets = working_sets(*live);
  const uint64_t a = live->tensors[g.find_tensor("a")].bytes;
  ASSERT_EQ(live->tensors[g.find_tensor("a")].uses, (std::vector<int32_t>{1, d}));
  for (int32_t p = 0; p < live->size(); ++p) {
    const bool held = p > 1 && p < d;  // between its uses b and d
    EXPECT_EQ(sets[p], before[p] + (held ? a : 0)) << "position " << p;
  }
  EXPECT_TRUE(idle_intervals(*live, {}).empty());
  const MemoryProfile prof = memory_profile(*live);
  for (int32_t p = 0; p < live->size(); ++p) EXPECT_GE(prof.during[p], sets[p]);
}

TEST(CostModel, RooflineMeasuredAndCopies) {
  Graph g = parse_or_die(kSkipGraph);
  CostOptions options;
  options.compute_flops_per_s = 1e9;
  options.memory_bytes_per_s = 1e6;  // memory-bound: relu moves 2 KiB
  options.kernel_launch_s = 1e-6;
  CostModel cost(g, options);
  EXPECT_DOUBLE_EQ(cost.node_time_s(g.find_node("b")), 2048 / 1e6 + 1e-6);
  EXPECT_DOUBLE_EQ(cost.h2d_time_s(12000), 5e-6 + 1e-6);
  options.measured_node_time_s.assign(g.num_nodes(), -1);
  options.measured_node_time_s[g.find_node("b")] = 0.25;
  CostModel measured(g, options);
  EXPECT_DOUBLE_EQ(measured.node_time_s(g.find_node("b")), 0.25);
  EXPECT_DOUBLE_EQ(measured.node_time_s(g.find_node("c")), cost.node_time_s(g.find_node("c")));
}

}  // namespace
}  // namespace lms::swap
