#include "lms/profiler/chrome_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "lms/profiler/atomic_file.h"
#include "synthetic_run.h"

namespace lms {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uint32_t kSeed = 77123;
constexpr uint64_t kCapacity = 96ull << 20;

fs::path temp_dir() { return testing::fresh_test_dir(); }

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);  // throws (failing the test) if not valid JSON
}

bool leftover_temp(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  }
  return false;
}

class ChromeTraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::printf("seed %u\n", kSeed);
    run_ = testing::run_synthetic(rec_, kSeed, 400, kCapacity);
    dir_ = temp_dir();
    TraceOptions opt;
    opt.device_capacity_bytes = kCapacity;
    path_ = dir_ / "trace.json";
    ASSERT_TRUE(write_chrome_trace(rec_, opt, path_.string()).ok());
    doc_ = read_json(path_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  const json& events() const { return doc_.at("traceEvents"); }

  Recorder rec_;
  testing::SyntheticRun run_;
  fs::path dir_, path_;
  json doc_;
};

TEST_F(ChromeTraceTest, EveryEventHasTheRequiredFields) {
  ASSERT_TRUE(events().is_array());
  ASSERT_FALSE(events().empty());
  for (const json& e : events()) {
    for (const char* key : {"ph", "name", "ts", "pid", "tid"}) {
      ASSERT_TRUE(e.contains(key)) << key << " missing in " << e.dump();
    }
    EXPECT_TRUE(e["ts"].is_number());
    if (e["ph"] == "X") {
      ASSERT_TRUE(e.contains("dur")) << e.dump();
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      EXPECT_GE(e["ts"].get<double>(), 0.0) << "timestamps are relative to the first event";
    }
  }
  EXPECT_FALSE(leftover_temp(dir_));
}

TEST_F(ChromeTraceTest, OneNamedTrackPerStream) {
  std::map<int, std::string> names;
  for (const json& e : events()) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      names[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
    }
  }
  std::vector<std::string> got;
  for (const auto& [tid, name] : names) got.push_back(name);
  for (const char* s : {"host", "compute", "d2h", "h2d"}) {
    EXPECT_EQ(std::count(got.begin(), got.end(), s), 1) << s;
  }
  // Every X event sits on a named track.
  for (const json& e : events()) {
    if (e["ph"] == "X") {
      EXPECT_TRUE(names.count(e["tid"].get<int>())) << e.dump();
    }
  }
}

TEST_F(ChromeTraceTest, IntervalsMatchWhatWasReportedAndDoNotOverlap) {
  std::map<std::string, int> tid_of;
  for (const json& e : events()) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      tid_of[e["args"]["name"].get<std::string>()] = e["tid"].get<int>();
    }
  }
  double first_s = run_.base_s + 1e9;
  for (const auto& v : run_.intervals) {
    for (const auto& r : v) first_s = std::min(first_s, r.start_s);
  }
  for (int s = 0; s < 4; ++s) {
    const int tid = tid_of.at(stream_name(static_cast<StreamKind>(s)));
    std::vector<std::pair<double, double>> spans;
    uint64_t bytes = 0;
    for (const json& e : events()) {
      if (e["ph"] != "X" || e["tid"] != tid) continue;
      spans.emplace_back(e["ts"].get<double>(), e["dur"].get<double>());
      if (e["args"].contains("bytes")) bytes += e["args"]["bytes"].get<uint64_t>();
    }
    const auto& want = run_.intervals[s];
    ASSERT_EQ(spans.size(), want.size()) << "stream " << s;
    uint64_t want_bytes = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      want_bytes += want[i].bytes;
      // Timestamps are rounded to whole nanoseconds.
      EXPECT_NEAR(spans[i].first, (want[i].start_s - first_s) * 1e6, 0.6e-3);
      EXPECT_NEAR(spans[i].second, (want[i].end_s - want[i].start_s) * 1e6, 1.2e-3);
    }
    EXPECT_EQ(bytes, want_bytes);
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
      // 1e-6 us of slack for the subtraction of a 1000 s origin.
      EXPECT_LE(spans[i - 1].first + spans[i - 1].second, spans[i].first + 1e-6)
          << "overlap on stream " << s << " at " << i;
    }
  }
}

