// Predicted vs measured step time and stall of a swapped VDSR or 3-D U-Net
// training step on the emulated CPU device, with the two time models of lms::rewrite
// (LmsConfig::time_model): "measured" (lms::profile_step on the device,
// lms/profile.h) and the old "roofline" with the constants of [cost_model]
// (and [link] set to the emulated link's true throttle). For each emulated
// link the device's capacity is the budget (a fraction of the no-LMS peak),
// the graph is planned by the Device overload with each model, and the plan
// runs for a few steps. Prints figures only; nothing is asserted. The
// "link planned with" column of a measured row is what a profile_step of the
// link found just before the rewrite, which measures the link (and the
// nodes) again itself.
//
//   GOMP_SPINCOUNT=30000 build-*/bench/time_model_bench --threads 1
//     [--model vdsr|unet3d] [--batch 16] [--size 41] [--depth 20] [--channels 64]
//     [--steps 3] [--repeat 1] [--budget-fraction 0.6] [--links 12GB/s,1GB/s,50MB/s]
//     [--trace DIR]
// --repeat N plans (profiling the device anew) and runs each row N times
// and prints the run of median pred/meas with the range of pred/meas over
// the N: on a shared machine node times drift by several percent between a
// profile and the steps that follow it, and one cycle shows that noise, not
// the model's error.
// --trace DIR writes, per link and model, the Chrome trace of the steps
// (<model>_<link>_<time model>.trace.json) and prints the profile summary.
// unet3d: the 3-D U-Net of lms-bench (batch 1, 4 channels in, 4 classes, 8
// base filters, 3 levels) on a --size^3 volume (default 48); --batch,
// --depth and --channels are VDSR's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flags.h"
#include "fmt/format.h"
#include "lms/config.h"
#include "lms/device.h"
#include "lms/facts.h"
#include "lms/profiler/chrome_trace.h"
#include "lms/profiler/recorder.h"
#include "lms/profiler/summary.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/training.h"
#include "lms/units.h"
#include "models.h"

