#include "lms/profiler/recorder.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/mutex.h"

namespace lms {
namespace {

bool finite(double t) { return std::isfinite(t); }

}  // namespace

bool Timeline::empty() const {
  for (const auto& v : intervals) {
    if (!v.empty()) return false;
  }
  for (const auto& v : memory) {
    if (!v.empty()) return false;
  }
  return steps.empty();
}

double Timeline::first_s() const {
  if (empty()) return 0;
  double t = std::numeric_limits<double>::infinity();
  for (const auto& v : intervals) {
    for (const Interval& i : v) t = std::min(t, i.start_s);
  }
  for (const auto& v : memory) {
    for (const MemorySample& s : v) t = std::min(t, s.t_s);
  }
  for (const StepRecord& s : steps) t = std::min(t, s.start_s);
  return t;
}

double Timeline::last_s() const {
  if (empty()) return 0;
  double t = -std::numeric_limits<double>::infinity();
  for (const auto& v : intervals) {
    for (const Interval& i : v) t = std::max(t, i.end_s);
  }
  for (const auto& v : memory) {
    for (const MemorySample& s : v) t = std::max(t, s.t_s);
  }
  for (const StepRecord& s : steps) t = std::max(t, s.end_s);
  return t;
}

Recorder::Recorder(size_t reserve_per_stream) : reserve_per_stream_(reserve_per_stream) {
  MutexLock lock(&mu_);
  reset();
}

Recorder::~Recorder() = default;

void Recorder::reset() {
  for (auto& v : intervals_) {
    v.clear();
    v.reserve(reserve_per_stream_);
  }
  for (auto& v : memory_) {
    v.clear();
    v.reserve(reserve_per_stream_);
  }
  steps_.clear();
  strings_.clear();
  string_ids_.clear();
  strings_.emplace_back();  // id 0 is the empty string
  string_ids_.emplace(std::string(), 0);
  dropped_ = 0;
}

bool Recorder::valid_interval(StreamKind stream, double start_s, double end_s) {
  bool ok = static_cast<size_t>(stream) < kNumStreams && finite(start_s) && finite(end_s) &&
            end_s >= start_s;
  if (!ok) ++dropped_;
  return ok;
}

uint32_t Recorder::intern(std::string_view text) {
  auto it = string_ids_.find(text);
  if (it != string_ids_.end()) return it->second;
  auto id = static_cast<uint32_t>(strings_.size());
  strings_.emplace_back(text);
  string_ids_.emplace(std::string(text), id);
  return id;
}

void Recorder::on_node(StreamKind stream, std::string_view node, std::string_view op,
                       double start_s, double end_s) {
  MutexLock lock(&mu_);
  if (!valid_interval(stream, start_s, end_s)) return;
  intervals_[static_cast<size_t>(stream)].push_back(
      Interval{start_s, end_s, 0, intern(node), intern(op), IntervalKind::kNode});
}

void Recorder::on_copy(StreamKind stream, std::string_view tensor, uint64_t bytes, double start_s,
                       double end_s) {
  MutexLock lock(&mu_);
  if (!valid_interval(stream, start_s, end_s)) return;
  intervals_[static_cast<size_t>(stream)].push_back(
      Interval{start_s, end_s, bytes, intern(tensor), 0, IntervalKind::kCopy});
}

void Recorder::on_memory(MemoryKind memory, uint64_t bytes_in_use, double t_s) {
  MutexLock lock(&mu_);
  if (static_cast<size_t>(memory) >= kNumMemories || !finite(t_s)) {
    ++dropped_;
    return;
  }
  memory_[static_cast<size_t>(memory)].push_back(MemorySample{t_s, bytes_in_use});
}

void Recorder::on_stall(StreamKind stream, std::string_view reason, std::string_view node,
                        double start_s, double end_s) {
  MutexLock lock(&mu_);
  if (!valid_interval(stream, start_s, end_s)) return;
  intervals_[static_cast<size_t>(stream)].push_back(
      Interval{start_s, end_s, 0, intern(node), intern(reason), IntervalKind::kStall});
}

void Recorder::on_host_wait(std::string_view reason, std::string_view node, double start_s,
                            double end_s) {
  MutexLock lock(&mu_);
  if (!valid_interval(StreamKind::kHost, start_s, end_s)) return;
  intervals_[static_cast<size_t>(StreamKind::kHost)].push_back(
      Interval{start_s, end_s, 0, intern(node), intern(reason), IntervalKind::kHostWait});
}

void Recorder::on_issue(std::string_view node, std::string_view op, double t_s) {
  MutexLock lock(&mu_);
  if (!valid_interval(StreamKind::kHost, t_s, t_s)) return;
  intervals_[static_cast<size_t>(StreamKind::kHost)].push_back(
      Interval{t_s, t_s, 0, intern(node), intern(op), IntervalKind::kIssue});
}

void Recorder::on_step(int64_t step, double start_s, double end_s) {
  MutexLock lock(&mu_);
  if (!finite(start_s) || !finite(end_s) || end_s < start_s) {
    ++dropped_;
    return;
  }
  steps_.push_back(StepRecord{step, start_s, end_s});
}

Timeline Recorder::snapshot() const {
  MutexLock lock(&mu_);
  Timeline t;
  t.intervals = intervals_;
  t.memory = memory_;
  // Samples come from several threads; order them by time for the writers
  // (stable, so equal times keep the order the allocator reported them).
  for (auto& v : t.memory) {
    std::stable_sort(v.begin(), v.end(),
                     [](const MemorySample& a, const MemorySample& b) { return a.t_s < b.t_s; });
  }
  t.steps = steps_;
  t.strings = strings_;
  return t;
}

size_t Recorder::event_count() const {
  MutexLock lock(&mu_);
  size_t n = steps_.size();
  for (const auto& v : intervals_) n += v.size();
  for (const auto& v : memory_) n += v.size();
  return n;
}

size_t Recorder::dropped_events() const {
  MutexLock lock(&mu_);
  return dropped_;
}

void Recorder::clear() {
  MutexLock lock(&mu_);
  reset();
}

}  // namespace lms
