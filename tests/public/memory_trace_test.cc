// What a user reads off a profiled LMS run of their own U-Net (concat skips,
// a tensor read by three far-apart consumers), through include/lms alone:
//  - the host's issue markers: one per node per step, each before its node
//    starts on its stream, and the host runs ahead of the compute stream
//    (memory reuse is ordered by stream events, not by host waits);
//  - the trace shows them as instants on the host track;
//  - bytes in use by schedule position, planned against measured, equal
//    entry by entry, and plotted;
//  - bytes in use over device time with LMS off and on against the capacity.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "lms/config.h"
#include "lms/profiler/chrome_trace.h"
#include "lms/profiler/memory_plot.h"
#include "lms/profiler/recorder.h"
#include "lms/profiler/summary.h"
#include "lms/rewrite.h"
#include "nlohmann/json.hpp"
#include "user_models.h"

namespace lms::user {
namespace {

constexpr int64_t kBatch = 4;
constexpr int64_t kSize = 64;
constexpr uint64_t kSeed = 2024;
constexpr int kSteps = 2;

struct ProfiledRun {
  Recorder recorder;
  RewriteReport report;
  std::vector<StepResult> steps;
  int64_t nodes = 0;
  uint64_t capacity = 0;
};

// Plans the U-Net with LMS on or off for a 64 MiB device (budget `budget`,
// 0: the capacity) and runs kSteps profiled steps.
void run(bool lms, uint64_t budget, ProfiledRun& out) {
  out.capacity = 64 * kMiB;
  auto device = make_cpu_device({.capacity_bytes = out.capacity, .host_pool_bytes = 256 * kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  auto train = user_unet(kBatch, kSize, Sgd{.lr = 0.01f});
  ASSERT_TRUE(train.ok()) << train.status();
  LmsConfig cfg;
  cfg.enabled = lms;
  cfg.device_memory_limit = budget;
  auto rep = rewrite(*train, cfg, **device);
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_TRUE(rep->fits) << rep->summary();
  out.report = *rep;
  out.nodes = static_cast<int64_t>(train->num_nodes());
  auto session = Session::create(*train, **device, {.sink = &out.recorder});
  ASSERT_TRUE(session.ok()) << session.status();
  const Feeds feeds = user_unet_feeds(kBatch, kSize, kSeed);
  for (int i = 0; i < kSteps; ++i) {
    StepResult r;
    ASSERT_TRUE((*session)->run(feeds, &r).ok());
    out.steps.push_back(std::move(r));
  }
}

// A budget between the working-set limit and the no-LMS peak, so the plan
// swaps.
uint64_t swapping_budget() {
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB});
  auto train = user_unet(kBatch, kSize, Sgd{.lr = 0.01f});
  LmsConfig off;
  off.enabled = false;
  auto rep = rewrite(*train, off, **device);
  if (!rep.ok()) return 0;
  return (rep->working_set_limit_bytes + rep->peak_bytes_after) / 2;
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/memory_trace_" + name;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(MemoryTrace, HostIssuesEveryNodeAheadOfItsStream) {
  std::printf("seed %llu, U-Net batch %lld, %lldx%lld\n", static_cast<unsigned long long>(kSeed),
              static_cast<long long>(kBatch), static_cast<long long>(kSize),
              static_cast<long long>(kSize));
  const uint64_t budget = swapping_budget();
  ASSERT_GT(budget, 0u);
  ProfiledRun r;
  run(true, budget, r);
  ASSERT_FALSE(r.report.swapped.empty()) << r.report.summary();
  const Timeline t = r.recorder.snapshot();

  // One marker per node per step, in issue order.
  std::vector<const Interval*> issues;
  for (const Interval& i : t.stream(StreamKind::kHost)) {
    if (i.kind == IntervalKind::kIssue) issues.push_back(&i);
  }
  ASSERT_EQ(static_cast<int64_t>(issues.size()), kSteps * r.nodes);
  for (size_t k = 1; k < issues.size(); ++k) EXPECT_LE(issues[k - 1]->start_s, issues[k]->start_s);

  // Each compute node starts after the host issued it: pair the k-th marker
  // of a name with the k-th span of that name on the compute stream.
  std::map<std::string, std::vector<double>> issued;
  for (const Interval* i : issues) issued[std::string(t.str(i->name))].push_back(i->start_s);
  std::map<std::string, size_t> seen;
  int paired = 0;
  for (const Interval& i : t.stream(StreamKind::kCompute)) {
    if (i.kind != IntervalKind::kNode) continue;
    const std::string name(t.str(i.name));
    auto it = issued.find(name);
    ASSERT_NE(it, issued.end()) << "no issue marker for compute node " << name;
    const size_t k = seen[name]++;
    ASSERT_LT(k, it->second.size()) << name;
    EXPECT_LE(it->second[k], i.start_s) << name << " started before the host issued it";
    ++paired;
  }
  // Every node but the swaps (copies, reported under their tensor's name)
  // ran on the compute stream.
  EXPECT_EQ(paired, kSteps * (r.nodes - 2 * static_cast<int64_t>(r.report.swapped.size())));

  // The host runs ahead: in the second step, by the time the compute stream
  // starts the step's middle node, the host has issued more than half of
  // the step's nodes beyond it. A host that waited for copies to reuse
  // memory would issue in lockstep with the device.
  const StepRecord& second = t.steps.at(1);
  std::vector<double> compute_starts;
  for (const Interval& i : t.stream(StreamKind::kCompute)) {
    if (i.kind == IntervalKind::kNode && i.start_s >= second.start_s && i.end_s <= second.end_s) {
      compute_starts.push_back(i.start_s);
    }
  }
  ASSERT_FALSE(compute_starts.empty());
  const double middle = compute_starts[compute_starts.size() / 2];
  int64_t issued_by_middle = 0;
  for (const Interval* i : issues) {
    if (i->start_s >= second.start_s && i->start_s <= middle) ++issued_by_middle;
  }
  const ProfileSummary s = summarize(t);
  std::printf("%s", format_summary(s).c_str());
  std::printf("nodes issued when compute starts its middle node: %lld of %lld\n",
              static_cast<long long>(issued_by_middle), static_cast<long long>(r.nodes));
  EXPECT_GT(issued_by_middle, r.nodes * 3 / 4);
  EXPECT_GT(s.issue_lead_median_s, 0.0);
  EXPECT_GE(s.issue_lead_max_s, s.issue_lead_median_s);

  // The trace shows each marker as an instant on the host track.
  const std::string path = temp_path("trace.json");
  ASSERT_TRUE(write_chrome_trace(r.recorder, {.device_capacity_bytes = r.capacity}, path).ok());
  nlohmann::json trace = nlohmann::json::parse(read(path), nullptr, false);
  ASSERT_FALSE(trace.is_discarded());
  int host_tid = -1, instants = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "host") {
      host_tid = e["tid"].get<int>();
    }
  }
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "i") continue;
    EXPECT_EQ(e["tid"].get<int>(), host_tid) << e.dump();
    EXPECT_EQ(e["cat"], "issue") << e.dump();
    EXPECT_FALSE(e.contains("dur")) << e.dump();
    ++instants;
  }
  EXPECT_EQ(instants, kSteps * r.nodes);
  std::remove(path.c_str());
}

