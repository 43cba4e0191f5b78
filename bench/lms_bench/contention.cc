#include "contention.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <utility>

#include "fmt/format.h"
#include "lms/facts.h"
#include "lms/profiler/chrome_trace.h"
#include "lms/profiler/recorder.h"
#include "lms/profiler/summary.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/units.h"

namespace lms::bench {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int64_t kMaxDevices = 16;
// The planning device holds the whole unswapped step while node times are
// measured; its region is reserved lazily, so only touched pages cost RAM.
constexpr uint64_t kPlanningCapacityBytes = uint64_t{8} << 30;

absl::Status check_options(const ContentionOptions& o) {
  if (o.steps < 2) {
    return absl::InvalidArgumentError(fmt::format(
        "--steps {}: contention needs >= 2 (the first step is a warm-up, not timed)", o.steps));
  }
  if (o.devices.empty()) return absl::InvalidArgumentError("--devices: needs at least one count");
  for (int64_t k : o.devices) {
    if (k < 1 || k > kMaxDevices) {
      return absl::InvalidArgumentError(fmt::format(
          "--devices {}: each count of devices per link must be in [1, {}]", k, kMaxDevices));
    }
  }
  if (!(o.budget_fraction > 0 && o.budget_fraction < 1)) {
    return absl::InvalidArgumentError(
        fmt::format("--budget-fraction {}: must be in (0, 1)", o.budget_fraction));
  }
  absl::StatusOr<std::shared_ptr<HostLink>> link = make_host_link(o.link);
  if (!link.ok()) {
    return absl::InvalidArgumentError(fmt::format("--link: {}", to_std(link.status().message())));
  }
  return absl::OkStatus();
}

// What every configuration plans with: one device alone on a link of the
// options' kind, one compute thread (as the runs), room for the whole step.
struct PlanFacts {
  uint64_t budget_bytes = 0;
  LmsConfig config;        // roofline calibrated on the device, the measured link
  PlanningFacts planning;  // capacity = budget, workspaces, node times
  RewriteOptions options;  // the loss fetched
};

absl::StatusOr<std::unique_ptr<Device>> make_linked_device(const ContentionOptions& o,
                                                           std::shared_ptr<HostLink> link,
                                                           uint64_t capacity_bytes) {
  return make_cpu_device({.capacity_bytes = capacity_bytes,
                          .host_pool_bytes = o.host_pool_bytes,
                          .link = std::move(link),
                          .compute_threads = 1});
}

// The device capacity of the runs: budget_fraction of the no-LMS peak, but
// at least 5% above the working-set limit, in whole 64 KiB.
uint64_t forced_budget(const RewriteReport& off, const ContentionOptions& o) {
  constexpr uint64_t kGrain = uint64_t{64} << 10;
  const double bytes = std::max(o.budget_fraction * static_cast<double>(off.peak_bytes_before),
                                1.05 * static_cast<double>(off.working_set_limit_bytes) /
                                    (1.0 - o.config.fragmentation_reserve));
  return (static_cast<uint64_t>(bytes) + kGrain - 1) / kGrain * kGrain;
}

absl::StatusOr<PlanFacts> measure_facts(const Graph& train, const ContentionOptions& o,
                                        ContentionResult& r) {
  LMS_ASSIGN_OR_RETURN(std::shared_ptr<HostLink> link, make_host_link(o.link));
  LMS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                       make_linked_device(o, link, kPlanningCapacityBytes));
  LmsConfig off = o.config;
  off.enabled = false;
  Graph probe = train;
  LMS_ASSIGN_OR_RETURN(RewriteReport before, rewrite(probe, off, *device));
  r.no_lms_peak_bytes = before.peak_bytes_before;
  PlanFacts facts;
  facts.budget_bytes = forced_budget(before, o);
  // The graph is planned and run as it is (the facts overload of rewrite
  // runs no device pass), so its facts are too.
  const std::string loss = train.tensor(train.loss()).name;
  LmsConfig measured = o.config;
  measured.time_model = TimeModel::kMeasured;
  measured.device_memory_limit = 0;
  const auto start = std::chrono::steady_clock::now();
  LMS_ASSIGN_OR_RETURN(facts.planning,
                       gather_facts(train, measured, *device, nullptr,
                                    {.rewrite = {.fetched = {loss}}, .lower = false}));
  r.profile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.measured_link = *facts.planning.link;
  facts.config = o.config;
  facts.config.time_model = TimeModel::kRoofline;  // with the measured times below
  // The copies are what is measured: plan swaps only (lms-bench ratio
  // compares them with recomputation).
  facts.config.auto_actions = AutoActions::kSwap;
  facts.config.link = *facts.planning.link;
  facts.config.cost_model = *facts.planning.roofline;
  facts.config.device_memory_limit = 0;  // the device capacity is the budget
  facts.planning.device_capacity_bytes = facts.budget_bytes;
  facts.options = {.fetched = {loss}};
  return facts;
}

