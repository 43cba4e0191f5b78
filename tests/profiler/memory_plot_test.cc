#include "lms/profiler/memory_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include "synthetic_run.h"

namespace lms {
namespace {

namespace fs = std::filesystem;
constexpr uint32_t kSeed = 9001;
constexpr uint64_t kMiB = 1ull << 20;

MemorySeries random_series(std::mt19937& rng, std::string label, int n, uint64_t max_bytes) {
  MemorySeries s{std::move(label), {}};
  std::uniform_real_distribution<double> dt(1e-4, 1e-2);
  std::uniform_int_distribution<uint64_t> bytes(0, max_bytes);
  double t = 50.0;
  for (int i = 0; i < n; ++i) {
    s.points.emplace_back(t, bytes(rng));
    t += dt(rng);
  }
  return s;
}

// The attribute `attr` of every element <tag ...> in `svg`.
std::vector<std::string> attributes(const std::string& svg, const std::string& tag,
                                    const std::string& attr) {
  std::vector<std::string> out;
  std::regex elem("<" + tag + "(?=[\\s/>])[^>]*>");
  std::regex value(" " + attr + "=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), elem); it != std::sregex_iterator();
       ++it) {
    std::smatch m;
    std::string e = it->str();
    if (std::regex_search(e, m, value)) out.push_back(m[1]);
  }
  return out;
}

std::vector<std::pair<double, double>> parse_points(const std::string& points) {
  std::vector<std::pair<double, double>> out;
  std::istringstream in(points);
  std::string pair;
  while (in >> pair) {
    auto comma = pair.find(',');
    out.emplace_back(std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1)));
  }
  return out;
}

TEST(MemoryPlotTest, StepPolylinesUnderTheCapacityLine) {
  std::printf("seed %u\n", kSeed);
  std::mt19937 rng(kSeed);
  const uint64_t capacity = 256 * kMiB;
  std::vector<MemorySeries> series = {random_series(rng, "LMS on", 37, 200 * kMiB),
                                      random_series(rng, "LMS off <no swap>", 1, 250 * kMiB),
                                      random_series(rng, "third", 120, capacity)};
  absl::StatusOr<std::string> svg = memory_svg(series, capacity, "VDSR & friends");
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_EQ(svg->rfind("<svg", 0), 0u);
  EXPECT_EQ(svg->substr(svg->size() - 7), "</svg>\n");
  EXPECT_NE(svg->find("VDSR &amp; friends"), std::string::npos);
  EXPECT_NE(svg->find("LMS off &lt;no swap&gt;"), std::string::npos);
  EXPECT_NE(svg->find("MiB"), std::string::npos);

  std::vector<std::string> polylines = attributes(*svg, "polyline", "points");
  ASSERT_EQ(polylines.size(), series.size());
  std::vector<std::string> cap_y = attributes(*svg, "line class=\"capacity\"", "y1");
  ASSERT_EQ(cap_y.size(), 1u);
  EXPECT_EQ(attributes(*svg, "line class=\"capacity\"", "stroke")[0], "red");
  EXPECT_FALSE(attributes(*svg, "line class=\"capacity\"", "stroke-dasharray").empty());
  const double capacity_y = std::stod(cap_y[0]);
  for (size_t i = 0; i < series.size(); ++i) {
    auto pts = parse_points(polylines[i]);
    size_t n = series[i].points.size();
    EXPECT_EQ(pts.size(), n == 1 ? 2 : 2 * n - 1) << series[i].label;
    double min_x = 1e9, max_x = -1e9;
    for (size_t k = 0; k < pts.size(); ++k) {
      // SVG y grows downwards: no point above the capacity line.
      EXPECT_GE(pts[k].second, capacity_y - 0.01);
      min_x = std::min(min_x, pts[k].first);
      max_x = std::max(max_x, pts[k].first);
      if (k > 0) {
        EXPECT_GE(pts[k].first, pts[k - 1].first) << "time runs forward";
      }
    }
    // Each series is normalised to its own span: all start and end together.
    EXPECT_NEAR(min_x, pts.front().first, 1e-9);
    auto first = parse_points(polylines[0]);
    EXPECT_NEAR(min_x, first.front().first, 0.01);
    EXPECT_NEAR(max_x, first.back().first, 0.01);
  }
}

