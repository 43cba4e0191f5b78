#include "overhead.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#include "fmt/format.h"
#include "lms/device.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/units.h"
#include "report.h"

namespace lms::bench {
namespace {

// Single-threaded memcpy bandwidth of 64 MiB blocks (best of 5): what an
// unthrottled emulated copy achieves, so the simulator can predict it.
double measure_memcpy_bytes_per_s() {
  constexpr size_t kBytes = size_t{64} << 20;
  std::vector<char> src(kBytes, 1), dst(kBytes, 0);
  double best = std::numeric_limits<double>::max();
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), kBytes);
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    src[static_cast<size_t>(i)] = dst[kBytes - 1 - static_cast<size_t>(i)];  // keep the copy
  }
  return static_cast<double>(kBytes) / std::max(best, 1e-9);
}

absl::Status check_options(const OverheadOptions& o) {
  if (o.steps < 2) {
    return absl::InvalidArgumentError(
        fmt::format("--steps {}: overhead needs >= 2 (time/step excludes the first)", o.steps));
  }
  if (!(o.budget_fraction > 0 && o.budget_fraction < 1)) {
    return absl::InvalidArgumentError(
        fmt::format("--budget-fraction {}: must be in (0, 1)", o.budget_fraction));
  }
  return absl::OkStatus();
}

// The forced budget: a fraction of the no-LMS peak, but never below what the
// auto policy needs to reach the working-set limit (with 2% to spare).
uint64_t forced_budget(const CaseResult& base, const OverheadOptions& o) {
  const double frac = o.budget_fraction * static_cast<double>(base.predicted_peak_before_bytes);
  const double floor = static_cast<double>(base.working_set_limit_bytes) /
                       (1.0 - o.config.fragmentation_reserve) * 1.02;
  return static_cast<uint64_t>(std::max(frac, floor));
}

// The smallest budget of the form start * 1.05^k (at most the capacity) at
// which the auto policy finds a plan whose static layout fits: near the
// working-set limit the arena may need more than the bytes live at once.
// Planned as the LMS rows plan (run_case.h: the Device overload), with the
// roofline, since only whether a plan fits matters here.
absl::StatusOr<uint64_t> plannable_budget(const Graph& graph, const OverheadOptions& o,
                                          uint64_t start) {
  LMS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, make_device(o.device));
  const std::string loss = graph.tensor(graph.loss()).name;
  for (uint64_t budget = start;; budget = budget + budget / 20 + 1) {
    budget = std::min(budget, o.device.capacity_bytes);
    LmsConfig config = o.config;
    config.time_model = TimeModel::kRoofline;
    config.device_memory_limit = budget;
    Graph copy = graph;
    absl::StatusOr<RewriteReport> rep = rewrite(copy, config, *device, {.fetched = {loss}});
    if (rep.ok() || !absl::IsResourceExhausted(rep.status()) || budget == o.device.capacity_bytes) {
      return budget;
    }
  }
}

absl::StatusOr<OverheadCase> run_lms_case(const ModelFactory& f, const OverheadOptions& o,
                                          const std::vector<double>& node_times, uint64_t budget,
                                          double link, double predicted_link, std::string name) {
  CaseSpec spec;
  spec.size = o.size;
  spec.lms = true;
  spec.steps = o.steps;
  spec.config = o.config;
  spec.device = o.device;
  spec.node_time_s = node_times;
  // The predictions compared with the measurements are the roofline's with
  // the node times measured without LMS and the link below: "measured"
  // would replace that link with the one it measures.
  spec.config.time_model = TimeModel::kRoofline;
  spec.config.device_memory_limit = budget;
  spec.config.link.d2h_bytes_per_s = predicted_link;
  spec.config.link.h2d_bytes_per_s = predicted_link;
  spec.device.d2h_bytes_per_s = link;
  spec.device.h2d_bytes_per_s = link;
  spec.device.copy_latency_s = link > 0 ? o.config.link.copy_latency_s : 0;
  if (link == 0) spec.config.link.copy_latency_s = 0;
  OverheadCase c;
  c.name = std::move(name);
  c.link_bytes_per_s = link;
  LMS_ASSIGN_OR_RETURN(c.row, run_case(f, spec));
  return c;
}

}  // namespace

std::vector<double> measured_node_times(const Recorder& recorder, const Graph& graph) {
  const Timeline t = recorder.snapshot();
  double from_s = t.steps.size() > 1 ? t.steps[1].start_s : -std::numeric_limits<double>::max();
  std::map<std::string, std::pair<double, int>, std::less<>> sums;
  for (const Interval& i : t.stream(StreamKind::kCompute)) {
    if (i.kind != IntervalKind::kNode || i.start_s < from_s) continue;
    auto& [sum, n] = sums[std::string(t.str(i.name))];
    sum += i.duration_s();
    ++n;
  }
  std::vector<double> times(static_cast<size_t>(graph.num_nodes()), -1.0);
  for (const auto& [name, sn] : sums) {
    NodeId id = graph.find_node(name);
    if (id != kNoNode) times[static_cast<size_t>(id)] = sn.first / sn.second;
  }
  // A conv the CPU device ran fused with its relu (Note [Conv + ReLU
  // fusion]) has no interval of its own: the relu's, which carries the
  // fused node's name, holds both, and lms::rewrite sums the two again.
  for (NodeId id = 0; id < static_cast<NodeId>(graph.num_nodes()); ++id) {
    const Node& n = graph.node(id);
    if (times[static_cast<size_t>(id)] >= 0 || n.op != OpKind::kConv || n.outputs.size() != 1) {
      continue;
    }
    const std::vector<NodeId>& readers = graph.tensor(n.outputs[0]).consumers;
    if (readers.size() == 1 && graph.node(readers[0]).op == OpKind::kRelu &&
        times[static_cast<size_t>(readers[0])] >= 0) {
      times[static_cast<size_t>(id)] = 0;
    }
  }
  return times;
}

