// An EventSink that sums the stall the device reports on the compute stream
// and forwards every event to the user's sink. Note [Stall]: stall is the
// compute stream blocked on an event recorded on a copy stream (a swap-in
// not yet arrived, a swap-out still reading memory the schedule releases,
// the commit's wait for the copies); the devices report exactly those waits
// as on_stall(kCompute, ...), so the sum is StepResult::stall_s. Host waits
// (on_host_wait, from the executor) are forwarded, not counted.
//
// It also draws device memory over device time: with static placement
// (Note [Step layout]) the allocator sees no change inside a step, so when
// a node starts on the compute stream, or a swap-in's copy on the H2D
// stream, the counter forwards on_memory(kDevice) with the planned bytes in
// use at that node's position, stamped with the device's start time.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "lms/profiler/event_sink.h"

namespace lms {

class StallCounter : public EventSink {
 public:
  explicit StallCounter(EventSink* next) : next_(next) {}
  void reset() { compute_stall_ns_.store(0); }
  // Planned device bytes by compute node name and by swap-in output name;
  // both outlive the counter's use (nullable: no memory counter).
  void set_memory_by_position(const absl::flat_hash_map<std::string, uint64_t>* by_node,
                              const absl::flat_hash_map<std::string, uint64_t>* by_swap_in) {
    by_node_ = by_node;
    by_swap_in_ = by_swap_in;
  }
  double compute_stall_s() const { return static_cast<double>(compute_stall_ns_.load()) * 1e-9; }

  void on_node(StreamKind stream, std::string_view node, std::string_view op, double start_s,
               double end_s) override {
    if (next_ == nullptr) return;
    if (stream == StreamKind::kCompute) memory_at(by_node_, node, start_s);
    next_->on_node(stream, node, op, start_s, end_s);
  }
  void on_copy(StreamKind stream, std::string_view tensor, uint64_t bytes, double start_s,
               double end_s) override {
    if (next_ == nullptr) return;
    if (stream == StreamKind::kH2D) memory_at(by_swap_in_, tensor, start_s);
    next_->on_copy(stream, tensor, bytes, start_s, end_s);
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
  void on_issue(std::string_view node, std::string_view op, double t_s) override {
    if (next_) next_->on_issue(node, op, t_s);
  }
  // Spans only feed the user's sink (and its memory counter); the stall sum
  // needs none.
  bool wants_spans() const override { return next_ != nullptr && next_->wants_spans(); }
  bool wants_live_spans() const override { return next_ != nullptr && next_->wants_live_spans(); }
  void on_step(int64_t step, double start_s, double end_s) override {
    if (next_) next_->on_step(step, start_s, end_s);
  }

 private:
  void memory_at(const absl::flat_hash_map<std::string, uint64_t>* bytes, std::string_view name,
                 double t_s) {
    if (bytes == nullptr) return;
    auto it = bytes->find(absl::string_view(name.data(), name.size()));
    if (it != bytes->end()) next_->on_memory(MemoryKind::kDevice, it->second, t_s);
  }

  EventSink* next_;
  const absl::flat_hash_map<std::string, uint64_t>* by_node_ = nullptr;
  const absl::flat_hash_map<std::string, uint64_t>* by_swap_in_ = nullptr;
  std::atomic<int64_t> compute_stall_ns_{0};
};

}  // namespace lms
