// An EventSink that sums the stall the device reports on the compute stream
// and forwards every event to the user's sink. Note [Stall] (lms/session.h):
// stall is the compute stream blocked on an event recorded on a copy stream
// (a swap-in not yet arrived, a swap-out still reading memory the schedule
// releases, the commit's wait for the copies); the devices report exactly
// those waits as on_stall(kCompute, ...), so the sum is StepResult::stall_s.
// Host waits (on_host_wait, from the executor) are forwarded, not counted.
#pragma once

#include <atomic>
#include <cstdint>

#include "lms/profiler/event_sink.h"

namespace lms {

class StallCounter : public EventSink {
 public:
  explicit StallCounter(EventSink* next) : next_(next) {}
  void reset() { compute_stall_ns_.store(0); }
  double compute_stall_s() const { return static_cast<double>(compute_stall_ns_.load()) * 1e-9; }

  void on_node(StreamKind stream, std::string_view node, std::string_view op, double start_s,
               double end_s) override {
    if (next_) next_->on_node(stream, node, op, start_s, end_s);
  }
  void on_copy(StreamKind stream, std::string_view tensor, uint64_t bytes, double start_s,
               double end_s) override {
    if (next_) next_->on_copy(stream, tensor, bytes, start_s, end_s);
  }
  void on_memory(MemoryKind memory, uint64_t bytes_in_use, double t_s) override {
    if (next_) next_->on_memory(memory, bytes_in_use, t_s);
  }
  void on_stall(StreamKind stream, std::string_view reason, std::string_view node, double start_s,
                double end_s) override {
    if (stream == StreamKind::kCompute) {
      compute_stall_ns_.fetch_add(static_cast<int64_t>((end_s - start_s) * 1e9));
    }
    if (next_) next_->on_stall(stream, reason, node, start_s, end_s);
  }
  void on_host_wait(std::string_view reason, std::string_view node, double start_s,
                    double end_s) override {
    if (next_) next_->on_host_wait(reason, node, start_s, end_s);
  }
  void on_step(int64_t step, double start_s, double end_s) override {
    if (next_) next_->on_step(step, start_s, end_s);
  }

 private:
  EventSink* next_;
  std::atomic<int64_t> compute_stall_ns_{0};
};

}  // namespace lms
