// Recorder: an EventSink that keeps every event in memory, compactly, for the
// Chrome trace writer, the summary and the memory plot.
//
//   lms::Recorder rec;                       // inject &rec into the executor
//   ... run steps ...
//   lms::Timeline t = rec.snapshot();        // consistent copy, any thread
//   LMS_RETURN_IF_ERROR(lms::write_chrome_trace(rec, {}, "trace.json"));
//   std::cout << lms::format_summary(lms::summarize(rec));
//
// Thread-safe. Recording sits on the executor's hot path, so each call takes
// one mutex, interns its strings (node, op, tensor and reason names repeat
// every step) into 32-bit ids, and appends a fixed-size record to a
// pre-reserved vector (an Interval is 40 bytes, a MemorySample 16). Memory
// grows with the events recorded; clear() between profiled windows of a long
// run. Measured cost: bench/profiler_bench.cc.
// Events with a non-finite time, an end before their start, or an unknown
// stream / memory kind are dropped and counted (dropped_events()); the sink
// interface returns void, so that is the only way to report them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "lms/profiler/event_sink.h"

namespace lms {

namespace recorder_internal {
// Transparent hashing so interning looks up a std::string_view without
// building a std::string (absl::string_view is not std::string_view here).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct StringEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};
}  // namespace recorder_internal

inline constexpr size_t kNumStreams = 5;   // StreamKind values
inline constexpr size_t kNumMemories = 2;  // MemoryKind values

// kStall: a stream blocked on a copy (on_stall, Note [Stall]); kHostWait:
// the host thread blocked in a device call (on_host_wait), always on the
// host stream; kIssue: the instant the host issued a node (on_issue,
// start_s == end_s), on the host stream.
enum class IntervalKind : uint8_t { kNode = 0, kCopy = 1, kStall = 2, kHostWait = 3, kIssue = 4 };

// One node, copy, stall or host wait on a stream. Strings are ids into
// Timeline::strings.
struct Interval {
  double start_s = 0;
  double end_s = 0;
  uint64_t bytes = 0;   // copies only
  uint32_t name = 0;    // node name (node, stall, host wait, issue) or tensor name (copy)
  uint32_t detail = 0;  // op (node, issue), reason (stall, host wait), empty (copy)
  IntervalKind kind = IntervalKind::kNode;

  double duration_s() const { return end_s - start_s; }
};

struct MemorySample {
  double t_s = 0;
  uint64_t bytes_in_use = 0;
};

struct StepRecord {
  int64_t step = 0;
  double start_s = 0;
  double end_s = 0;
};

// An immutable copy of everything a Recorder held at one moment. Intervals
// keep the order each stream reported them; memory samples are sorted by time.
struct Timeline {
  std::array<std::vector<Interval>, kNumStreams> intervals;    // by StreamKind
  std::array<std::vector<MemorySample>, kNumMemories> memory;  // by MemoryKind
  std::vector<StepRecord> steps;
  std::vector<std::string> strings;  // id -> text; id 0 is ""

  const std::vector<Interval>& stream(StreamKind s) const {
    return intervals[static_cast<size_t>(s)];
  }
  const std::vector<MemorySample>& samples(MemoryKind m) const {
    return memory[static_cast<size_t>(m)];
  }
  std::string_view str(uint32_t id) const {
    return id < strings.size() ? std::string_view(strings[id]) : std::string_view();
  }
  bool empty() const;
  // Earliest and latest time of any event; {0, 0} when empty.
  double first_s() const;
  double last_s() const;
};

class Recorder : public EventSink {
 public:
  // `reserve_per_stream` records are reserved per stream and per memory kind
  // up front (and again after clear()) so recording rarely reallocates.
  explicit Recorder(size_t reserve_per_stream = 1 << 14);
  // Out of line, so that programs using lms need no link to Abseil's
  // synchronization library.
  ~Recorder() override;

  void on_node(StreamKind stream, std::string_view node, std::string_view op, double start_s,
               double end_s) override;
  void on_copy(StreamKind stream, std::string_view tensor, uint64_t bytes, double start_s,
               double end_s) override;
  void on_memory(MemoryKind memory, uint64_t bytes_in_use, double t_s) override;
  void on_stall(StreamKind stream, std::string_view reason, std::string_view node, double start_s,
                double end_s) override;
  void on_host_wait(std::string_view reason, std::string_view node, double start_s,
                    double end_s) override;
  void on_issue(std::string_view node, std::string_view op, double t_s) override;
  void on_step(int64_t step, double start_s, double end_s) override;

  // A consistent copy of all events recorded so far (safe while recording).
  Timeline snapshot() const;
  // Events accepted so far (intervals + memory samples + steps).
  size_t event_count() const;
  // Events rejected for a bad time, stream or memory kind.
  size_t dropped_events() const;
  // Forgets all events and strings; keeps the reservation.
  void clear();

 private:
  bool valid_interval(StreamKind stream, double start_s, double end_s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t intern(std::string_view text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void reset() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t reserve_per_stream_;
  // Taken with a lock that keeps it visible to ThreadSanitizer (Debian's
  // Abseil is not instrumented; Note [TSan and absl::Mutex]).
  mutable absl::Mutex mu_;
  std::array<std::vector<Interval>, kNumStreams> intervals_ ABSL_GUARDED_BY(mu_);
  std::array<std::vector<MemorySample>, kNumMemories> memory_ ABSL_GUARDED_BY(mu_);
  std::vector<StepRecord> steps_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> strings_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t, recorder_internal::StringHash,
                      recorder_internal::StringEq>
      string_ids_ ABSL_GUARDED_BY(mu_);
  size_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lms
