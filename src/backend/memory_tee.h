// Shared by the device backends: forwards an allocator's changes to the
// user's AllocationObserver and, as on_memory, to the device's event sink.
// Both targets can change while other threads allocate, hence the atomics.
#pragma once

#include <atomic>
#include <cstdint>

#include "allocator/bfc_allocator.h"
#include "lms/profiler/event_sink.h"

namespace lms {

class MemoryTee : public AllocationObserver {
 public:
  MemoryTee(MemoryKind kind, const std::atomic<EventSink*>* sink) : kind_(kind), sink_(sink) {}
  void set_user(AllocationObserver* observer) { user_.store(observer); }
  void on_allocation_change(int64_t delta_bytes, uint64_t bytes_in_use) override {
    if (AllocationObserver* user = user_.load()) {
      user->on_allocation_change(delta_bytes, bytes_in_use);
    }
    if (EventSink* sink = sink_->load()) sink->on_memory(kind_, bytes_in_use, now_s());
  }

 private:
  const MemoryKind kind_;
  const std::atomic<EventSink*>* sink_;
  std::atomic<AllocationObserver*> user_{nullptr};
};

}  // namespace lms
