// The host link shared by emulated devices (Note [Shared host link]): its
// option checks, the slot schedule of reserve() (checked without sleeping:
// times are given, not measured), full duplex, and that copy() moves every
// byte. Timing with real devices is in cpu_device_test.cc.
#include "backend/cpu/host_link.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace lms {
namespace {

std::shared_ptr<HostLink> link_or_die(HostLinkOptions o) {
  auto link = make_host_link(o);
  EXPECT_TRUE(link.ok()) << link.status();
  return link.ok() ? *link : nullptr;
}

TEST(HostLink, BadOptionsAreRejectedNamingTheField) {
  struct Case {
    HostLinkOptions options;
    const char* field;
  } cases[] = {
      {{.d2h_bytes_per_s = -1}, "d2h_bytes_per_s"},
      {{.h2d_bytes_per_s = NAN}, "h2d_bytes_per_s"},
      {{.d2h_bytes_per_s = INFINITY}, "d2h_bytes_per_s"},
      {{.latency_s = -1e-6}, "latency_s"},
      {{.latency_s = INFINITY}, "latency_s"},
      {{.chunk_bytes = 0}, "chunk_bytes"},
  };
  for (const Case& c : cases) {
    auto link = make_host_link(c.options);
    ASSERT_FALSE(link.ok()) << c.field;
    EXPECT_EQ(link.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(link.status().message()).find(c.field), std::string::npos)
        << link.status();
  }
  EXPECT_TRUE(make_host_link({}).ok());  // unthrottled both ways
}

TEST(HostLink, OneCopyGetsConsecutiveSlotsAtTheFullRate) {
  auto link = link_or_die({.d2h_bytes_per_s = 1e9, .h2d_bytes_per_s = 1e9});
  ASSERT_NE(link, nullptr);
  // 1e6 bytes at 1e9 bytes/s: 1 ms per slot, back to back from `ready`.
  double end = link->reserve(StreamKind::kH2D, 1000000, 10.0);
  EXPECT_DOUBLE_EQ(end, 10.001);
  end = link->reserve(StreamKind::kH2D, 1000000, end);
  EXPECT_DOUBLE_EQ(end, 10.002);
  // A copy that is ready earlier waits for the slot in use.
  EXPECT_DOUBLE_EQ(link->reserve(StreamKind::kH2D, 1000000, 10.0), 10.003);
  // After the link went idle, a slot starts when its copy is ready.
  EXPECT_DOUBLE_EQ(link->reserve(StreamKind::kH2D, 1000000, 20.0), 20.001);
}

TEST(HostLink, DirectionsAreIndependentChannels) {
  auto link = link_or_die({.d2h_bytes_per_s = 1e9, .h2d_bytes_per_s = 2e9});
  ASSERT_NE(link, nullptr);
  EXPECT_DOUBLE_EQ(link->reserve(StreamKind::kD2H, 1000000, 5.0), 5.001);
  EXPECT_DOUBLE_EQ(link->reserve(StreamKind::kH2D, 1000000, 5.0), 5.0005);  // full duplex
  auto open = link_or_die({.d2h_bytes_per_s = 1e9});                        // h2d unthrottled
  ASSERT_NE(open, nullptr);
  EXPECT_DOUBLE_EQ(open->reserve(StreamKind::kH2D, 1000000, 5.0), 5.0);
}

// Copies that each reserve their next chunk when their previous slot ends,
// as copy() does, replayed in time order without sleeping. Returns each
// copy's end time.
std::vector<double> replay(HostLink& link, const std::vector<double>& ready_s, int chunks,
                           uint64_t chunk_bytes) {
  std::vector<double> at = ready_s;  // when each copy reserves next
  std::vector<int> left(ready_s.size(), chunks);
  for (;;) {
    int next = -1;
    for (size_t i = 0; i < at.size(); ++i) {
      if (left[i] > 0 && (next < 0 || at[i] < at[next])) next = static_cast<int>(i);
    }
    if (next < 0) return at;
    at[next] = link.reserve(StreamKind::kD2H, chunk_bytes, at[next]);
    --left[next];
  }
}

TEST(HostLink, ConcurrentCopiesAlternateChunksAndEachGetsItsShare) {
  constexpr int kChunks = 100;
  constexpr uint64_t kChunkBytes = 1000000;  // 1 ms at 1e9 bytes/s
  for (int k = 1; k <= 3; ++k) {
    auto link = link_or_die({.d2h_bytes_per_s = 1e9});
    ASSERT_NE(link, nullptr);
    const std::vector<double> ends =
        replay(*link, std::vector<double>(k, 0.0), kChunks, kChunkBytes);
    // Each of k copies of 100 ms alone ends within one chunk of k x 100 ms:
    // it moved at 1/k of the link.
    for (int i = 0; i < k; ++i) {
      EXPECT_NEAR(ends[i], k * 0.1, 1e-3 * k + 1e-12) << k << " copies, copy " << i;
    }
    // The link was never idle and never double booked.
    EXPECT_NEAR(*std::max_element(ends.begin(), ends.end()), k * 0.1, 1e-9);
  }
}

TEST(HostLink, CopyMovesEveryByteAndWaitsOutTheLatency) {
  auto link = link_or_die(
      {.d2h_bytes_per_s = 20e9, .h2d_bytes_per_s = 20e9, .latency_s = 2e-3, .chunk_bytes = 4096});
  ASSERT_NE(link, nullptr);
  const size_t bytes = 3 * 4096 + 123;  // not a whole number of chunks
  std::vector<unsigned char> src(bytes), dst(bytes, 0);
  std::iota(src.begin(), src.end(), 7);
  const double start = now_s();
  link->copy(StreamKind::kH2D, dst.data(), src.data(), bytes, start);
  EXPECT_GE(now_s() - start, 2e-3);
  EXPECT_EQ(dst, src);
  const double empty_start = now_s();
  link->copy(StreamKind::kD2H, nullptr, nullptr, 0, empty_start);
  EXPECT_GE(now_s() - empty_start, 2e-3);
}

}  // namespace
}  // namespace lms