// Raises the budget by 5% at a time while the auto policy finds no plan
// whose static layout fits (near the working-set limit the arena may need
// more than the bytes live at once), up to the no-LMS peak.
absl::Status make_plannable(const Graph& train, PlanFacts& facts, uint64_t peak_bytes) {
  for (;;) {
    Graph copy = train;
    absl::StatusOr<RewriteReport> rep = rewrite(copy, facts.config, facts.planning, facts.options);
    if (rep.ok() || !absl::IsResourceExhausted(rep.status())) return rep.status();
    if (facts.budget_bytes >= peak_bytes) return rep.status();
    facts.budget_bytes = std::min(peak_bytes, facts.budget_bytes + facts.budget_bytes / 20);
    facts.planning.device_capacity_bytes = facts.budget_bytes;
  }
}

// One device of a configuration: declared so that the session goes first,
// then the device, then the recorder the device reports to.
struct DeviceWork {
  std::unique_ptr<Recorder> recorder = std::make_unique<Recorder>();
  std::unique_ptr<Device> device;
  std::unique_ptr<Session> session;
  std::vector<StepResult> results;
  absl::Status status;
};

// The steps of one device; every device waits at `start` before each step,
// so the replicas copy at the same moments (the lockstep the simulator's
// model assumes). A failed device leaves the barrier so the others go on.
void run_steps(DeviceWork& w, const std::vector<Feeds>& feeds, std::barrier<>& start) {
  for (const Feeds& f : feeds) {
    start.arrive_and_wait();
    StepResult r;
    w.status = w.session->run(f, &r);
    if (!w.status.ok()) {
      start.arrive_and_drop();
      return;
    }
    w.results.push_back(std::move(r));
  }
}

// Bytes and busy seconds (union of the copy intervals) of a copy stream, and
// busy seconds of the compute stream, from `from_s` on.
struct Busy {
  uint64_t bytes = 0;
  double seconds = 0;
};

Busy busy(const Timeline& t, StreamKind stream, IntervalKind kind, double from_s) {
  Busy b;
  std::vector<std::pair<double, double>> spans;
  for (const Interval& i : t.stream(stream)) {
    if (i.kind != kind || i.start_s < from_s) continue;
    b.bytes += i.bytes;
    spans.emplace_back(i.start_s, i.end_s);
  }
  b.seconds = union_length_s(std::move(spans));
  return b;
}

ContentionDevice summarize_device(const DeviceWork& w) {
  ContentionDevice d;
  const Timeline t = w.recorder->snapshot();
  const double from_s = t.steps.size() > 1 ? t.steps[1].start_s : t.first_s();
  double step_sum = 0, stall_sum = 0;
  for (size_t s = 0; s < w.results.size(); ++s) {
    d.step_s.push_back(w.results[s].step_s);
    if (s == 0) continue;
    step_sum += w.results[s].step_s;
    stall_sum += w.results[s].stall_s;
  }
  const double timed = static_cast<double>(std::max<size_t>(w.results.size(), 2) - 1);
  d.mean_step_s = step_sum / timed;
  d.mean_stall_s = stall_sum / timed;
  const Busy in = busy(t, StreamKind::kH2D, IntervalKind::kCopy, from_s);
  const Busy out = busy(t, StreamKind::kD2H, IntervalKind::kCopy, from_s);
  const Busy compute = busy(t, StreamKind::kCompute, IntervalKind::kNode, from_s);
  d.h2d_bytes_per_s = in.seconds > 0 ? static_cast<double>(in.bytes) / in.seconds : 0;
  d.d2h_bytes_per_s = out.seconds > 0 ? static_cast<double>(out.bytes) / out.seconds : 0;
  d.compute_s = compute.seconds / timed;
  d.compute_utilisation = step_sum > 0 ? compute.seconds / step_sum : 0;
  if (!w.results.empty()) {
    d.bytes_h2d_per_step = w.results.back().bytes_h2d;
    d.bytes_d2h_per_step = w.results.back().bytes_d2h;
  }
  return d;
}

