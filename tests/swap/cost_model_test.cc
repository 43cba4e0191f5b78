// The cost model's copy times over a host link shared by several devices
// (CostOptions::link_devices, the lockstep model) and its option check.
#include "swap/cost_model.h"

#include <string>

#include "gtest/gtest.h"
#include "swap_test_util.h"

namespace lms::swap {
namespace {

TEST(CostModel, ACopyOnALinkSharedByKDevicesTakesKTimesTheBandwidthTime) {
  const Graph g = swap_test::parse_or_die(swap_test::kSkipGraph);
  const CostOptions alone{.d2h_bytes_per_s = 1e9, .h2d_bytes_per_s = 2e9, .copy_latency_s = 1e-5};
  CostOptions shared = alone;
  shared.link_devices = 2;
  const CostModel one(g, alone), two(g, shared);
  const uint64_t bytes = uint64_t{1} << 20;
  // latency + bytes * k / bandwidth: the latency is not shared, the bytes are.
  EXPECT_DOUBLE_EQ(one.d2h_time_s(bytes), 1e-5 + bytes / 1e9);
  EXPECT_DOUBLE_EQ(two.d2h_time_s(bytes), 1e-5 + 2.0 * bytes / 1e9);
  EXPECT_DOUBLE_EQ(two.h2d_time_s(bytes), 1e-5 + 2.0 * bytes / 2e9);
  EXPECT_GT(two.h2d_time_s(bytes), one.h2d_time_s(bytes));
  EXPECT_DOUBLE_EQ(two.d2h_time_s(0), one.d2h_time_s(0));
  // Compute is each device's own: node times do not change.
  for (NodeId n = 0; n < static_cast<NodeId>(g.num_nodes()); ++n) {
    EXPECT_DOUBLE_EQ(two.node_time_s(n), one.node_time_s(n)) << g.node(n).name;
  }
}

TEST(CostModel, LinkDevicesBelowOneIsRejectedNamingIt) {
  EXPECT_TRUE(check_cost_options({}).ok());
  for (int k : {0, -1}) {
    CostOptions o;
    o.link_devices = k;
    const absl::Status s = check_cost_options(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k;
    EXPECT_NE(std::string(s.message()).find("link_devices"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace lms::swap
