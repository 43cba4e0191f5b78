// An EventSink that sums the stall the device reports on the compute stream
// (waits for swap-ins) and forwards every event to the user's sink.
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
  void on_step(int64_t step, double start_s, double end_s) override {
    if (next_) next_->on_step(step, start_s, end_s);
  }

 private:
  EventSink* next_;
  std::atomic<int64_t> compute_stall_ns_{0};
};

}  // namespace lms
