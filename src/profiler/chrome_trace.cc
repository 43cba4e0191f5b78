#include "lms/profiler/chrome_trace.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "lms/profiler/atomic_file.h"

namespace lms {
namespace {

using json = nlohmann::json;

constexpr int kStepsTid = static_cast<int>(kNumStreams) + 1;

int stream_tid(size_t stream) { return static_cast<int>(stream) + 1; }

// Converts absolute seconds to trace microseconds relative to the origin,
// rounded to whole nanoseconds (short numbers in the file). Rounding is
// monotonic, so intervals that did not overlap still do not.
struct Clock {
  double origin_s;
  double us(double t_s) const { return std::round((t_s - origin_s) * 1e9) / 1e3; }
};

json metadata(const char* name, int pid, int tid, json args) {
  return json{{"ph", "M"},  {"name", name}, {"ts", 0},
              {"pid", pid}, {"tid", tid},   {"args", std::move(args)}};
}

void add_metadata(const Timeline& t, const TraceOptions& opt, json& events) {
  events.push_back(metadata("process_name", opt.pid, 0, {{"name", opt.process_name}}));
  for (size_t s = 0; s < kNumStreams; ++s) {
    const char* name = stream_name(static_cast<StreamKind>(s));
    events.push_back(metadata("thread_name", opt.pid, stream_tid(s), {{"name", name}}));
    events.push_back(metadata("thread_sort_index", opt.pid, stream_tid(s),
                              {{"sort_index", static_cast<int>(s)}}));
  }
  if (!t.steps.empty()) {
    events.push_back(metadata("thread_name", opt.pid, kStepsTid, {{"name", "steps"}}));
  }
}

const char* copy_category(StreamKind stream) {
  if (stream == StreamKind::kD2H) return "swap_out";
  if (stream == StreamKind::kH2D) return "swap_in";
  if (stream == StreamKind::kComm) return "all_reduce";
  return "copy";
}

json interval_event(const Timeline& t, StreamKind stream, const Interval& i) {
  json e{{"ph", "X"}, {"ts", 0}, {"dur", 0}};
  switch (i.kind) {
    case IntervalKind::kNode:
      e["name"] = t.str(i.name);
      e["cat"] = t.str(i.detail).empty() ? std::string_view("node") : t.str(i.detail);
      e["args"] = {{"op", t.str(i.detail)}};
      break;
    case IntervalKind::kCopy:
      e["name"] = t.str(i.name);
      e["cat"] = copy_category(stream);
      e["args"] = {{"tensor", t.str(i.name)}, {"bytes", i.bytes}};
      break;
    case IntervalKind::kStall:
      e["name"] = t.str(i.detail).empty() ? std::string_view("stall") : t.str(i.detail);
      e["cat"] = "stall";
      e["args"] = {{"node", t.str(i.name)}, {"reason", t.str(i.detail)}};
      break;
    case IntervalKind::kHostWait:
      e["name"] = t.str(i.detail).empty() ? std::string_view("host wait") : t.str(i.detail);
      e["cat"] = "host_wait";
      e["args"] = {{"node", t.str(i.name)}, {"reason", t.str(i.detail)}};
      break;
    case IntervalKind::kIssue:
      // An instant on the host track: when the host issued the node.
      e = json{{"ph", "i"}, {"s", "t"}, {"ts", 0}};
      e["name"] = t.str(i.name);
      e["cat"] = "issue";
      e["args"] = {{"op", t.str(i.detail)}};
      break;
  }
  return e;
}

void add_intervals(const Timeline& t, const TraceOptions& opt, Clock clock, json& events) {
  for (size_t s = 0; s < kNumStreams; ++s) {
    const auto stream = static_cast<StreamKind>(s);
    for (const Interval& i : t.stream(stream)) {
      json e = interval_event(t, stream, i);
      e["ts"] = clock.us(i.start_s);
      if (i.kind != IntervalKind::kIssue) e["dur"] = clock.us(i.end_s) - clock.us(i.start_s);
      e["pid"] = opt.pid;
      e["tid"] = stream_tid(s);
      events.push_back(std::move(e));
    }
  }
  for (const StepRecord& st : t.steps) {
    events.push_back(json{{"ph", "X"},
                          {"name", "step"},
                          {"cat", "step"},
                          {"ts", clock.us(st.start_s)},
                          {"dur", clock.us(st.end_s) - clock.us(st.start_s)},
                          {"pid", opt.pid},
                          {"tid", kStepsTid},
                          {"args", {{"step", st.step}}}});
  }
}

json counter(const char* name, double ts_us, uint64_t bytes, int pid) {
  return json{{"ph", "C"},  {"name", name}, {"ts", ts_us},
              {"pid", pid}, {"tid", 0},     {"args", {{"bytes", bytes}}}};
}

void add_counters(const Timeline& t, const TraceOptions& opt, Clock clock, json& events) {
  static constexpr const char* kNames[kNumMemories] = {"device_bytes_in_use",
                                                       "pinned_host_bytes_in_use"};
  for (size_t m = 0; m < kNumMemories; ++m) {
    for (const MemorySample& s : t.samples(static_cast<MemoryKind>(m))) {
      events.push_back(counter(kNames[m], clock.us(s.t_s), s.bytes_in_use, opt.pid));
    }
  }
  if (opt.device_capacity_bytes > 0) {
    // Two samples so the capacity shows as a flat line over the whole trace.
    const char* name = "device_capacity_bytes";
    events.push_back(counter(name, clock.us(t.first_s()), opt.device_capacity_bytes, opt.pid));
    events.push_back(counter(name, clock.us(t.last_s()), opt.device_capacity_bytes, opt.pid));
  }
}

}  // namespace

std::string chrome_trace_json(const Timeline& timeline, const TraceOptions& options) {
  json events = json::array();
  Clock clock{timeline.first_s()};
  add_metadata(timeline, options, events);
  add_intervals(timeline, options, clock, events);
  add_counters(timeline, options, clock, events);
  json doc{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  // Node names come from user graphs; replace invalid UTF-8 rather than throw.
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::Status write_chrome_trace(const Recorder& recorder, const TraceOptions& options,
                                const std::string& path) {
  if (path.empty()) {
    return absl::InvalidArgumentError("write_chrome_trace: output path is empty");
  }
  return write_file_atomically(path, chrome_trace_json(recorder.snapshot(), options));
}

}  // namespace lms