TEST(MemoryTrace, BytesByPositionPlannedEqualMeasuredAndPlot) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  const uint64_t budget = swapping_budget();
  ASSERT_GT(budget, 0u);
  ProfiledRun on, off;
  run(true, budget, on);
  run(false, 0, off);
  for (const ProfiledRun* r : {&on, &off}) {
    ASSERT_EQ(static_cast<int64_t>(r->report.device_bytes_by_position.size()), r->nodes);
    for (const StepResult& step : r->steps) {
      EXPECT_EQ(step.device_bytes_by_position, r->report.device_bytes_by_position);
      EXPECT_EQ(step.peak_device_bytes, r->report.peak_bytes_after);
    }
  }
  // LMS lowers the most bytes in use at a position, under the budget.
  auto max_of = [](const std::vector<uint64_t>& v) {
    return *std::max_element(v.begin(), v.end());
  };
  EXPECT_LT(max_of(on.report.device_bytes_by_position),
            max_of(off.report.device_bytes_by_position));
  EXPECT_LE(on.report.peak_bytes_after, budget);

  const std::string by_position = temp_path("by_position.svg");
  ASSERT_TRUE(write_memory_svg(
                  std::vector<MemorySeries>{
                      position_series(on.report.device_bytes_by_position, "planned, LMS on"),
                      position_series(on.steps[1].device_bytes_by_position, "measured, LMS on")},
                  budget, by_position, "U-Net bytes in use by position", kPositionAxis)
                  .ok());
  const std::string svg = read(by_position);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("planned, LMS on"), std::string::npos);
  EXPECT_NE(svg.find(std::string(kPositionAxis)), std::string::npos);
  std::remove(by_position.c_str());

  // Over device time: the counter follows nodes as they execute; its peak
  // is the planned profile's peak, with LMS off and on.
  for (const ProfiledRun* r : {&on, &off}) {
    const MemorySeries s = device_series(r->recorder, "step 1", 1);
    ASSERT_FALSE(s.points.empty());
    uint64_t peak = 0;
    for (const auto& [t_s, bytes] : s.points) peak = std::max(peak, bytes);
    EXPECT_EQ(peak, max_of(r->report.device_bytes_by_position));
  }
  const std::string over_time = temp_path("over_time.svg");
  ASSERT_TRUE(write_memory_svg(std::vector<MemorySeries>{device_series(off.recorder, "LMS off", 1),
                                                         device_series(on.recorder, "LMS on", 1)},
                               on.capacity, over_time, "U-Net bytes in use over device time")
                  .ok());
  const std::string svg2 = read(over_time);
  EXPECT_NE(svg2.find("LMS off"), std::string::npos);
  EXPECT_NE(svg2.find("class=\"capacity\""), std::string::npos);
  std::remove(over_time.c_str());
}

}  // namespace
}  // namespace lms::user
