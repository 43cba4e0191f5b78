// lms-bench at small scale: a 4-layer, 8-channel VDSR on 16x16 random crops
// under a 1 MiB emulated device. Derivation of the sizes: one activation is
// 8 ch * 16 * 16 * 4 B = 8 KiB per image, and without LMS about a dozen are
// live at the start of the backward pass, so batch 4 (~0.3 MiB) fits and
// batch 16 (~1.1 MiB) does not; the busiest node needs only ~4 activations,
// so batch 16 fits with swapping.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "../common/capped_child.h"
#include "bench.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "overhead.h"
#include "report.h"
#include "search.h"
#include "sweep.h"
#include "unet3d_data.h"
#include "vdsr_data.h"

namespace lms::bench {
namespace {

using testing_support::ChildResult;
using testing_support::run_capped;

constexpr uint64_t kSeed = 7;
constexpr uint64_t kCapacity = uint64_t{1} << 20;

ModelFactory tiny_vdsr() {
  auto f = vdsr_factory({.depth = 4, .channels = 8, .crop = 16, .seed = kSeed}, nullptr);
  EXPECT_TRUE(f.ok()) << f.status();
  return *f;
}

DeviceSetup tiny_device() {
  DeviceSetup d;
  d.capacity_bytes = kCapacity;
  d.host_pool_bytes = uint64_t{64} << 20;
  d.compute_threads = 1;  // steps are milliseconds; threads only add contention
  return d;
}

// The LMS settings of the sweeps below: the roofline time model (as the CPU
// sweeps of the command line, Note [Sweep time model]), so that no plan, and
// no limit the search finds, depends on how fast a node ran this time.
LmsConfig roofline_config() {
  LmsConfig c;
  c.time_model = TimeModel::kRoofline;
  return c;
}

std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             (name + "_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
              std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

const CaseResult& find_row(const SweepResult& r, int64_t size, bool lms) {
  for (const CaseResult& row : r.rows)
    if (row.size == size && row.lms == lms) return row;
  ADD_FAILURE() << "no row for size " << size << " lms " << lms;
  return r.rows.front();
}

TEST(SearchMax, DoublesThenBisectsToTheExactBoundary) {
  for (int64_t limit : {1, 2, 3, 37, 64, 65, 1000}) {
    int calls = 0;
    auto probe = [&](int64_t s) -> absl::StatusOr<bool> {
      ++calls;
      return s <= limit;
    };
    bool capped = true;
    auto got = search_max(probe, 1, 4096, &capped);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, limit);
    EXPECT_FALSE(capped);
    EXPECT_LE(calls, 2 * 13 + 2) << "limit " << limit;  // log2(4096) doublings + bisection
  }
}

TEST(SearchMax, RespectsTheStepTheCapAndErrors) {
  auto below = [](int64_t limit) {
    return [limit](int64_t s) -> absl::StatusOr<bool> { return s <= limit; };
  };
  EXPECT_EQ(*search_max(below(37), 4, 512), 36);
  EXPECT_EQ(*search_max(below(3), 4, 512), 0);
  bool capped = false;
  EXPECT_EQ(*search_max(below(100000), 8, 100, &capped), 96);
  EXPECT_TRUE(capped);
  auto failing = [](int64_t s) -> absl::StatusOr<bool> {
    if (s > 10) return absl::InternalError("probe broke");
    return true;
  };
  EXPECT_EQ(search_max(failing, 1, 4096).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(search_max(below(5), 0, 10).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Sweep, LmsTrainsWhereTheDeviceRunsOutWithoutIt) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  SweepOptions o;
  o.sizes = {4, 24};
  o.steps = 2;
  o.device = tiny_device();
  o.config = roofline_config();
  o.config.auto_actions = AutoActions::kSwap;  // the swap columns are checked below
  std::ostringstream log;
  auto r = run_sweep(tiny_vdsr(), o, log);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->rows.size(), 4u);
  const CaseResult& off4 = find_row(*r, 4, false);
  const CaseResult& on4 = find_row(*r, 4, true);
  const CaseResult& off16 = find_row(*r, 24, false);
  const CaseResult& on16 = find_row(*r, 24, true);
  EXPECT_TRUE(off4.ok) << off4.error;
  EXPECT_TRUE(on4.ok) << on4.error;
  EXPECT_EQ(off4.losses, on4.losses);  // same feeds, same weights
  EXPECT_FALSE(off16.ok);
  EXPECT_EQ(off16.status.rfind("OOM at ", 0), 0u) << off16.status;
  ASSERT_TRUE(on16.ok) << on16.error;
  EXPECT_GT(on16.bytes_d2h_per_step, 0u);
  EXPECT_GT(on16.swapped_tensors, 0u);
  EXPECT_LE(on16.peak_device_bytes, kCapacity);
  EXPECT_GT(on16.peak_pinned_host_bytes, 0u);
  EXPECT_EQ(on16.step_s.size(), 2u);
  EXPECT_GT(on16.mean_step_s, 0);

  const std::string table = format_table(*r);
  EXPECT_NE(table.find(off16.status), std::string::npos) << table;
  // Header, rows, the goal line and the time model of the plans.
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 2 + 4 + 1 + 1) << table;
  EXPECT_NE(table.find("LMS plans, time model roofline: roofline "), std::string::npos) << table;
  EXPECT_EQ(on16.time_model.rfind("roofline ", 0), 0u) << on16.time_model;
  // Every run that ran held exactly the bytes the planner laid out.
  for (const CaseResult& row : r->rows) {
    if (row.ok) {
      EXPECT_EQ(row.predicted_peak_after_bytes, row.peak_device_bytes) << row.size;
    }
  }
  EXPECT_NE(table.find("3 of 3 runs equal to the byte (met)"), std::string::npos) << table;

