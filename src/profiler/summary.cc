#include "lms/profiler/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>

#include "absl/container/flat_hash_map.h"

namespace lms {
namespace {

using Spans = std::vector<std::pair<double, double>>;

Spans spans_of(const std::vector<Interval>& intervals, IntervalKind kind) {
  Spans out;
  for (const Interval& i : intervals) {
    if (i.kind == kind) out.emplace_back(i.start_s, i.end_s);
  }
  return out;
}

uint64_t copy_bytes(const std::vector<Interval>& intervals) {
  uint64_t total = 0;
  for (const Interval& i : intervals) {
    if (i.kind == IntervalKind::kCopy) total += i.bytes;
  }
  return total;
}

uint64_t peak(const std::vector<MemorySample>& samples) {
  uint64_t p = 0;
  for (const MemorySample& s : samples) p = std::max(p, s.bytes_in_use);
  return p;
}

double gb_per_s(uint64_t bytes, double busy_s) {
  return busy_s > 0 ? static_cast<double>(bytes) / busy_s / 1e9 : 0.0;
}

// ProfileSummary::issue_lead_*: pairs the k-th issue marker of a node name
// with the k-th compute interval of that name.
void issue_lead(const Timeline& t, ProfileSummary& s) {
  absl::flat_hash_map<uint32_t, std::deque<double>> issued;
  for (const Interval& i : t.stream(StreamKind::kHost)) {
    if (i.kind == IntervalKind::kIssue) issued[i.name].push_back(i.start_s);
  }
  if (issued.empty()) return;
  std::vector<double> leads;
  for (const Interval& i : t.stream(StreamKind::kCompute)) {
    if (i.kind != IntervalKind::kNode) continue;
    auto it = issued.find(i.name);
    if (it == issued.end() || it->second.empty()) continue;
    leads.push_back(i.start_s - it->second.front());
    it->second.pop_front();
  }
  if (leads.empty()) return;
  std::sort(leads.begin(), leads.end());
  s.issue_lead_median_s = leads[leads.size() / 2];
  s.issue_lead_max_s = leads.back();
}

// Sorted, disjoint [start, end) intervals covering the same time as `in`.
Spans merged(Spans in) {
  std::sort(in.begin(), in.end());
  Spans out;
  for (const auto& [start, end] : in) {
    if (end <= start) continue;
    if (!out.empty() && start <= out.back().second) {
      out.back().second = std::max(out.back().second, end);
    } else {
      out.emplace_back(start, end);
    }
  }
  return out;
}

std::string mib(uint64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

}  // namespace

double overlap_length_s(Spans a, Spans b) {
  a = merged(std::move(a));
  b = merged(std::move(b));
  double total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].first, b[j].first);
    const double hi = std::min(a[i].second, b[j].second);
    if (hi > lo) total += hi - lo;
    (a[i].second < b[j].second ? i : j)++;
  }
  return total;
}

double union_length_s(Spans intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0;
  bool open = false;
  double cur_start = 0, cur_end = 0;
  for (const auto& [start, end] : intervals) {
    if (end <= start) continue;
    if (open && start <= cur_end) {
      cur_end = std::max(cur_end, end);
      continue;
    }
    if (open) total += cur_end - cur_start;
    cur_start = start;
    cur_end = end;
    open = true;
  }
  if (open) total += cur_end - cur_start;
  return total;
}

ProfileSummary summarize(const Timeline& t) {
  ProfileSummary s;
  s.span_s = t.last_s() - t.first_s();
  s.steps = static_cast<int64_t>(t.steps.size());
  double step_sum = 0;
  for (const StepRecord& st : t.steps) step_sum += st.end_s - st.start_s;
  s.step_time_s = t.steps.empty() ? s.span_s : step_sum / static_cast<double>(t.steps.size());

  double compute_busy =
      union_length_s(spans_of(t.stream(StreamKind::kCompute), IntervalKind::kNode));
  s.compute_utilisation_pct = s.span_s > 0 ? 100.0 * compute_busy / s.span_s : 0.0;

  const auto& d2h = t.stream(StreamKind::kD2H);
  const auto& h2d = t.stream(StreamKind::kH2D);
  s.bytes_d2h = copy_bytes(d2h);
  s.bytes_h2d = copy_bytes(h2d);
  s.d2h_gb_per_s = gb_per_s(s.bytes_d2h, union_length_s(spans_of(d2h, IntervalKind::kCopy)));
  s.h2d_gb_per_s = gb_per_s(s.bytes_h2d, union_length_s(spans_of(h2d, IntervalKind::kCopy)));
  Spans copies = spans_of(d2h, IntervalKind::kCopy);
  for (const auto& c : spans_of(h2d, IntervalKind::kCopy)) copies.push_back(c);
  s.copy_busy_s = union_length_s(copies);
  const double hidden =
      overlap_length_s(copies, spans_of(t.stream(StreamKind::kCompute), IntervalKind::kNode));
  s.copy_overlap_pct = s.copy_busy_s > 0 ? 100.0 * hidden / s.copy_busy_s : 0.0;

  // Per Note [Stall], compute-stream waits on copies only; the host's
  // waits are their own figure.
  s.stall_s = union_length_s(spans_of(t.stream(StreamKind::kCompute), IntervalKind::kStall));
  s.host_wait_s = union_length_s(spans_of(t.stream(StreamKind::kHost), IntervalKind::kHostWait));

  issue_lead(t, s);
  s.peak_device_bytes = peak(t.samples(MemoryKind::kDevice));
  s.peak_pinned_host_bytes = peak(t.samples(MemoryKind::kPinnedHost));
  return s;
}

ProfileSummary summarize(const Recorder& recorder) { return summarize(recorder.snapshot()); }

std::string format_summary(const ProfileSummary& s) {
  auto row = [](std::string_view label, std::string_view value) {
    return fmt::format("  {:<24}{:>16}\n", label, value);
  };
  std::string out = "profile summary\n";
  out += row("steps", fmt::format("{}", s.steps));
  out += row("step time", fmt::format("{:.3f} ms", s.step_time_s * 1e3));
  out += row("compute utilisation", fmt::format("{:.1f} %", s.compute_utilisation_pct));
  out += row("H2D throughput", fmt::format("{:.2f} GB/s", s.h2d_gb_per_s));
  out += row("D2H throughput", fmt::format("{:.2f} GB/s", s.d2h_gb_per_s));
  out += row("bytes H2D", mib(s.bytes_h2d));
  out += row("bytes D2H", mib(s.bytes_d2h));
  out += row("copy busy time", fmt::format("{:.3f} ms", s.copy_busy_s * 1e3));
  out += row("copy/compute overlap", fmt::format("{:.1f} %", s.copy_overlap_pct));
  out += row("stall time", fmt::format("{:.3f} ms", s.stall_s * 1e3));
  out += row("host wait time", fmt::format("{:.3f} ms", s.host_wait_s * 1e3));
  out += row("host issue lead (median)", fmt::format("{:.3f} ms", s.issue_lead_median_s * 1e3));
  out += row("host issue lead (max)", fmt::format("{:.3f} ms", s.issue_lead_max_s * 1e3));
  out += row("peak device memory", mib(s.peak_device_bytes));
  out += row("peak pinned host memory", mib(s.peak_pinned_host_bytes));
  return out;
}

}  // namespace lms