// k devices on one new link, a session of `planned` on each.
absl::StatusOr<std::vector<DeviceWork>> start_devices(const Graph& planned, const PlanFacts& facts,
                                                      const ContentionOptions& o, int64_t k) {
  LMS_ASSIGN_OR_RETURN(std::shared_ptr<HostLink> link, make_host_link(o.link));
  std::vector<DeviceWork> work(static_cast<size_t>(k));
  for (DeviceWork& w : work) {
    LMS_ASSIGN_OR_RETURN(w.device, make_linked_device(o, link, facts.budget_bytes));
    SessionOptions so{.fetches = facts.options.fetched, .sink = w.recorder.get()};
    LMS_ASSIGN_OR_RETURN(w.session, Session::create(planned, *w.device, so));
  }
  return work;
}

absl::Status write_traces(const std::vector<DeviceWork>& work, const ContentionResult& r,
                          const ContentionOptions& o, int64_t k) {
  for (size_t i = 0; i < work.size(); ++i) {
    const std::string path = fmt::format("{}/contention_{}_{}{}_{}dev_{}.trace.json", o.trace_dir,
                                         r.model, r.size_label, r.size, k, i);
    LMS_RETURN_IF_ERROR(
        write_chrome_trace(*work[i].recorder, {.device_capacity_bytes = r.budget_bytes}, path));
  }
  return absl::OkStatus();
}

void fill_means(ContentionCase& c) {
  const double n = static_cast<double>(c.runs.size());
  for (const ContentionDevice& d : c.runs) {
    c.mean_step_s += d.mean_step_s / n;
    c.h2d_bytes_per_s += d.h2d_bytes_per_s / n;
    c.d2h_bytes_per_s += d.d2h_bytes_per_s / n;
    c.compute_s += d.compute_s / n;
    c.compute_utilisation += d.compute_utilisation / n;
  }
  c.error = c.mean_step_s > 0 ? c.predicted_step_s / c.mean_step_s - 1 : 0;
}

// Plans for k devices per link, runs the plan on k devices sharing one link.
absl::StatusOr<ContentionCase> run_case_of(const Graph& train, const PlanFacts& facts,
                                           const std::vector<Feeds>& feeds,
                                           const ContentionOptions& o, int64_t k,
                                           const ContentionResult& r) {
  ContentionCase c;
  c.devices = k;
  Graph planned = train;
  LmsConfig config = facts.config;
  config.link_devices = static_cast<int32_t>(k);
  LMS_ASSIGN_OR_RETURN(RewriteReport rep, rewrite(planned, config, facts.planning, facts.options));
  c.predicted_step_s = rep.step_time_after_s;
  c.predicted_stall_s = rep.stall_s;
  c.planned_bytes_out_per_step = rep.bytes_out_per_step;
  c.planned_bytes_in_per_step = rep.bytes_in_per_step;
  LMS_ASSIGN_OR_RETURN(std::vector<DeviceWork> work, start_devices(planned, facts, o, k));
  std::barrier<> start(k);
  std::vector<std::thread> threads;
  for (DeviceWork& w : work) {
    threads.emplace_back([&w, &feeds, &start] { run_steps(w, feeds, start); });
  }
  for (std::thread& t : threads) t.join();
  for (DeviceWork& w : work) {
    LMS_RETURN_IF_ERROR(w.status);
    w.session.reset();  // the device is idle: every event has reached the recorder
    c.runs.push_back(summarize_device(w));
  }
  if (!o.trace_dir.empty()) LMS_RETURN_IF_ERROR(write_traces(work, r, o, k));
  fill_means(c);
  return c;
}

std::string rate_text(double bytes_per_s) {
  if (bytes_per_s <= 0) return "unthrottled";
  return bytes_per_s >= 1e9 ? fmt::format("{:.2f} GB/s", bytes_per_s / 1e9)
                            : fmt::format("{:.0f} MB/s", bytes_per_s / 1e6);
}

std::string row_text(const std::string& k, const std::string& device, double h2d, double d2h,
                     double compute_s, double util, double step_s, const ContentionCase& c) {
  return fmt::format(
      "{:>12} | {:>6} | {:>8.3f} | {:>8.3f} | {:>9.3f} | {:>11.1f}% | {:>11.3f} | {:>11.3f} | "
      "{:>+6.1f}% | {:>13.1f}\n",
      k, device, h2d / 1e9, d2h / 1e9, compute_s, 100 * util, step_s, c.predicted_step_s,
      100 * (c.predicted_step_s / step_s - 1),
      static_cast<double>(c.planned_bytes_out_per_step) / kMiB);
}

