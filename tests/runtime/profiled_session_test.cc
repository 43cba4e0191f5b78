// The profiler on a real swapped run: the Chrome trace parses, its events are
// well formed, per-track intervals do not overlap, counters stay under the
// capacity, and the summary's swap bytes equal the plan's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "backend/cpu/cpu_device.h"
#include "lms/config.h"
#include "lms/profiler/chrome_trace.h"
#include "lms/profiler/memory_plot.h"
#include "lms/profiler/recorder.h"
#include "lms/profiler/summary.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/training.h"
#include "models.h"
#include "nlohmann/json.hpp"

namespace lms {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kCapacity = 64 * kMiB;
constexpr int kSteps = 2;

struct ProfiledRun {
  Recorder recorder;
  RewriteReport report;
  uint64_t peak = 0;
};

// VDSR-shaped net with three activations swapped by the manual policy.
void run_profiled(bool lms, ProfiledRun& out) {
  Graph g;
  auto m =
      models::build_vdsr(g, {.batch = 2, .height = 16, .width = 16, .depth = 8, .channels = 8});
  Graph train = *training_graph(g, m.loss, Adam{.lr = 1e-3});
  LmsConfig cfg;
  cfg.enabled = lms;
  cfg.policy = SwapPolicy::kManual;
  cfg.tensors = {"relu2", "relu4", "relu6"};
  auto device = cpu::CpuDevice::create({.capacity_bytes = kCapacity, .host_pool_bytes = 64 * kMiB});
  ASSERT_TRUE(device.ok());
  auto report = rewrite(train, cfg, **device);
  ASSERT_TRUE(report.ok()) << report.status();
  out.report = *report;
  auto session = Session::create(train, **device, {.sink = &out.recorder});
  ASSERT_TRUE(session.ok()) << session.status();
  std::mt19937_64 gen(31);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> lr(2 * 16 * 16), hr(lr.size());
  for (float& x : lr) x = u(gen);
  for (float& x : hr) x = u(gen);
  for (int i = 0; i < kSteps; ++i) {
    StepResult r;
    ASSERT_TRUE((*session)->run({{"lr", lr}, {"hr", hr}}, &r).ok());
    out.peak = std::max(out.peak, r.peak_device_bytes);
  }
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/" + std::to_string(getpid()) + "_" + name;
}

TEST(ProfiledSessionTest, TraceOfASwappedRunIsWellFormed) {
  std::printf("seed 31\n");
  ProfiledRun run;
  run_profiled(true, run);
  ASSERT_FALSE(run.report.swapped.empty());
  std::string path = temp_path("trace.json");
  ASSERT_TRUE(write_chrome_trace(run.recorder, {.device_capacity_bytes = kCapacity}, path).ok());
  std::ifstream in(path);
  nlohmann::json trace = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(trace.is_discarded());
  const nlohmann::json& events = trace.is_array() ? trace : trace["traceEvents"];
  ASSERT_TRUE(events.is_array());
  std::map<int, std::vector<std::pair<double, double>>> by_track;
  int swaps = 0, counters = 0;
  for (const auto& e : events) {
    for (const char* key : {"ph", "name", "pid", "tid"}) ASSERT_TRUE(e.contains(key)) << e.dump();
    std::string ph = e["ph"];
    if (ph == "M") continue;
    ASSERT_TRUE(e.contains("ts")) << e.dump();
    if (ph == "X") {
      ASSERT_TRUE(e.contains("dur")) << e.dump();
      by_track[e["tid"].get<int>()].push_back(
          {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
      std::string cat = e.value("cat", "");
      if (cat == "swap_out" || cat == "swap_in") ++swaps;
    }
    if (ph == "C") {
      ++counters;
      for (const auto& [k, v] : e["args"].items()) {
        if (k.find("capacity") == std::string::npos) {
          EXPECT_LE(v.get<double>(), kCapacity) << k;
        }
      }
    }
  }
  EXPECT_EQ(swaps, 2 * kSteps * static_cast<int>(run.report.swapped.size()));
  EXPECT_GT(counters, 0);
  for (auto& [tid, spans] : by_track) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
      EXPECT_LE(spans[i - 1].second, spans[i].first + 1e-3) << "track " << tid << " overlaps";
    }
  }
  std::remove(path.c_str());
}

TEST(ProfiledSessionTest, SummaryBytesEqualThePlan) {
  ProfiledRun run;
  run_profiled(true, run);
  ProfileSummary s = summarize(run.recorder);
  EXPECT_EQ(s.steps, kSteps);
  EXPECT_EQ(s.bytes_d2h, kSteps * run.report.bytes_out_per_step);
  EXPECT_EQ(s.bytes_h2d, kSteps * run.report.bytes_in_per_step);
  // The device counter follows the planned bytes in use as nodes run: its
  // peak is the persistent tensors plus the arena's lower bound, the most
  // bytes live at one position; the device holds the whole arena.
  EXPECT_EQ(s.peak_device_bytes,
            run.report.arena_persistent_bytes + run.report.arena_lower_bound_bytes);
  EXPECT_EQ(run.peak, run.report.peak_bytes_after);
  EXPECT_LE(s.peak_device_bytes, run.peak);
  EXPECT_GT(s.peak_pinned_host_bytes, 0u);
  EXPECT_GT(s.compute_utilisation_pct, 0);
  EXPECT_LE(s.compute_utilisation_pct, 100);
  std::printf("%s", format_summary(s).c_str());
}

TEST(ProfiledSessionTest, MemoryPlotWithAndWithoutLms) {
  ProfiledRun with, without;
  run_profiled(true, with);
  run_profiled(false, without);
  EXPECT_LT(with.peak, without.peak);
  std::string path = temp_path("memory.svg");
  std::vector<MemorySeries> series = {device_series(without.recorder, "without LMS", 1),
                                      device_series(with.recorder, "with LMS", 1)};
  ASSERT_FALSE(series[0].points.empty());
  ASSERT_FALSE(series[1].points.empty());
  ASSERT_TRUE(write_memory_svg(series, kCapacity, path, "device bytes in use, one step").ok());
  std::ifstream in(path);
  std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("with LMS"), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace lms
