// ProfileOptions::cold_input_min_bytes, as a user calls lms::profile_step:
// before every timed run of a node, each of its inputs of at least that
// many bytes goes through Device::evict_from_caches, and no other does.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>

#include "faulty_device.h"
#include "lms/device.h"
#include "lms/profile.h"
#include "user_models.h"

namespace lms::user {
namespace {

struct Expected {
  int64_t evictions = 0;
  uint64_t bytes = 0;
};

// The inputs of the profiled nodes with at least `min_bytes` (and > 0), once
// per run of their node.
Expected expected(const Graph& g, const StepProfile& p, uint64_t min_bytes, int runs) {
  Expected e;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (p.node_time_s[id] < 0) continue;
    for (TensorId t : g.node(id).inputs) {
      const uint64_t b = g.tensor(t).bytes();
      if (b == 0 || b < min_bytes) continue;
      e.evictions += runs;
      e.bytes += b * runs;
    }
  }
  return e;
}

TEST(ProfileColdInputs, EvictsExactlyTheLargeInputsBeforeEveryRun) {
  // The user's 2-D U-Net (concat skips), batch 2 of 32x32.
  auto graph = user_unet(2, 32, Adam{.lr = 1e-3});
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto cpu = make_cpu_device({.capacity_bytes = uint64_t{256} << 20});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  FaultyDevice device(std::move(*cpu));
  const ProfileOptions base{.link = false, .warmup_runs = 1, .runs = 2};
  const int runs = base.warmup_runs + base.runs;
  int64_t previous = -1;
  // From every input to none: the counts only fall as the threshold rises.
  for (uint64_t min_bytes : {uint64_t{0}, uint64_t{16} << 10, uint64_t{64} << 10, UINT64_MAX}) {
    SCOPED_TRACE(min_bytes);
    device.clear_evictions();
    ProfileOptions o = base;
    o.cold_input_min_bytes = min_bytes;
    auto p = profile_step(*graph, device, o);
    ASSERT_TRUE(p.ok()) << p.status();
    const Expected e = expected(*graph, *p, min_bytes, runs);
    const int64_t n = device.evictions();
    std::printf("cold_input_min_bytes %llu: %lld evictions, %llu bytes\n",
                static_cast<unsigned long long>(min_bytes), static_cast<long long>(n),
                static_cast<unsigned long long>(device.evicted_bytes()));
    EXPECT_EQ(n, e.evictions);
    EXPECT_EQ(device.evicted_bytes(), e.bytes);
    if (n > 0) {
      EXPECT_GE(device.least_evicted_bytes(), min_bytes == 0 ? 1 : min_bytes);
    }
    if (previous >= 0) {
      EXPECT_LE(n, previous);
    }
    if (min_bytes == 0) {
      EXPECT_GT(n, 0);
    }
    if (min_bytes == UINT64_MAX) {
      EXPECT_EQ(n, 0);
    }
    previous = n;
  }
}

}  // namespace
}  // namespace lms::user