namespace {

struct Options {
  std::string model = "vdsr";
  int64_t batch = 16;
  int64_t size = 41;
  int64_t depth = 20;
  int64_t channels = 64;
  int threads = 0;  // CpuDeviceOptions::compute_threads; 0 = all cores
  int steps = 3;    // timed steps after one warm-up step
  int repeat = 1;   // plan-and-run cycles per row (each profiles anew); the median is printed
  double budget_fraction = 0.6;
  std::vector<double> links = {12e9, 1e9, 50e6};
  std::string trace_dir;  // empty: no traces
};

constexpr double kCopyLatencyS = 5e-6;  // the emulated link's per-copy latency

// The flags of the program into `o`; --size defaults to 48 for unet3d.
void add_flags(CLI::App& app, Options& o) {
  lms::flags::add_choice(app, "--model", &o.model, "the model", {"vdsr", "unet3d"});
  lms::flags::add_int(app, "--batch", &o.batch, "VDSR's batch", {.min = 1});
  lms::flags::add_int(app, "--size", &o.size, "VDSR's crop side; the U-Net's volume side (48)",
                      {.min = 4});
  lms::flags::add_int(app, "--depth", &o.depth, "VDSR's conv layers", {.min = 2});
  lms::flags::add_int(app, "--channels", &o.channels, "VDSR's filters per layer", {.min = 1});
  lms::flags::add_int(app, "--threads", &o.threads, "compute threads, 0 = all cores");
  lms::flags::add_int(app, "--steps", &o.steps, "timed steps after one warm-up step", {.min = 1});
  lms::flags::add_int(app, "--repeat", &o.repeat,
                      "plan-and-run cycles per row (each profiles anew); the median is printed",
                      {.min = 1});
  lms::flags::add_real(app, "--budget-fraction", &o.budget_fraction,
                       "the device's capacity as a fraction of the no-LMS peak",
                       {.min = 0, .max = 1, .min_open = true, .max_open = true});
  lms::flags::add_bandwidth_list(app, "--links", &o.links, "the emulated links, one row each")
      ->default_str("12GB/s,1GB/s,50MB/s");
  lms::flags::add_string(app, "--trace DIR", &o.trace_dir,
                         "the Chrome trace of each row's steps and the profile summary");
}

std::string rate(double bytes_per_s) {
  return bytes_per_s >= 1e9 ? fmt::format("{:.2f} GB/s", bytes_per_s / 1e9)
                            : fmt::format("{:.1f} MB/s", bytes_per_s / 1e6);
}

struct Row {
  lms::RewriteReport report;
  double step_s = 0;       // mean of the timed steps
  double stall_s = 0;      // mean of the timed steps; Note [Stall]
  double host_wait_s = 0;  // mean of the timed steps; host waits, not stall
};

// Plans a copy of `train` on `device` with `cfg` (Device overload), runs it
// for one warm-up and `steps` timed steps, and releases the session so the
// device is empty again for the next plan.
// With a non-empty `trace_path`, the steps are recorded and written there as
// a Chrome trace.
absl::StatusOr<Row> plan_and_run(const lms::Graph& train, const lms::LmsConfig& cfg,
                                 lms::Device& device, const lms::Feeds& feeds, int steps,
                                 const std::string& trace_path) {
  Row row;
  lms::Graph g = train;
  LMS_ASSIGN_OR_RETURN(row.report, lms::rewrite(g, cfg, device));
  if (!row.report.fits) {
    return absl::FailedPreconditionError("the plan does not fit:\n" + row.report.summary());
  }
  lms::Recorder recorder;
  LMS_ASSIGN_OR_RETURN(
      std::unique_ptr<lms::Session> session,
      lms::Session::create(g, device, {.sink = trace_path.empty() ? nullptr : &recorder}));
  for (int i = 0; i <= steps; ++i) {
    lms::StepResult r;
    LMS_RETURN_IF_ERROR(session->run(feeds, &r));
    if (i == 0) continue;
    row.step_s += r.step_s / steps;
    row.stall_s += r.stall_s / steps;
    row.host_wait_s += r.host_wait_s / steps;
  }
  session.reset();
  if (!trace_path.empty()) {
    LMS_RETURN_IF_ERROR(lms::write_chrome_trace(
        recorder, {.device_capacity_bytes = device.memory_stats().capacity_bytes}, trace_path));
    std::printf("# %s\n%s", trace_path.c_str(),
                lms::format_summary(lms::summarize(recorder)).c_str());
  }
  return row;
}

// The model's graph and one step's random feeds.
struct Model {
  lms::Graph graph;
  lms::TensorId loss = lms::kNoTensor;
  lms::Feeds feeds;
  std::string description;
};

Model build_model(const Options& o) {
  Model m;
  std::mt19937_64 gen(1);
  std::uniform_real_distribution<float> u(0, 1);
  if (o.model == "unet3d") {
    const lms::models::ModelTensors t = lms::models::build_unet(
        m.graph, {.batch = 1, .in_channels = 4, .classes = 4, .size = o.size});
    m.loss = t.loss;
    const size_t voxels = static_cast<size_t>(o.size * o.size * o.size);
    std::vector<float> image(4 * voxels), labels(4 * voxels, 0.0f);
    for (float& x : image) x = u(gen);
    for (size_t v = 0; v < voxels; ++v) labels[(gen() % 4) * voxels + v] = 1.0f;
    m.feeds = {{"image", std::move(image)}, {"labels", std::move(labels)}};
    m.description =
        fmt::format("3-D U-Net {}^3, batch 1, 4 channels, 4 classes, 8 filters, 3 levels", o.size);
    return m;
  }
  const lms::models::ModelTensors t = lms::models::build_vdsr(m.graph, {.batch = o.batch,
                                                                        .height = o.size,
                                                                        .width = o.size,
                                                                        .depth = o.depth,
                                                                        .channels = o.channels});
  m.loss = t.loss;
  std::vector<float> lr(static_cast<size_t>(o.batch * o.size * o.size)), hr(lr.size());
  for (float& x : lr) x = u(gen);
  for (float& x : hr) x = u(gen);
  m.feeds = {{"lr", std::move(lr)}, {"hr", std::move(hr)}};
  m.description = fmt::format("VDSR batch {}, {}x{}, depth {}, {} channels", o.batch, o.size,
                              o.size, o.depth, o.channels);
  return m;
}

absl::Status run(const Options& o) {
  Model model = build_model(o);
  lms::Graph& g = model.graph;
  const lms::models::ModelTensors m{.loss = model.loss};
  LMS_RETURN_IF_ERROR(g.status());
  LMS_ASSIGN_OR_RETURN(lms::Graph train, lms::training_graph(g, m.loss, lms::Adam{.lr = 1e-4}));

  // The no-LMS peak and the working-set limit, on a device with room.
  LMS_ASSIGN_OR_RETURN(auto roomy, lms::make_cpu_device({.capacity_bytes = uint64_t{16} << 30,
                                                         .compute_threads = o.threads}));
  lms::LmsConfig off;
  off.enabled = false;
  lms::Graph probe = train;
  LMS_ASSIGN_OR_RETURN(lms::RewriteReport limits, lms::rewrite(probe, off, *roomy));
  roomy.reset();
  const lms::LmsConfig defaults;
  const double floor = static_cast<double>(limits.working_set_limit_bytes) /
                       (1.0 - defaults.fragmentation_reserve) * 1.05;
  const uint64_t mib = uint64_t{1} << 20;
  const uint64_t budget =
      (static_cast<uint64_t>(
           std::max(o.budget_fraction * static_cast<double>(limits.peak_bytes_before), floor)) +
       mib - 1) /
      mib * mib;

  const lms::Feeds& feeds = model.feeds;

  const char* spin = std::getenv("GOMP_SPINCOUNT");
  std::printf(
      "time model: %s, Adam; device "
      "capacity = budget %s (%.2f of the no-LMS peak %s; working-set limit %s); threads %d; "
      "%d timed steps after 1 warm-up; emulated copy latency %.0f us; GOMP_SPINCOUNT=%s\n",
      model.description.c_str(), lms::format_bytes(budget).c_str(),
      static_cast<double>(budget) / static_cast<double>(limits.peak_bytes_before),
      lms::format_bytes(limits.peak_bytes_before).c_str(),
      lms::format_bytes(limits.working_set_limit_bytes).c_str(), o.threads, o.steps,
      kCopyLatencyS * 1e6, spin != nullptr ? spin : "(unset)");
  // Stall: the compute stream waiting on copies; host wait: the issuing
  // thread blocked in device calls, not stall (Note [Stall]).
  std::printf("%-10s | %-8s | %-32s | %8s | %9s | %9s | %9s | %10s | %10s | %10s | %9s\n", "link",
              "model", "link planned with", "swap MiB", "step pred", "step meas", "pred/meas",
              "range", "stall pred", "stall meas", "host wait");
  std::vector<double> node_time_s;  // measured on the first link's device
  for (const double link : o.links) {
    LMS_ASSIGN_OR_RETURN(auto device, lms::make_cpu_device({.capacity_bytes = budget,
                                                            .host_pool_bytes = uint64_t{8} << 30,
                                                            .d2h_bytes_per_s = link,
                                                            .h2d_bytes_per_s = link,
                                                            .copy_latency_s = kCopyLatencyS,
                                                            .compute_threads = o.threads}));
    // What the measured model will see (printed; the rewrite gathers again).
    lms::LmsConfig measured;
    measured.time_model = lms::TimeModel::kMeasured;
    const auto start = std::chrono::steady_clock::now();
    LMS_ASSIGN_OR_RETURN(lms::PlanningFacts p,
                         lms::gather_facts(train, measured, *device, nullptr,
                                           {.known = {.node_time_s = node_time_s}}));
    const double gather_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (node_time_s.empty()) {
      node_time_s = p.node_time_s;
      double sum = 0;
      int nodes = 0;
      for (double t : p.node_time_s) {
        if (t <= 0) continue;
        sum += t;
        ++nodes;
      }
      const lms::CostModelConfig& c = *p.roofline;
      std::printf(
          "# gather_facts: %d compute kernels timed alone, sum %.3f s; took %.1f s; calibrated "
          "roofline %.1f GFLOP/s, %.1f GB/s, launch %.2f us (roofline constants: %.0f GFLOP/s, "
          "%.0f GB/s, %.0f us)\n",
          nodes, sum, gather_s, c.compute_flops_per_s / 1e9, c.memory_bytes_per_s / 1e9,
          c.kernel_launch_s * 1e6, defaults.cost_model.compute_flops_per_s / 1e9,
          defaults.cost_model.memory_bytes_per_s / 1e9, defaults.cost_model.kernel_launch_s * 1e6);
    }
    for (const lms::TimeModel model : {lms::TimeModel::kMeasured, lms::TimeModel::kRoofline}) {
      lms::LmsConfig cfg;
      cfg.time_model = model;
      cfg.link = {link, link, kCopyLatencyS};
      const std::string planned_link =
          model == lms::TimeModel::kMeasured
              ? fmt::format("{} / {}, {:.0f} us", rate(p.link->d2h_bytes_per_s),
                            rate(p.link->h2d_bytes_per_s), p.link->copy_latency_s * 1e6)
              : fmt::format("{} (config), {:.0f} us", rate(link), kCopyLatencyS * 1e6);
      const std::string trace =
          o.trace_dir.empty()
              ? std::string()
              : fmt::format("{}/{}_{}_{}.trace.json", o.trace_dir, o.model,
                            static_cast<int64_t>(link / 1e6), lms::time_model_name(model));
      std::vector<Row> rows;
      absl::Status failed;
      for (int rep = 0; rep < o.repeat && failed.ok(); ++rep) {
        absl::StatusOr<Row> row =
            plan_and_run(train, cfg, *device, feeds, o.steps, rep == 0 ? trace : std::string());
        if (row.ok()) {
          rows.push_back(*std::move(row));
        } else {
          failed = row.status();
        }
      }
      if (!failed.ok()) {
        std::printf("%-10s | %-8s | %s\n", rate(link).c_str(), lms::time_model_name(model),
                    std::string(lms::to_std(failed.message())).c_str());
        continue;
      }
      auto ratio = [](const Row& x) { return x.report.step_time_after_s / x.step_s; };
      std::sort(rows.begin(), rows.end(),
                [&](const Row& a, const Row& b) { return ratio(a) < ratio(b); });
      const Row& mid = rows[rows.size() / 2];
      const lms::RewriteReport& r = mid.report;
      std::printf(
          "%-10s | %-8s | %-32s | %8.1f | %9.3f | %9.3f | %9.2f | %10s | %10.3f | %10.3f | %9.3f\n",
          rate(link).c_str(), lms::time_model_name(model), planned_link.c_str(),
          static_cast<double>(r.bytes_out_per_step) / static_cast<double>(mib), r.step_time_after_s,
          mid.step_s, ratio(mid),
          fmt::format("{:.2f}..{:.2f}", ratio(rows.front()), ratio(rows.back())).c_str(), r.stall_s,
          mid.stall_s, mid.host_wait_s);
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app(
      "time_model_bench: predicted vs measured step time and stall of a swapped VDSR or 3-D\n"
      "U-Net step on the emulated CPU device, with the measured and the roofline time model.",
      "time_model_bench");
  add_flags(app, o);
  if (std::optional<int> exit = lms::flags::parse_main(app, argc, argv, 1)) return *exit;
  if (o.model == "unet3d" && app.get_option("--size")->count() == 0) o.size = 48;
  absl::Status st = run(o);
  if (!st.ok()) {
    std::fprintf(stderr, "time_model_bench: %s\n", std::string(lms::to_std(st.message())).c_str());
    return 1;
  }
  return 0;
}