TEST(MemoryPlotTest, HigherBytesAreDrawnHigher) {
  MemorySeries s{"s", {{0.0, 10 * kMiB}, {1.0, 30 * kMiB}, {2.0, 20 * kMiB}}};
  absl::StatusOr<std::string> svg = memory_svg({s}, 0, "t");
  ASSERT_TRUE(svg.ok());
  EXPECT_TRUE(attributes(*svg, "line class=\"capacity\"", "y1").empty()) << "no capacity given";
  auto pts = parse_points(attributes(*svg, "polyline", "points")[0]);
  ASSERT_EQ(pts.size(), 5u);
  EXPECT_GT(pts[0].second, pts[2].second);         // 10 MiB below 30 MiB
  EXPECT_LT(pts[2].second, pts[4].second);         // 30 MiB above 20 MiB
  EXPECT_DOUBLE_EQ(pts[1].second, pts[0].second);  // held until the next sample
  // x of the middle sample is halfway across.
  EXPECT_NEAR(pts[2].first - pts[0].first, pts[4].first - pts[2].first, 0.02);
}

TEST(MemoryPlotTest, RejectsBadSeries) {
  EXPECT_EQ(memory_svg({}, 0, "t").status().code(), absl::StatusCode::kInvalidArgument);
  absl::Status st = memory_svg({MemorySeries{"empty one", {}}}, 0, "t").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("empty one"), std::string::npos);
  MemorySeries nan{"nan", {{0.0, 1}, {std::nan(""), 2}}};
  EXPECT_EQ(memory_svg({nan}, 0, "t").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MemoryPlotTest, WritesAtomicallyAndReportsBadPaths) {
  fs::path dir = testing::fresh_test_dir();
  MemorySeries s{"s", {{0.0, 1}, {1.0, 2}}};
  fs::path path = dir / "m.svg";
  ASSERT_TRUE(write_memory_svg({s}, 4, path.string(), "t").ok());
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, *memory_svg({s}, 4, "t"));
  std::string bad = (dir / "missing" / "m.svg").string();
  absl::Status st = write_memory_svg({s}, 4, bad, "t");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(bad), std::string::npos);
  EXPECT_FALSE(write_memory_svg({}, 4, (dir / "x.svg").string(), "t").ok());
  EXPECT_FALSE(fs::exists(dir / "x.svg"));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1) << "only m.svg, no temp files";
  fs::remove_all(dir);
}

TEST(MemoryPlotTest, DeviceSeriesOfOneStep) {
  Recorder rec;
  rec.on_memory(MemoryKind::kDevice, 5, 0.5);
  rec.on_step(0, 1.0, 2.0);
  rec.on_memory(MemoryKind::kDevice, 7, 1.5);
  rec.on_memory(MemoryKind::kPinnedHost, 99, 1.6);
  rec.on_step(1, 2.0, 3.0);
  rec.on_memory(MemoryKind::kDevice, 9, 2.5);
  MemorySeries all = device_series(rec, "all");
  EXPECT_EQ(all.label, "all");
  ASSERT_EQ(all.points.size(), 3u);
  EXPECT_EQ(all.points[2].second, 9u);
  MemorySeries one = device_series(rec, "step 1", 1);
  // Value at the step start (7), the sample inside (9), held to the end.
  ASSERT_EQ(one.points.size(), 3u);
  EXPECT_EQ(one.points[0], (std::pair<double, uint64_t>{2.0, 7}));
  EXPECT_EQ(one.points[1], (std::pair<double, uint64_t>{2.5, 9}));
  EXPECT_EQ(one.points[2], (std::pair<double, uint64_t>{3.0, 9}));
  EXPECT_TRUE(device_series(rec, "none", 5).points.empty());
}

}  // namespace
}  // namespace lms