std::string compare_text(const ContentionCase& one, const ContentionCase& c) {
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0; };
  return fmt::format(
      "{} vs 1 device per link: copy throughput per device x{:.2f} H2D ({:.3f} -> {:.3f} GB/s), "
      "x{:.2f} D2H ({:.3f} -> {:.3f} GB/s); compute utilisation {:.1f}% -> {:.1f}% (compute "
      "{:.3f} -> {:.3f} s/step); step time {:+.1f}% ({:.3f} -> {:.3f} s; predicted {:+.1f}%)\n",
      c.devices, ratio(c.h2d_bytes_per_s, one.h2d_bytes_per_s), one.h2d_bytes_per_s / 1e9,
      c.h2d_bytes_per_s / 1e9, ratio(c.d2h_bytes_per_s, one.d2h_bytes_per_s),
      one.d2h_bytes_per_s / 1e9, c.d2h_bytes_per_s / 1e9, 100 * one.compute_utilisation,
      100 * c.compute_utilisation, one.compute_s, c.compute_s,
      100 * (ratio(c.mean_step_s, one.mean_step_s) - 1), one.mean_step_s, c.mean_step_s,
      100 * (ratio(c.predicted_step_s, one.predicted_step_s) - 1));
}

std::string tolerance_text(const ContentionResult& r) {
  std::string cases;
  bool all = true;
  for (const ContentionCase& c : r.cases) {
    all = all && c.within_tolerance();
    cases +=
        fmt::format("{}{} per link {:+.1f}%", cases.empty() ? "" : ", ", c.devices, 100 * c.error);
  }
  return fmt::format(
      "simulator (LmsConfig::link_devices = devices per link; each copy gets 1/k of the link, "
      "exact for lockstep replicas): predicted step within {:.0f}% of the measured mean: {} -> "
      "{}\n",
      100 * kStepTimeTolerance, cases, all ? "met" : "NOT met");
}

}  // namespace

bool ContentionCase::within_tolerance() const { return std::abs(error) <= kStepTimeTolerance; }

absl::StatusOr<ContentionResult> run_contention(const ModelFactory& f, const ContentionOptions& o,
                                                std::ostream& log) {
  LMS_RETURN_IF_ERROR(check_options(o));
  ContentionResult r{.model = f.model,
                     .size_label = f.size_label,
                     .size = o.size,
                     .data_note = f.data_note,
                     .link = o.link,
                     .steps = o.steps};
  LMS_ASSIGN_OR_RETURN(Graph train, f.build(o.size));
  std::vector<Feeds> feeds;
  for (int step = 0; step < o.steps; ++step) {
    LMS_ASSIGN_OR_RETURN(Feeds fs, f.feeds(o.size, step));
    feeds.push_back(std::move(fs));
  }
  LMS_ASSIGN_OR_RETURN(PlanFacts facts, measure_facts(train, o, r));
  LMS_RETURN_IF_ERROR(make_plannable(train, facts, r.no_lms_peak_bytes));
  r.budget_bytes = facts.budget_bytes;
  log << fmt::format("  profiled in {:.1f} s; device capacity {} (no-LMS peak {})\n", r.profile_s,
                     format_bytes(r.budget_bytes), format_bytes(r.no_lms_peak_bytes));
  for (int64_t k : o.devices) {
    LMS_ASSIGN_OR_RETURN(ContentionCase c, run_case_of(train, facts, feeds, o, k, r));
    log << fmt::format("  {} per link: {:.3f} s/step\n", k, c.mean_step_s);
    r.cases.push_back(std::move(c));
  }
  return r;
}

