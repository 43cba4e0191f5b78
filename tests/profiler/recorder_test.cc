#include "lms/profiler/recorder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "synthetic_run.h"

namespace lms {
namespace {

constexpr uint32_t kSeed = 20240611;
constexpr uint64_t kCapacity = 64ull << 20;

TEST(RecorderTest, MultiThreadedRunKeepsEveryEventInOrder) {
  SCOPED_TRACE(::testing::Message() << "seed " << kSeed);
  Recorder rec(16);  // small reservation: forces reallocation under contention
  testing::SyntheticRun run = testing::run_synthetic(rec, kSeed, 500, kCapacity);
  Timeline t = rec.snapshot();
  size_t expected_events = run.steps.size() + run.memory[0].size() + run.memory[1].size();
  for (int s = 0; s < 4; ++s) {
    const auto& got = t.stream(static_cast<StreamKind>(s));
    const auto& want = run.intervals[s];
    expected_events += want.size();
    ASSERT_EQ(got.size(), want.size()) << "stream " << s;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(static_cast<int>(got[i].kind), want[i].kind);
      EXPECT_EQ(t.str(got[i].name), want[i].name);
      EXPECT_EQ(t.str(got[i].detail), want[i].detail);
      EXPECT_EQ(got[i].bytes, want[i].bytes);
      EXPECT_EQ(got[i].start_s, want[i].start_s);
      EXPECT_EQ(got[i].end_s, want[i].end_s);
    }
  }
  EXPECT_EQ(rec.event_count(), expected_events);
  EXPECT_EQ(rec.dropped_events(), 0u);
  ASSERT_EQ(t.steps.size(), run.steps.size());
  for (int m = 0; m < 2; ++m) {
    const auto& got = t.samples(static_cast<MemoryKind>(m));
    ASSERT_EQ(got.size(), run.memory[m].size());
    EXPECT_TRUE(std::is_sorted(got.begin(), got.end(), [](const auto& a, const auto& b) {
      return a.t_s < b.t_s;
    })) << "memory samples are sorted by time in the snapshot";
  }
}

TEST(RecorderTest, InternsRepeatedStrings) {
  Recorder rec;
  for (int i = 0; i < 100; ++i) {
    rec.on_node(StreamKind::kCompute, "conv1", "conv2d", i, i + 0.5);
    rec.on_node(StreamKind::kCompute, "relu1", "relu", i + 0.5, i + 1);
  }
  Timeline t = rec.snapshot();
  // "", conv1, conv2d, relu1, relu: five distinct strings for 200 events.
  EXPECT_EQ(t.strings.size(), 5u);
  const auto& iv = t.stream(StreamKind::kCompute);
  ASSERT_EQ(iv.size(), 200u);
  EXPECT_EQ(iv[0].name, iv[198].name);
  EXPECT_NE(iv[0].name, iv[1].name);
}

TEST(RecorderTest, DropsMalformedEventsAndCountsThem) {
  Recorder rec;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  rec.on_node(StreamKind::kCompute, "a", "op", 2.0, 1.0);  // ends before it starts
  rec.on_node(StreamKind::kCompute, "a", "op", nan, 1.0);
  rec.on_copy(StreamKind::kD2H, "t", 10, 0.0, inf);
  rec.on_node(static_cast<StreamKind>(9), "a", "op", 0.0, 1.0);
  rec.on_memory(static_cast<MemoryKind>(7), 10, 1.0);
  rec.on_memory(MemoryKind::kDevice, 10, nan);
  rec.on_stall(StreamKind::kHost, "r", "n", 3.0, 2.0);
  rec.on_host_wait("r", "n", inf, 2.0);
  rec.on_step(0, 5.0, 4.0);
  EXPECT_EQ(rec.dropped_events(), 9u);
  EXPECT_EQ(rec.event_count(), 0u);
  EXPECT_TRUE(rec.snapshot().empty());
  rec.on_node(StreamKind::kCompute, "a", "op", 1.0, 1.0);  // zero length is fine
  EXPECT_EQ(rec.event_count(), 1u);
}

TEST(RecorderTest, ClearForgetsEverything) {
  Recorder rec;
  testing::run_synthetic(rec, kSeed + 1, 50, kCapacity);
  rec.on_node(StreamKind::kCompute, "x", "op", 2.0, 1.0);
  ASSERT_GT(rec.event_count(), 0u);
  rec.clear();
  EXPECT_EQ(rec.event_count(), 0u);
  EXPECT_EQ(rec.dropped_events(), 0u);
  Timeline t = rec.snapshot();
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.strings.size(), 1u);
  rec.on_node(StreamKind::kCompute, "after", "op", 1.0, 2.0);
  t = rec.snapshot();
  EXPECT_EQ(t.str(t.stream(StreamKind::kCompute)[0].name), "after");
}

TEST(RecorderTest, TimelineSpan) {
  Recorder rec;
  EXPECT_EQ(rec.snapshot().first_s(), 0.0);
  rec.on_memory(MemoryKind::kPinnedHost, 1, 3.0);
  rec.on_node(StreamKind::kCompute, "a", "op", 5.0, 6.0);
  rec.on_step(0, 4.0, 7.5);
  Timeline t = rec.snapshot();
  EXPECT_EQ(t.first_s(), 3.0);
  EXPECT_EQ(t.last_s(), 7.5);
}

}  // namespace
}  // namespace lms