  ASSERT_TRUE(r->searched);
  const Limits& l = r->limits;
  EXPECT_GE(l.no_lms_max, 4);
  EXPECT_LT(l.no_lms_max, 24);
  EXPECT_GE(l.lms_max, 24);
  EXPECT_GE(l.lms_max, l.no_lms_max);
  EXPECT_GE(l.working_set_max, l.lms_max);
  EXPECT_TRUE(l.no_lms_confirmed);
  EXPECT_TRUE(l.lms_confirmed);
  EXPECT_TRUE(l.notes.empty()) << l.notes;  // replay and real steps agree
  EXPECT_NE(format_limits(*r).find("largest batch with LMS"), std::string::npos);
}

TEST(Sweep, SearchedLimitsAreTheRealBoundary) {
  SweepOptions o;
  o.sizes = {4};
  o.steps = 1;
  o.device = tiny_device();
  o.config = roofline_config();
  std::ostringstream log;
  auto r = run_sweep(tiny_vdsr(), o, log);
  ASSERT_TRUE(r.ok()) << r.status();
  const Limits& l = r->limits;
  // One past each limit really fails: without LMS a step runs out of memory,
  // with LMS the planner finds no plan or the step runs out.
  for (bool lms : {false, true}) {
    CaseSpec spec;
    spec.size = (lms ? l.lms_max : l.no_lms_max) + 1;
    spec.lms = lms;
    spec.steps = 1;
    spec.device = tiny_device();
    spec.config = roofline_config();
    auto row = run_case(tiny_vdsr(), spec);
    ASSERT_TRUE(row.ok()) << row.status();
    EXPECT_FALSE(row->ok) << "LMS " << lms << " size " << spec.size;
  }
}

TEST(RunCase, ForcedSwapsGiveTheSameLossesAsNoLms) {
  CaseSpec spec;
  spec.size = 4;
  spec.steps = 3;
  spec.device = tiny_device();
  spec.config = roofline_config();
  auto off = run_case(tiny_vdsr(), spec);
  ASSERT_TRUE(off.ok() && off->ok) << off.status() << " " << off->error;
  spec.lms = true;
  // Halfway between the no-LMS peak and the least budget the auto policy can
  // meet (working set over 1 - fragmentation_reserve, plus 2%).
  const uint64_t least = static_cast<uint64_t>(off->working_set_limit_bytes / 0.95 * 1.02);
  ASSERT_LT(least, off->predicted_peak_before_bytes);
  spec.config.device_memory_limit = (least + off->predicted_peak_before_bytes) / 2;
  auto on = run_case(tiny_vdsr(), spec);
  ASSERT_TRUE(on.ok() && on->ok) << on.status() << " " << on->error;
  EXPECT_GT(on->bytes_d2h_per_step, 0u);
  EXPECT_LT(on->peak_device_bytes, off->peak_device_bytes);
  EXPECT_EQ(on->losses, off->losses);
}

// The LMS rows plan through the Device overload of lms::rewrite, so within
// the device's pinned host pool: a pool smaller than any swapped tensor
// (one activation at batch 24 is 192 KiB) leaves the swap-only planner no
// plan, a planner OOM, not a step that runs out of pinned memory.
TEST(RunCase, LmsRowsPlanWithinThePinnedHostPool) {
  CaseSpec spec;
  spec.size = 24;
  spec.lms = true;
  spec.steps = 1;
  spec.device = tiny_device();
  spec.config = roofline_config();
  spec.config.auto_actions = AutoActions::kSwap;
  auto row = run_case(tiny_vdsr(), spec);
  ASSERT_TRUE(row.ok()) << row.status();
  ASSERT_TRUE(row->ok) << row->error;
  ASSERT_GT(row->peak_pinned_host_bytes, 0u);
  spec.device.host_pool_bytes = uint64_t{64} << 10;
  auto small = run_case(tiny_vdsr(), spec);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_TRUE(small->planner_oom) << small->status;
  EXPECT_FALSE(small->ok);
  EXPECT_NE(small->error.find("host_memory_limit"), std::string::npos) << small->error;
}

// With time_model "measured" (the LmsConfig default) the LMS rows plan with
// the node times and the link profiled on the run's device, and the table
// says so.
TEST(Sweep, MeasuredTimeModelPlansWithTheDevicesTimes) {
  SweepOptions o;
  o.sizes = {24};
  o.steps = 1;
  o.device = tiny_device();
  o.search = false;
  ASSERT_EQ(o.config.time_model, TimeModel::kMeasured);
  std::ostringstream log;
  auto r = run_sweep(tiny_vdsr(), o, log);
  ASSERT_TRUE(r.ok()) << r.status();
  const CaseResult& on = find_row(*r, 24, true);
  ASSERT_TRUE(on.ok) << on.error;
  EXPECT_EQ(on.time_model.rfind("measured on cpu", 0), 0u) << on.time_model;
  const std::string table = format_table(*r);
  EXPECT_NE(table.find("LMS plans, time model measured: measured on cpu"), std::string::npos)
      << table;
  EXPECT_EQ(to_json(*r)["time_model"], "measured");
}

TEST(Sweep, WritesTracesAndMemoryPlots) {
  const std::string dir = temp_dir("lms_bench_trace");
  SweepOptions o;
  o.sizes = {16};
  o.steps = 1;
  o.device = tiny_device();
  o.config = roofline_config();
  o.trace_dir = dir;
  o.search = false;
  std::ostringstream log;
  auto r = run_sweep(tiny_vdsr(), o, log);
  ASSERT_TRUE(r.ok()) << r.status();
  // Two traces with their profile summaries, two by-position plots (planned
  // against measured), one plot over time.
  EXPECT_EQ(r->files.size(), 7u);
  for (const std::string& f : r->files) {
    ASSERT_TRUE(std::filesystem::exists(f)) << f;
    if (f.ends_with(".json")) {
      std::ifstream in(f);
      auto j = nlohmann::json::parse(in, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << f;
      EXPECT_FALSE(j["traceEvents"].empty()) << f;
    }
  }
  std::ifstream summary(dir + "/vdsr_batch16_lms_on.summary.txt");
  std::stringstream summary_text;
  summary_text << summary.rdbuf();
  EXPECT_NE(summary_text.str().find("copy/compute overlap"), std::string::npos);
  std::ifstream svg(dir + "/vdsr_batch16_memory.svg");
  std::stringstream text;
  text << svg.rdbuf();
  EXPECT_NE(text.str().find("LMS off"), std::string::npos);
  EXPECT_NE(text.str().find("LMS on"), std::string::npos);
  std::ifstream by_position(dir + "/vdsr_batch16_lms_on_by_position.svg");
  std::stringstream by_position_text;
  by_position_text << by_position.rdbuf();
  EXPECT_NE(by_position_text.str().find("planned"), std::string::npos);
  EXPECT_NE(by_position_text.str().find("measured"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Unet, TwoDimensionalStandInSweeps) {
  auto f = unet_factory({.in_channels = 2,
                         .classes = 3,
                         .base_filters = 4,
                         .levels = 2,
                         .spatial_dims = 2,
                         .seed = kSeed});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->size_step, 2);
  SweepOptions o;
  o.sizes = {16, 64};
  o.steps = 1;
  o.device = tiny_device();
  o.config = roofline_config();
  o.confirm = false;
  std::ostringstream log;
  auto r = run_sweep(*f, o, log);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(find_row(*r, 16, false).ok) << find_row(*r, 16, false).error;
  EXPECT_FALSE(find_row(*r, 64, false).ok);
  EXPECT_GE(r->limits.lms_max, r->limits.no_lms_max);
  EXPECT_EQ(r->limits.lms_max % 2, 0);
  o.sizes = {15};
  EXPECT_EQ(run_sweep(*f, o, log).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Unet, IsenseeArchitectureAndSourceShapesAreChecked) {
  auto f = unet_factory({.arch = UnetArch::kIsensee,
                         .in_channels = 1,
                         .classes = 3,
                         .base_filters = 2,
                         .levels = 2,
                         .seed = kSeed});
  ASSERT_TRUE(f.ok()) << f.status();
  auto g = f->build(8);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(f->build(7).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unet_factory({.arch = UnetArch::kIsensee, .spatial_dims = 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A source whose buffers do not match the model is an error, not a crash.
  Unet3dBatchSource wrong = [](int64_t, int64_t size, std::vector<float>* image,
                               std::vector<float>* labels) {
    image->assign(static_cast<size_t>(size * size * size), 0.0f);
    labels->assign(static_cast<size_t>(2 * size * size * size), 0.0f);  // 2 classes, not 3
    return absl::OkStatus();
  };
  f = unet_factory({.arch = UnetArch::kIsensee, .in_channels = 1, .classes = 3, .levels = 2},
                   wrong);
  ASSERT_TRUE(f.ok()) << f.status();
  const absl::Status s = f->feeds(8, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the model takes 1 x 512 and 3 x 512"), std::string::npos) << s;
}

TEST(Cli, Unet3dDataAndArch) {
  absl::StatusOr<BenchCommand> plain = parse_command_line({"unet3d", "--size", "16"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->arch, "reduced");  // random volumes: today's reduced U-Net
  EXPECT_TRUE(plain->data_dir.empty());
  Unet3dBenchModel m = command_unet_model(*plain);
  EXPECT_EQ(m.arch, UnetArch::kReduced);
  EXPECT_EQ(m.in_channels, 4);
  EXPECT_EQ(m.classes, 4);

  absl::StatusOr<BenchCommand> mri =
      parse_command_line({"unet3d", "--data", "data/mri", "--size", "32,48", "--filters", "4",
                          "--levels=4", "--capacity", "64MiB"});
  ASSERT_TRUE(mri.ok()) << mri.status();
  EXPECT_EQ(mri->data_dir, "data/mri");
  EXPECT_EQ(mri->arch, "isensee");  // the default with --data
  m = command_unet_model(*mri);
  EXPECT_EQ(m.arch, UnetArch::kIsensee);
  EXPECT_EQ(m.in_channels, 1);
  EXPECT_EQ(m.classes, kMriClasses);
  EXPECT_EQ(m.base_filters, 4);
  EXPECT_EQ(m.levels, 4);
  EXPECT_EQ(m.segmentation_levels, 3);

  absl::StatusOr<BenchCommand> reduced =
      parse_command_line({"unet3d", "--data=data/mri", "--arch", "reduced"});
  ASSERT_TRUE(reduced.ok()) << reduced.status();
  EXPECT_EQ(command_unet_model(*reduced).arch, UnetArch::kReduced);
  EXPECT_EQ(command_unet_model(*reduced).classes, kMriClasses);
  absl::StatusOr<BenchCommand> isensee = parse_command_line({"unet3d", "--arch=isensee"});
  ASSERT_TRUE(isensee.ok()) << isensee.status();
  EXPECT_EQ(command_unet_model(*isensee).arch, UnetArch::kIsensee);
  EXPECT_EQ(command_unet_model(*isensee).in_channels, 4);
  // The case study's schedule: poly decay over --study-steps unless constant.
  EXPECT_TRUE(mri->study_lr_decay);
  absl::StatusOr<BenchCommand> constant =
      parse_command_line({"unet3d", "--data", "data/mri", "--study-lr-decay", "constant"});
  ASSERT_TRUE(constant.ok()) << constant.status();
  EXPECT_FALSE(constant->study_lr_decay);

  std::ostringstream out, err;
  EXPECT_EQ(run_main({"unet3d", "--arch", "full"}, out, err), 2);
  EXPECT_NE(err.str().find("--arch: bad value 'full' (one of isensee, reduced)"), std::string::npos)
      << err.str();
  EXPECT_EQ(run_main({"vdsr", "--arch", "isensee"}, out, err), 2);
  EXPECT_NE(err.str().find("not expected: isensee --arch"), std::string::npos) << err.str();
  // With --data the host buffers are 1 + 13 channels, not 4 + 4.
  absl::Status host = check_host_memory(*mri, uint64_t{14} * 48 * 48 * 48 * 4 - 1);
  EXPECT_EQ(host.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(check_host_memory(*mri, uint64_t{14} * 48 * 48 * 48 * 4).ok());

  // A missing folder: a warning, then random volumes of the MRI shapes.
  std::ostringstream out2, err2;
  EXPECT_EQ(
      run_main({"unet3d", "--data", "/nonexistent/mri", "--size", "8", "--filters", "2", "--levels",
                "2", "--capacity", "8MiB", "--steps", "1", "--threads", "1", "--no-search"},
               out2, err2),
      0)
      << err2.str();
  EXPECT_NE(err2.str().find("warning: "), std::string::npos) << err2.str();
  EXPECT_NE(err2.str().find("using random volumes (1 channel, 13 classes)"), std::string::npos)
      << err2.str();
}

// The real MRI pair (scripts/fetch_data.sh) through the Isensee U-Net: 2
// base filters, 2 levels, 8 MiB. Size 16 trains both ways; 32 runs out of
// memory without LMS and trains with it; the limits are 26 and 36 (a
// 2.65x voxel ratio at the working-set limit).
TEST(Unet, RealMriSweep) {
  const std::string dir = std::string(LMS_SOURCE_DIR) + "/data/mri";
  if (load_mri_volumes("/nonexistent", 1, 2).status().code() == absl::StatusCode::kUnimplemented) {
    GTEST_SKIP() << "lms-bench built without examples/unet3d (LMS_BUILD_EXAMPLES=OFF)";
  }
  if (!std::filesystem::exists(dir + "/ch2bet.nii.gz") ||
      !std::filesystem::exists(dir + "/aal.nii.gz")) {
    GTEST_SKIP() << dir << " not fetched (scripts/fetch_data.sh); random volumes are tested above";
  }
  const std::string tmp = temp_dir("lms_bench_mri");
  const std::string path = tmp + "/unet3d.json";
  std::ostringstream out, err;
  int rc = run_main(
      {"unet3d", "--data", dir, "--size", "16,32", "--filters", "2", "--levels", "2", "--capacity",
       "8MiB", "--steps", "1", "--threads", "1", "--seed", "7", "--json", path},
      out, err);
  ASSERT_EQ(rc, 0) << err.str();
  const std::string text = out.str();
  std::printf("%s", text.c_str());
  for (const std::string& part :
       {std::string("Isensee U-Net, ch2bet.nii.gz T1 + AAL 13 classes"),
        std::string("(S/G: 16/20, 32/40)"), std::string("voxel ratio"),
        std::string("goal: voxel ratio LMS/no-LMS >= 2.4x (case study), aiming for >= 5.6x "
                    "(TFLMS v2), at >= 99% of the working-set limit"),
        std::string("reached ")}) {
    EXPECT_NE(text.find(part), std::string::npos) << "want '" << part << "' in: " << text;
  }
  std::ifstream in(path);
  auto j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_NE(j["data"].get<std::string>().find("ch2bet"), std::string::npos) << j["data"];
  ASSERT_EQ(j["rows"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(j["rows"][i]["size"], i < 2 ? 16 : 32);
    EXPECT_EQ(j["rows"][i]["lms"], i % 2 == 1);
  }
  EXPECT_TRUE(j["rows"][0]["ok"].get<bool>()) << j["rows"][0]["error"];
  EXPECT_TRUE(j["rows"][1]["ok"].get<bool>()) << j["rows"][1]["error"];
  EXPECT_EQ(j["rows"][0]["losses"], j["rows"][1]["losses"]);  // same crop, same weights
  EXPECT_FALSE(j["rows"][2]["ok"].get<bool>());               // 32 without LMS: OOM
  EXPECT_EQ(j["rows"][2]["status"].get<std::string>().rfind("OOM", 0), 0u) << j["rows"][2];
  EXPECT_TRUE(j["rows"][3]["ok"].get<bool>()) << j["rows"][3]["error"];
  EXPECT_GT(j["rows"][3]["bytes_d2h_per_step"].get<uint64_t>(), 0u);
  const auto& search = j["search"];
  EXPECT_LT(search["no_lms_max"].get<int64_t>(), 32);
  EXPECT_GE(search["lms_max"].get<int64_t>(), 32);
  EXPECT_GE(search["working_set_max"].get<int64_t>(), search["lms_max"].get<int64_t>());
  const double side = search["lms_over_no_lms"].get<double>();
  EXPECT_NEAR(search["voxel_ratio"].get<double>(), side * side * side, 1e-9);
  std::filesystem::remove_all(tmp);
}

TEST(Overhead, ForcedSwapsRunAndPredictionsArePrinted) {
  OverheadOptions o;
  o.size = 4;
  o.steps = 2;
  o.device = tiny_device();
  o.config.link.h2d_bytes_per_s = o.config.link.d2h_bytes_per_s = 1e9;
  std::ostringstream log;
  auto r = run_overhead(tiny_vdsr(), o, log);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->cases.size(), 2u);
  EXPECT_LT(r->budget_bytes, r->baseline.predicted_peak_before_bytes);
  for (const OverheadCase& c : r->cases) {
    ASSERT_TRUE(c.row.ok) << c.name << ": " << c.row.error;
    EXPECT_GT(c.row.bytes_d2h_per_step, 0u) << c.name;
    EXPECT_GT(c.row.predicted_step_s, 0) << c.name;
    EXPECT_EQ(c.row.losses, r->baseline.losses) << c.name;
  }
  EXPECT_EQ(r->cases[1].link_bytes_per_s, 1e9);
  EXPECT_NE(format_overhead(*r).find("stall pred"), std::string::npos);
  EXPECT_NE(format_overhead(*r).find("host wait"), std::string::npos);
  // Host waits (at least the end-of-step synchronize) are their own column,
  // not stall (Note [Stall]).
  for (const OverheadCase& c : r->cases) EXPECT_GT(c.row.mean_host_wait_s, 0) << c.name;
  EXPECT_TRUE(to_json(*r)["cases"][0].contains("mean_host_wait_s"));
  o.steps = 1;
  EXPECT_EQ(run_overhead(tiny_vdsr(), o, log).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Cli, JsonHoldsEveryRowAndTheLimits) {
  const std::string dir = temp_dir("lms_bench_json");
  const std::string path = dir + "/bench.json";
  std::ostringstream out, err;
  int rc = run_main(
      {"vdsr", "--depth", "4", "--channels", "8", "--crop=16", "--batch", "4,24", "--capacity",
       "1MiB", "--threads", "1", "--steps", "1", "--no-confirm", "--seed", "7", "--json", path},
      out, err);
  ASSERT_EQ(rc, 0) << err.str();
  EXPECT_NE(out.str().find("largest batch without LMS"), std::string::npos) << out.str();
  EXPECT_NE(err.str().find("random data"), std::string::npos) << err.str();
  std::ifstream in(path);
  auto j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["model"], "vdsr");
  EXPECT_EQ(j["capacity_bytes"], kCapacity);
  ASSERT_EQ(j["rows"].size(), 4u);
  EXPECT_EQ(j["rows"][2]["size"], 24);
  EXPECT_EQ(j["rows"][2]["lms"], false);
  EXPECT_EQ(j["rows"][2]["ok"], false);
  EXPECT_EQ(j["rows"][3]["ok"], true);
  EXPECT_GE(j["search"]["lms_max"].get<int64_t>(), j["search"]["no_lms_max"].get<int64_t>());
  EXPECT_GE(j["search"]["lms_over_no_lms"].get<double>(), 1.0);
  // The CPU sweep's default time model (Note [Sweep time model]), in the
  // JSON and with every LMS row's plan.
  EXPECT_EQ(j["time_model"], "roofline");
  EXPECT_EQ(j["rows"][3]["time_model"].get<std::string>().rfind("roofline ", 0), 0u);
  EXPECT_NE(out.str().find("LMS planned with the roofline"), std::string::npos) << out.str();
  std::filesystem::remove_all(dir);
}

TEST(Cli, TimeModelDefaultsByDevice) {
  auto cpu = parse_command_line({"vdsr"});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->time_model, "roofline");
  auto cuda = parse_command_line({"unet3d", "--device", "cuda"});
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_EQ(cuda->time_model, "measured");
  auto set = parse_command_line({"vdsr", "--time-model", "measured"});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->time_model, "measured");
  EXPECT_EQ(parse_command_line({"overhead", "--time-model", "measured"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Cli, BadFlagsAreClearErrors) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> expect;  // each in the message
  };
  const std::vector<Case> cases = {
      {{"frobnicate"}, {"not expected", "frobnicate"}},
      {{"vdsr", "--batch", "4,x"},
       {"--batch: bad value '4,x' (a comma-separated list of integers from 1 to 1048576)"}},
      {{"vdsr", "--batch", "0"}, {"--batch: bad value '0'"}},
      {{"vdsr", "--capacity", "lots"}, {"--capacity: bad value 'lots' (a positive size"}},
      {{"vdsr", "--time-model", "fast"},
       {"--time-model: bad value 'fast' (one of measured, roofline)"}},
      {{"vdsr", "--capacity", "0"}, {"--capacity: bad value '0' (a positive size"}},
      {{"vdsr", "--steps", "0"}, {"--steps: bad value '0' (an integer from 1 to 100000)"}},
      {{"vdsr", "--crop"}, {"--crop", "missing"}},
      // A flag of another mode is not one of this mode's.
      {{"vdsr", "--size", "32"}, {"not expected", "--size"}},
      {{"unet3d", "--batch", "4"}, {"not expected", "--batch"}},
      {{"overhead", "--batch", "4,8"}, {"--batch: bad value '4,8' (an integer from 1 to"}},
      {{"vdsr", "--frob", "1"}, {"not expected", "--frob"}},
      {{"vdsr", "--link", "fast"}, {"--link: bad value 'fast' (a bandwidth"}},
      {{"vdsr", "--lms-set", "policy"}, {"--lms-set: bad value 'policy' (key=value)"}},
      {{"vdsr", "--depth", "4", "--lms-set", "policy=bogus", "--batch", "1"},
       {"--lms-set policy=bogus"}},
      {{"vdsr", "--lms", "/nonexistent/lms.toml", "--batch", "1"}, {"--lms /nonexistent/lms.toml"}},
      {{"unet3d", "--size", "30"}, {"multiple of 4"}},
      {{"unet3d", "--study-lr-decay", "cosine"},
       {"--study-lr-decay: bad value 'cosine' (one of constant, poly)"}},
      {{"unet3d", "--study-lr", "1"}, {"--study-lr: bad value '1' (a learning rate in (0, 1))"}},
      {{"overhead", "--budget-fraction", "1.5"},
       {"--budget-fraction: bad value '1.5' (a number in (0, 1))"}},
      {{"vdsr", "--device", "gpu"}, {"--device: bad value 'gpu' (one of cpu, cuda)"}},
      {{"overhead", "--device", "cuda"}, {"not expected", "--device"}},
      {{"vdsr", "--no-search=yes"}, {"--no-search: bad value 'yes' (a switch takes no value)"}},
      {{"vdsr", "ratio"}, {"not expected", "ratio"}},  // one mode per run
      // Outputs are probed before anything runs (/dev/null is no folder).
      {{"vdsr", "--batch", "1", "--json", "/dev/null/rows.json"},
       {"--json /dev/null/rows.json: cannot be written"}},
      {{"vdsr", "--batch", "1", "--trace", "/dev/null/traces"},
       {"--trace /dev/null/traces: cannot be written"}},
  };
  for (const Case& c : cases) {
    std::ostringstream out, err;
    int rc = run_main(c.args, out, err);
    EXPECT_EQ(rc, 2) << c.args[0] << " ... " << err.str();
    for (const std::string& part : c.expect) {
      EXPECT_NE(err.str().find(part), std::string::npos)
          << "want '" << part << "' in: " << err.str();
    }
  }
}

// `lms-bench`, `lms-bench help` and --help list the modes; a mode's --help
// lists its flags (and not another mode's) with their defaults.
TEST(Cli, HelpListsTheModesAndEachModesFlags) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{}, {"help"}, {"--help"}, {"-h"}}) {
    std::ostringstream out, err;
    EXPECT_EQ(run_main(args, out, err), 0) << err.str();
    for (const char* part :
         {"lms-bench vdsr", "unet3d", "onnx", "overhead", "scaling", "contention", "ratio"}) {
      EXPECT_NE(out.str().find(part), std::string::npos) << part << " not in:\n" << out.str();
    }
    EXPECT_TRUE(err.str().empty()) << err.str();
  }
  struct Case {
    std::string mode;
    std::vector<std::string> listed;
    std::string absent;  // a flag of other modes
  };
  for (const Case& c : std::vector<Case>{
           {"vdsr",
            {"--batch N[,N...]=4,8,16,32,64", "--capacity BYTES=256MiB", "--no-search"},
            "--size"},
           {"unet3d", {"--size N[,N...]=32,48,64", "--study-lr-decay", "--arch"}, "--crop"},
           {"onnx", {"--model", "--input", "--loss", "--batch N[,N...]=1,2,4,8"}, "--crop"},
           {"overhead", {"--batch N=8", "--capacity BYTES=1GiB", "--budget-fraction"}, "--trace"},
           {"scaling", {"--batch N=4", "--steps N=4"}, "--device"},
           {"contention", {"--devices N[,N...]=1,2", "--model", "--size N=48"}, "--capacity"},
           {"ratio",
            {"--preset", "--oversubscription X[,X...]=1.5,2,4", "--steps N=5"},
            "--link "}}) {
    std::ostringstream out, err;
    EXPECT_EQ(run_main({c.mode, "--help"}, out, err), 0) << err.str();
    for (const std::string& part : c.listed) {
      EXPECT_NE(out.str().find(part), std::string::npos)
          << part << " not in lms-bench " << c.mode << " --help:\n"
          << out.str();
    }
    EXPECT_EQ(out.str().find(c.absent), std::string::npos)
        << c.absent << " in lms-bench " << c.mode << " --help:\n"
        << out.str();
  }
}

// --device cuda picks the GPU and a pinned pool it can afford to pin up
// front; without a usable GPU the run fails with make_cuda_device's reason.
TEST(Cli, DeviceCudaRunsOnTheGpuOrSaysWhyNot) {
  absl::StatusOr<BenchCommand> cpu = parse_command_line({"unet3d", "--size", "16"});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_FALSE(cpu->cuda);
  EXPECT_EQ(cpu->host_pool_bytes, uint64_t{16} << 30);
  absl::StatusOr<BenchCommand> gpu =
      parse_command_line({"unet3d", "--size", "16", "--device", "cuda"});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_TRUE(gpu->cuda);
  EXPECT_EQ(gpu->host_pool_bytes, uint64_t{4} << 30);
  absl::StatusOr<std::unique_ptr<Device>> probe = make_cuda_device({.host_pool_bytes = 64 << 20});
  if (probe.ok()) GTEST_SKIP() << "a GPU is present: the sweep itself runs in scripts/gpu_check.sh";
  std::ostringstream out, err;
  EXPECT_EQ(run_main({"unet3d", "--size", "16", "--filters", "2", "--levels", "2", "--steps", "1",
                      "--no-search", "--device", "cuda"},
                     out, err),
            1);
  EXPECT_NE(err.str().find("make_cuda_device"), std::string::npos) << err.str();
}

// Batches, crops and volumes whose input buffers exceed the machine are bad
// flags (exit 2) naming the flags, the bytes and the limit, before any run.
TEST(Cli, HostBuffersLargerThanTheMachineAreRefused) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {{"vdsr", "--batch", "4,1048576", "--crop", "4096", "--no-search"},
       {"--batch 1048576 with --crop 4096", "2 x 1048576 x 4096 x 4096 x 4 = 140737488355328 bytes",
        "host memory", "physical memory", "at --crop 4096 the largest --batch is"}},
      {{"overhead", "--batch", "1048576", "--crop", "4096"}, {"--batch 1048576 with --crop 4096"}},
      {{"unet3d", "--size", "1048576"},
       {"--size 1048576", "overflows 64-bit", "the largest --size is"}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<BenchCommand> cmd = parse_command_line(c.args);
    ASSERT_FALSE(cmd.ok()) << c.args[0] << " accepted";
    EXPECT_EQ(cmd.status().code(), absl::StatusCode::kInvalidArgument);
    const ChildResult r = run_capped([&] {
      std::ostringstream out, err;
      int rc = run_main(c.args, out, err);
      return std::to_string(rc) + " " + err.str();
    });
    ASSERT_TRUE(r.exited) << c.args[0] << ": lms-bench died instead of refusing the size";
    EXPECT_EQ(r.text.substr(0, 2), "2 ") << r.text;
    for (const std::string& part : c.expect) {
      EXPECT_NE(r.text.find(part), std::string::npos) << "want '" << part << "' in: " << r.text;
    }
  }
  // An explicit limit: batch 4 fits 1 MiB at crop 32, batch 256 (2 MiB) does not.
  absl::StatusOr<BenchCommand> ok =
      parse_command_line({"vdsr", "--batch", "4,256", "--crop", "32"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  absl::Status s = check_host_memory(*ok, uint64_t{1} << 20);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("at --crop 32 the largest --batch is 128"), std::string::npos) << s;
  ok->sizes = {4};
  EXPECT_TRUE(check_host_memory(*ok, uint64_t{1} << 20).ok());
}

// A --data folder without a usable photo says why for each file.
TEST(VdsrData, UnusableFolderListsEveryFile) {
  const std::string dir = temp_dir("lms_bench_unusable");
  { std::ofstream(dir + "/a.png") << "not a png"; }
  { std::ofstream(dir + "/c.txt") << "notes"; }
  std::vector<std::string> warnings;
  absl::StatusOr<VdsrBatchSource> photos = load_vdsr_photos(dir, 1, 16, &warnings);
  if (photos.status().code() == absl::StatusCode::kUnimplemented) {
    GTEST_SKIP() << "lms-bench built without examples/vdsr";
  }
  ASSERT_FALSE(photos.ok());
  EXPECT_EQ(photos.status().code(), absl::StatusCode::kNotFound);
  const std::string m(photos.status().message());
  for (const std::string& part :
       {std::string("no usable image in ") + dir, std::string("a.png: not a PNG or JPEG file"),
        std::string("c.txt: unsupported extension")}) {
    EXPECT_NE(m.find(part), std::string::npos) << "want '" << part << "' in: " << m;
  }
  // Nothing decodes: a warning with every reason, then random data.
  std::ostringstream out, err;
  int rc =
      run_main({"vdsr", "--data", dir, "--depth", "4", "--channels", "8", "--crop", "16", "--batch",
                "1", "--capacity", "1MiB", "--threads", "1", "--steps", "1", "--no-search"},
               out, err);
  EXPECT_EQ(rc, 0) << err.str();
  EXPECT_NE(err.str().find("a.png: not a PNG or JPEG file"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("c.txt: unsupported extension"), std::string::npos) << err.str();

  // A photo that decodes but is smaller than --crop: the flag is wrong (exit 2).
  std::filesystem::copy_file(std::string(LMS_SOURCE_DIR) + "/tests/data/astronaut_crop128.png",
                             dir + "/astronaut.png");
  std::ostringstream out2, err2;
  rc =
      run_main({"vdsr", "--data", dir, "--crop", "200", "--batch", "1", "--no-search"}, out2, err2);
  EXPECT_EQ(rc, 2) << err2.str();
  for (const std::string& part :
       {std::string("--crop 200"),
        std::string("astronaut.png: 128x128 is smaller than the crop 200"),
        std::string("a.png: not a PNG"), std::string("c.txt: unsupported")}) {
    EXPECT_NE(err2.str().find(part), std::string::npos)
        << "want '" << part << "' in: " << err2.str();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lms::bench