std::string format_contention(const ContentionResult& r) {
  std::string out = fmt::format(
      "contention: {} {} {} ({}), LMS on every device, capacity {} each ({:.2f} of the no-LMS "
      "peak {}); one host link per row group shared by its devices: {} D2H, {} H2D, {:.0f} us "
      "latency (profiled alone: {} / {}, {:.0f} us); 1 compute thread per device (2 cores: the "
      "devices share the link, not cores); {} timed step{} after 1 warm-up, devices start "
      "each step together\n",
      r.model, r.size_label, r.size, r.data_note, format_bytes(r.budget_bytes),
      static_cast<double>(r.budget_bytes) /
          static_cast<double>(std::max<uint64_t>(1, r.no_lms_peak_bytes)),
      format_bytes(r.no_lms_peak_bytes), rate_text(r.link.d2h_bytes_per_s),
      rate_text(r.link.h2d_bytes_per_s), r.link.latency_s * 1e6,
      rate_text(r.measured_link.d2h_bytes_per_s), rate_text(r.measured_link.h2d_bytes_per_s),
      r.measured_link.copy_latency_s * 1e6, r.steps - 1, r.steps > 2 ? "s" : "");
  out += fmt::format(
      "{:>12} | {:>6} | {:>8} | {:>8} | {:>9} | {:>12} | {:>11} | {:>11} | {:>7} | {:>13}\n",
      "devices/link", "device", "H2D GB/s", "D2H GB/s", "compute s", "compute util", "step s meas",
      "step s pred", "error", "swap MiB/step");
  for (const ContentionCase& c : r.cases) {
    for (size_t i = 0; i < c.runs.size(); ++i) {
      const ContentionDevice& d = c.runs[i];
      out += row_text(std::to_string(c.devices), std::to_string(i), d.h2d_bytes_per_s,
                      d.d2h_bytes_per_s, d.compute_s, d.compute_utilisation, d.mean_step_s, c);
    }
    if (c.runs.size() > 1) {
      out += row_text(std::to_string(c.devices), "mean", c.h2d_bytes_per_s, c.d2h_bytes_per_s,
                      c.compute_s, c.compute_utilisation, c.mean_step_s, c);
    }
  }
  out +=
      "GB/s: bytes copied / time the device's copy stream was busy (GB = 1e9 B); compute s: "
      "compute-stream busy per step; compute util: compute s / step time; swap: planned D2H "
      "bytes per step\n";
  const auto one = std::find_if(r.cases.begin(), r.cases.end(),
                                [](const ContentionCase& c) { return c.devices == 1; });
  for (const ContentionCase& c : r.cases) {
    if (one != r.cases.end() && c.devices > 1) out += compare_text(*one, c);
  }
  return out + tolerance_text(r);
}

nlohmann::json to_json(const ContentionResult& r) {
  nlohmann::json cases = nlohmann::json::array();
  for (const ContentionCase& c : r.cases) {
    nlohmann::json runs = nlohmann::json::array();
    for (const ContentionDevice& d : c.runs) {
      runs.push_back({{"step_s", d.step_s},
                      {"mean_step_s", d.mean_step_s},
                      {"mean_stall_s", d.mean_stall_s},
                      {"h2d_bytes_per_s", d.h2d_bytes_per_s},
                      {"d2h_bytes_per_s", d.d2h_bytes_per_s},
                      {"compute_s", d.compute_s},
                      {"compute_utilisation", d.compute_utilisation},
                      {"bytes_h2d_per_step", d.bytes_h2d_per_step},
                      {"bytes_d2h_per_step", d.bytes_d2h_per_step}});
    }
    cases.push_back({{"devices_per_link", c.devices},
                     {"predicted_step_s", c.predicted_step_s},
                     {"predicted_stall_s", c.predicted_stall_s},
                     {"planned_bytes_out_per_step", c.planned_bytes_out_per_step},
                     {"planned_bytes_in_per_step", c.planned_bytes_in_per_step},
                     {"mean_step_s", c.mean_step_s},
                     {"h2d_bytes_per_s", c.h2d_bytes_per_s},
                     {"d2h_bytes_per_s", c.d2h_bytes_per_s},
                     {"compute_s", c.compute_s},
                     {"compute_utilisation", c.compute_utilisation},
                     {"error", c.error},
                     {"within_tolerance", c.within_tolerance()},
                     {"devices", runs}});
  }
  return {{"model", r.model},
          {"size_label", r.size_label},
          {"size", r.size},
          {"device", "cpu-emulated"},
          {"compute_threads_per_device", 1},
          {"capacity_bytes", r.budget_bytes},
          {"no_lms_peak_bytes", r.no_lms_peak_bytes},
          {"link",
           {{"d2h_bytes_per_s", r.link.d2h_bytes_per_s},
            {"h2d_bytes_per_s", r.link.h2d_bytes_per_s},
            {"latency_s", r.link.latency_s},
            {"chunk_bytes", r.link.chunk_bytes}}},
          {"measured_link",
           {{"d2h_bytes_per_s", r.measured_link.d2h_bytes_per_s},
            {"h2d_bytes_per_s", r.measured_link.h2d_bytes_per_s},
            {"copy_latency_s", r.measured_link.copy_latency_s}}},
          {"steps", r.steps},
          {"tolerance", kStepTimeTolerance},
          {"cases", cases}};
}

}  // namespace lms::bench
