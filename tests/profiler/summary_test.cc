#include "lms/profiler/summary.h"

#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "synthetic_run.h"

namespace lms {
namespace {

constexpr uint32_t kSeed = 424242;

// Union length by painting integer cells: independent of the sort-and-merge
// in union_length_s.
double painted_union(const std::vector<std::pair<int, int>>& spans, int horizon) {
  std::vector<bool> cell(horizon, false);
  for (auto [a, b] : spans) {
    for (int i = a; i < b; ++i) cell[i] = true;
  }
  return static_cast<double>(std::count(cell.begin(), cell.end(), true));
}

TEST(SummaryTest, UnionOfRandomOverlappingIntervals) {
  std::printf("seed %u\n", kSeed);
  std::mt19937 rng(kSeed);
  for (int trial = 0; trial < 200; ++trial) {
    std::uniform_int_distribution<int> start(0, 990), len(0, 60), count(0, 40);
    std::vector<std::pair<int, int>> spans;
    std::vector<std::pair<double, double>> as_s;
    for (int n = count(rng); n > 0; --n) {
      int a = start(rng), b = std::min(1050, a + len(rng));
      spans.emplace_back(a, b);
      as_s.emplace_back(a * 1e-3, b * 1e-3);  // milliseconds in seconds
    }
    EXPECT_NEAR(union_length_s(as_s), painted_union(spans, 1050) * 1e-3, 1e-9) << "trial " << trial;
  }
}

TEST(SummaryTest, KnownPatternUtilisationAndStall) {
  Recorder rec;
  // Span 0..10 s (the step). Compute busy: [1,3) + [2,4) overlap -> [1,4),
  // plus [6,7): 4 s of 10 -> 40 %.
  rec.on_step(0, 0.0, 10.0);
  rec.on_node(StreamKind::kCompute, "a", "conv2d", 1.0, 3.0);
  rec.on_node(StreamKind::kCompute, "b", "relu", 2.0, 4.0);
  rec.on_node(StreamKind::kCompute, "c", "add", 6.0, 7.0);
  // Per Note [Stall], only the compute stream's stalls count, [4.5,6) + [5,5.5)
  // -> 1.5 s (a stall is not compute busy time); a stall reported on another
  // stream is not counted, and the host's waits [4,5) + [4.5,5.25) -> 1.25 s
  // are their own figure.
  rec.on_stall(StreamKind::kHost, "old-style host stall", "c", 4.0, 5.0);
  rec.on_stall(StreamKind::kH2D, "wait for compute", "c", 3.0, 4.0);
  rec.on_stall(StreamKind::kCompute, "wait for h2d copy", "c", 4.5, 6.0);
  rec.on_stall(StreamKind::kCompute, "wait for d2h copy", "", 5.0, 5.5);
  rec.on_host_wait("pinned host block in use by a swap-in", "c", 4.0, 5.0);
  rec.on_host_wait("step end synchronize", "", 4.5, 5.25);
  // Copies: 3e9 bytes D2H over [0,1)+[0.5,1.5) -> busy 1.5 s -> 2 GB/s.
  rec.on_copy(StreamKind::kD2H, "t1", 1'000'000'000, 0.0, 1.0);
  rec.on_copy(StreamKind::kD2H, "t2", 2'000'000'000, 0.5, 1.5);
  // 1e9 bytes H2D over 0.25 s -> 4 GB/s.
  rec.on_copy(StreamKind::kH2D, "t1", 1'000'000'000, 8.0, 8.25);
  rec.on_memory(MemoryKind::kDevice, 100, 0.5);
  rec.on_memory(MemoryKind::kDevice, 700, 2.0);
  rec.on_memory(MemoryKind::kDevice, 300, 9.0);
  rec.on_memory(MemoryKind::kPinnedHost, 3'000'000'000, 1.5);
  ProfileSummary s = summarize(rec);
  EXPECT_EQ(s.steps, 1);
  EXPECT_DOUBLE_EQ(s.step_time_s, 10.0);
  EXPECT_DOUBLE_EQ(s.span_s, 10.0);
  EXPECT_DOUBLE_EQ(s.compute_utilisation_pct, 40.0);
  EXPECT_DOUBLE_EQ(s.stall_s, 1.5);
  EXPECT_DOUBLE_EQ(s.host_wait_s, 1.25);
  EXPECT_EQ(s.bytes_d2h, 3'000'000'000u);
  EXPECT_EQ(s.bytes_h2d, 1'000'000'000u);
  EXPECT_DOUBLE_EQ(s.d2h_gb_per_s, 2.0);
  EXPECT_DOUBLE_EQ(s.h2d_gb_per_s, 4.0);
  EXPECT_EQ(s.peak_device_bytes, 700u);
  EXPECT_EQ(s.peak_pinned_host_bytes, 3'000'000'000u);
  // Copies busy [0,1.5) + [8,8.25) = 1.75 s; compute ran during [1,1.5).
  EXPECT_DOUBLE_EQ(s.copy_busy_s, 1.75);
  EXPECT_NEAR(s.copy_overlap_pct, 100.0 * 0.5 / 1.75, 1e-9);
}

TEST(SummaryTest, OverlapOfRandomIntervalSets) {
  std::printf("seed %u\n", kSeed + 1);
  std::mt19937 rng(kSeed + 1);
  for (int trial = 0; trial < 200; ++trial) {
    std::uniform_int_distribution<int> start(0, 990), len(0, 60), count(0, 30);
    std::vector<std::pair<int, int>> a, b;
    std::vector<std::pair<double, double>> a_s, b_s;
    for (auto* side : {&a, &b}) {
      for (int n = count(rng); n > 0; --n) {
        int lo = start(rng), hi = std::min(1050, lo + len(rng));
        side->emplace_back(lo, hi);
        (side == &a ? a_s : b_s).emplace_back(lo * 1e-3, hi * 1e-3);
      }
    }
    std::vector<bool> in_a(1050, false), in_b(1050, false);
    for (auto [lo, hi] : a) std::fill(in_a.begin() + lo, in_a.begin() + hi, true);
    for (auto [lo, hi] : b) std::fill(in_b.begin() + lo, in_b.begin() + hi, true);
    int both = 0;
    for (int i = 0; i < 1050; ++i) both += in_a[i] && in_b[i];
    EXPECT_NEAR(overlap_length_s(a_s, b_s), both * 1e-3, 1e-9) << "trial " << trial;
  }
}

TEST(SummaryTest, SyntheticRunAgainstIndependentFigures) {
  std::printf("seed %u\n", kSeed);
  Recorder rec;
  testing::SyntheticRun run = testing::run_synthetic(rec, kSeed, 300, 1ull << 30);
  ProfileSummary s = summarize(rec);
  uint64_t bytes[4] = {0, 0, 0, 0};
  double busy[4] = {0, 0, 0, 0}, stall = 0, host_wait = 0;
  double first = 1e300, last = -1e300;
  for (int st = 0; st < 4; ++st) {
    for (const auto& r : run.intervals[st]) {
      bytes[st] += r.bytes;
      // Each thread reported non-overlapping intervals, so busy = plain sum.
      if (r.kind == 2) {
        EXPECT_EQ(st, 1);  // stalls are on the compute stream
        stall += r.end_s - r.start_s;
      } else if (r.kind == 3) {
        EXPECT_EQ(st, 0);  // host waits on the host
        host_wait += r.end_s - r.start_s;
      } else {
        busy[st] += r.end_s - r.start_s;
      }
      first = std::min(first, r.start_s);
      last = std::max(last, r.end_s);
    }
  }
  uint64_t peak[2] = {0, 0};
  for (int m = 0; m < 2; ++m) {
    for (auto [t, b] : run.memory[m]) peak[m] = std::max(peak[m], b);
  }
  double step_sum = 0;
  for (auto [a, b] : run.steps) step_sum += b - a;
  const double span = last - first;  // memory samples and steps lie inside
  EXPECT_EQ(s.bytes_d2h, bytes[2]);
  EXPECT_EQ(s.bytes_h2d, bytes[3]);
  EXPECT_NEAR(s.span_s, span, 1e-9);
  EXPECT_NEAR(s.compute_utilisation_pct, 100.0 * busy[1] / span, 1e-6);
  EXPECT_NEAR(s.d2h_gb_per_s, bytes[2] / busy[2] / 1e9, 1e-6 * s.d2h_gb_per_s);
  EXPECT_NEAR(s.h2d_gb_per_s, bytes[3] / busy[3] / 1e9, 1e-6 * s.h2d_gb_per_s);
  EXPECT_GT(stall, 0);
  EXPECT_GT(host_wait, 0);
  EXPECT_NEAR(s.stall_s, stall, 1e-9);
  EXPECT_NEAR(s.host_wait_s, host_wait, 1e-9);
  EXPECT_EQ(s.peak_device_bytes, peak[0]);
  EXPECT_EQ(s.peak_pinned_host_bytes, peak[1]);
  ASSERT_GT(run.steps.size(), 0u);
  EXPECT_EQ(s.steps, static_cast<int64_t>(run.steps.size()));
  EXPECT_NEAR(s.step_time_s, step_sum / run.steps.size(), 1e-9);
}

TEST(SummaryTest, NoStepsUsesSpanAndEmptyIsZero) {
  ProfileSummary empty = summarize(Recorder());
  EXPECT_EQ(empty.step_time_s, 0.0);
  EXPECT_EQ(empty.compute_utilisation_pct, 0.0);
  EXPECT_EQ(empty.h2d_gb_per_s, 0.0);
  Recorder rec;
  rec.on_node(StreamKind::kCompute, "a", "op", 2.0, 2.5);
  rec.on_memory(MemoryKind::kDevice, 1, 3.0);
  ProfileSummary s = summarize(rec);
  EXPECT_EQ(s.steps, 0);
  EXPECT_DOUBLE_EQ(s.step_time_s, 1.0);
  EXPECT_DOUBLE_EQ(s.compute_utilisation_pct, 50.0);
}

TEST(SummaryTest, FormatIsAnAlignedTable) {
  ProfileSummary s;
  s.steps = 12;
  s.step_time_s = 0.1234;
  s.compute_utilisation_pct = 87.34;
  s.h2d_gb_per_s = 11.5;
  s.d2h_gb_per_s = 12.25;
  s.bytes_h2d = 3ull << 30;
  s.peak_device_bytes = 255ull << 20;
  s.stall_s = 0.0125;
  s.host_wait_s = 0.75;
  std::string text = format_summary(s);
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);  // title
  size_t width = 0;
  int rows = 0;
  while (std::getline(in, line)) {
    if (width == 0) width = line.size();
    EXPECT_EQ(line.size(), width) << "row '" << line << "' is not aligned";
    ++rows;
  }
  EXPECT_EQ(rows, 15);
  EXPECT_NE(text.find("123.400 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("87.3 %"), std::string::npos) << text;
  EXPECT_NE(text.find("11.50 GB/s"), std::string::npos) << text;
  EXPECT_NE(text.find("3072.0 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("255.0 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("stall time"), std::string::npos) << text;
  EXPECT_NE(text.find("12.500 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("host wait time"), std::string::npos) << text;
  EXPECT_NE(text.find("750.000 ms"), std::string::npos) << text;
}

// Issue markers pair with the compute intervals of the same name in order:
// node "a" runs twice (two steps), so its second marker pairs with its
// second run. Leads: a 1.0, b 0.5, a 2.0 -> median 1.0, max 2.0. A copy on
// another stream and a marker without a compute interval are not counted.
TEST(SummaryTest, IssueLeadPairsMarkersWithComputeNodesInOrder) {
  Recorder rec;
  rec.on_issue("a", "conv2d", 0.0);
  rec.on_issue("b", "relu", 0.5);
  rec.on_issue("s", "swap_out", 0.6);
  rec.on_issue("a", "conv2d", 1.5);
  rec.on_node(StreamKind::kCompute, "a", "conv2d", 1.0, 1.1);
  rec.on_node(StreamKind::kCompute, "b", "relu", 1.0, 1.2);
  rec.on_copy(StreamKind::kD2H, "s", 64, 1.2, 9.0);
  rec.on_node(StreamKind::kCompute, "a", "conv2d", 3.5, 3.6);
  ProfileSummary s = summarize(rec);
  EXPECT_DOUBLE_EQ(s.issue_lead_median_s, 1.0);
  EXPECT_DOUBLE_EQ(s.issue_lead_max_s, 2.0);
  // Without markers both are 0.
  Recorder none;
  none.on_node(StreamKind::kCompute, "a", "conv2d", 1.0, 1.1);
  EXPECT_EQ(summarize(none).issue_lead_max_s, 0.0);
}

}  // namespace
}  // namespace lms