absl::StatusOr<OverheadResult> run_overhead(const ModelFactory& f, const OverheadOptions& o,
                                            std::ostream& log) {
  LMS_RETURN_IF_ERROR(check_options(o));
  OverheadResult r;
  r.model = f.model;
  r.size_label = f.size_label;
  r.size = o.size;
  r.capacity_bytes = o.device.capacity_bytes;
  r.memcpy_bytes_per_s = measure_memcpy_bytes_per_s();
  CaseSpec base;
  base.size = o.size;
  base.steps = o.steps;
  base.config = o.config;
  base.device = o.device;
  base.record = true;
  base.device.d2h_bytes_per_s = base.device.h2d_bytes_per_s = base.device.copy_latency_s = 0;
  LMS_ASSIGN_OR_RETURN(r.baseline, run_case(f, base));
  if (!r.baseline.ok) {
    return absl::FailedPreconditionError(fmt::format(
        "overhead: {} {} does not fit {} without LMS ({}); lower --batch or raise --capacity",
        f.size_label, o.size, format_bytes(o.device.capacity_bytes), r.baseline.status));
  }
  log << fmt::format("  no LMS: {:.3f} s/step\n", r.baseline.mean_step_s);
  LMS_ASSIGN_OR_RETURN(Graph graph, f.build(o.size));
  const std::vector<double> times = measured_node_times(*r.baseline.recorder, graph);
  r.baseline.recorder.reset();
  LMS_ASSIGN_OR_RETURN(
      r.budget_bytes,
      plannable_budget(graph, o, std::min(forced_budget(r.baseline, o), o.device.capacity_bytes)));
  const double link = o.config.link.h2d_bytes_per_s;
  LMS_ASSIGN_OR_RETURN(OverheadCase fast, run_lms_case(f, o, times, r.budget_bytes, 0,
                                                       r.memcpy_bytes_per_s, "LMS, unthrottled"));
  log << fmt::format("  LMS unthrottled: {}\n", fast.row.status);
  LMS_ASSIGN_OR_RETURN(
      OverheadCase slow,
      run_lms_case(f, o, times, r.budget_bytes, link, link,
                   link >= 1e9 ? fmt::format("LMS, link {:.1f} GB/s", link / 1e9)
                               : fmt::format("LMS, link {:.1f} MB/s", link / 1e6)));
  log << fmt::format("  LMS throttled: {}\n", slow.row.status);
  for (OverheadCase* c : {&fast, &slow}) {
    c->overhead_pct = c->row.ok ? 100.0 * (c->row.mean_step_s / r.baseline.mean_step_s - 1) : 0;
    r.cases.push_back(std::move(*c));
  }
  return r;
}

std::string format_overhead(const OverheadResult& r) {
  constexpr double kMiB = 1 << 20;
  std::string out = fmt::format(
      "overhead: {} {} {}, capacity {}, forced LMS budget {} (no-LMS predicted peak {}), "
      "unthrottled copies ~ memcpy {:.1f} GB/s\n",
      r.model, r.size_label, r.size, format_bytes(r.capacity_bytes), format_bytes(r.budget_bytes),
      format_bytes(r.baseline.predicted_peak_before_bytes), r.memcpy_bytes_per_s / 1e9);
  out += fmt::format("{:<24} | {:>9} | {:>11} | {:>11} | {:>11} | {:>11} | {:>11} | {:>8} | {}\n",
                     "run", "swap MiB", "step s meas", "step s pred", "stall meas", "stall pred",
                     "host wait", "overhead", "status");
  out += fmt::format(
      "{:<24} | {:>9.1f} | {:>11.3f} | {:>11} | {:>11.3f} | {:>11} | {:>11.3f} | {:>8} | {}\n",
      "no LMS", 0.0, r.baseline.mean_step_s, "-", r.baseline.mean_stall_s, "-",
      r.baseline.mean_host_wait_s, "-", r.baseline.status);
  for (const OverheadCase& c : r.cases) {
    const CaseResult& row = c.row;
    out += fmt::format(
        "{:<24} | {:>9.1f} | {:>11.3f} | {:>11.3f} | {:>11.3f} | {:>11.3f} | {:>11.3f} | "
        "{:>7.1f}% | {}\n",
        c.name, row.bytes_d2h_per_step / kMiB, row.mean_step_s, row.predicted_step_s,
        row.mean_stall_s, row.predicted_stall_s, row.mean_host_wait_s, c.overhead_pct, row.status);
  }
  out +=
      "stall: compute stream waiting on copies (Note [Stall]); host wait: the issuing thread "
      "blocked in device calls (mostly the end-of-step synchronize), not stall\n";
  return out;
}

nlohmann::json to_json(const OverheadResult& r) {
  nlohmann::json cases = nlohmann::json::array();
  for (const OverheadCase& c : r.cases) {
    nlohmann::json j = to_json(c.row);
    j["name"] = c.name;
    j["link_bytes_per_s"] = c.link_bytes_per_s;
    j["overhead_pct"] = c.overhead_pct;
    cases.push_back(j);
  }
  return {{"model", r.model},
          {"size_label", r.size_label},
          {"size", r.size},
          {"device", "cpu-emulated"},
          {"capacity_bytes", r.capacity_bytes},
          {"budget_bytes", r.budget_bytes},
          {"memcpy_bytes_per_s", r.memcpy_bytes_per_s},
          {"baseline", to_json(r.baseline)},
          {"cases", cases}};
}

}  // namespace lms::bench