TEST_F(ChromeTraceTest, CategoriesNameTheKindOfWork) {
  std::map<std::string, int> cats;
  for (const json& e : events()) {
    if (e["ph"] == "X") cats[e["cat"].get<std::string>()]++;
  }
  EXPECT_EQ(cats["swap_out"], static_cast<int>(run_.intervals[2].size()));
  EXPECT_EQ(cats["swap_in"], static_cast<int>(run_.intervals[3].size()));
  int stalls = 0, host_waits = 0;
  for (const auto& v : run_.intervals) {
    for (const auto& r : v) {
      stalls += r.kind == 2;
      host_waits += r.kind == 3;
    }
  }
  EXPECT_GT(stalls, 0);
  EXPECT_GT(host_waits, 0);
  EXPECT_EQ(cats["stall"], stalls);
  EXPECT_EQ(cats["host_wait"], host_waits);
  EXPECT_EQ(cats["step"], static_cast<int>(run_.steps.size()));
  EXPECT_GT(cats["op0"], 0);
}

TEST_F(ChromeTraceTest, CountersStayWithinCapacity) {
  std::map<std::string, int> counts;
  for (const json& e : events()) {
    if (e["ph"] != "C") continue;
    counts[e["name"].get<std::string>()]++;
    EXPECT_LE(e["args"]["bytes"].get<uint64_t>(), kCapacity) << e.dump();
  }
  EXPECT_EQ(counts["device_bytes_in_use"], static_cast<int>(run_.memory[0].size()));
  EXPECT_EQ(counts["pinned_host_bytes_in_use"], static_cast<int>(run_.memory[1].size()));
  EXPECT_EQ(counts["device_capacity_bytes"], 2);
}

TEST(ChromeTraceErrors, UnwritablePathFailsAndLeavesNoTempFile) {
  Recorder rec;
  testing::run_synthetic(rec, kSeed, 20, kCapacity);
  fs::path dir = temp_dir();
  // A path whose parent does not exist.
  std::string missing = (dir / "no_such_dir" / "t.json").string();
  absl::Status st = write_chrome_trace(rec, {}, missing);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(missing), std::string::npos) << st;
  // A path that is a directory: the temp file is created, the rename fails.
  fs::create_directories(dir / "is_a_dir");
  std::string as_dir = (dir / "is_a_dir").string();
  st = write_chrome_trace(rec, {}, as_dir);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(as_dir), std::string::npos) << st;
  EXPECT_FALSE(leftover_temp(dir));
  EXPECT_TRUE(fs::is_directory(as_dir));
  EXPECT_EQ(write_chrome_trace(rec, {}, "").code(), absl::StatusCode::kInvalidArgument);
  fs::remove_all(dir);
}

TEST(ChromeTraceErrors, ReplacesAnExistingFileWhole) {
  fs::path dir = temp_dir();
  fs::path path = dir / "t.json";
  ASSERT_TRUE(write_file_atomically(path.string(), std::string(100000, 'x')).ok());
  Recorder rec;
  rec.on_node(StreamKind::kCompute, "only", "op", 1.0, 2.0);
  ASSERT_TRUE(write_chrome_trace(rec, {}, path.string()).ok());
  json doc = read_json(path);
  int x = 0;
  for (const json& e : doc["traceEvents"]) x += e["ph"] == "X";
  EXPECT_EQ(x, 1);
  EXPECT_FALSE(leftover_temp(dir));
  fs::remove_all(dir);
}

TEST(ChromeTraceErrors, EmptyRecorderGivesValidTrace) {
  Recorder rec;
  json doc = json::parse(chrome_trace_json(rec.snapshot(), {}));
  for (const json& e : doc["traceEvents"]) EXPECT_EQ(e["ph"], "M");
}

TEST(ChromeTraceErrors, OddNamesAreEscaped) {
  Recorder rec;
  rec.on_node(StreamKind::kCompute, "a\"b\\c\n\xff", "op", 1.0, 2.0);
  json doc = json::parse(chrome_trace_json(rec.snapshot(), {}));
  bool found = false;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "X") found = e["name"].get<std::string>().rfind("a\"b\\c\n", 0) == 0;
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace lms
