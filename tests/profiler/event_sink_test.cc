#include "lms/profiler/event_sink.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>

namespace lms {
namespace {

TEST(EventSinkTest, StreamNamesAreDistinct) {
  EXPECT_STREQ(stream_name(StreamKind::kHost), "host");
  EXPECT_STREQ(stream_name(StreamKind::kCompute), "compute");
  EXPECT_STREQ(stream_name(StreamKind::kD2H), "d2h");
  EXPECT_STREQ(stream_name(StreamKind::kH2D), "h2d");
  std::set<std::string> names;
  for (int s = 0; s < 4; ++s) names.insert(stream_name(static_cast<StreamKind>(s)));
  EXPECT_EQ(names.size(), 4u);
  EXPECT_STREQ(stream_name(static_cast<StreamKind>(42)), "unknown");
}

TEST(EventSinkTest, NowIsMonotonicSeconds) {
  double a = now_s();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  double b = now_s();
  EXPECT_GE(b - a, 0.0045);  // seconds, not milliseconds or ticks
  EXPECT_LT(b - a, 5.0);
  double prev = now_s();
  for (int i = 0; i < 10000; ++i) {
    double t = now_s();
    ASSERT_GE(t, prev);
    prev = t;
  }
}

}  // namespace
}  // namespace lms
