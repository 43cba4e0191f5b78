// The memory half of a device, shared by both backends: device memory is one
// region of `capacity_bytes` carved by a BfcAllocator ("device"), pinned host
// memory a second BfcAllocator ("pinned host"); each reports its changes
// through a MemoryTee to the user's observer and to the device's event sink.
// Only the regions differ by backend, so each passes its sub-allocators in
// (CPU: anonymous mappings; CUDA: cudaMalloc and cudaHostAlloc).
//
//   LMS_ASSIGN_OR_RETURN(memory_, DeviceMemory::create(
//       {.device = std::make_unique<CudaSubAllocator>(ordinal), .device_bytes = capacity,
//        .host = std::make_unique<PinnedSubAllocator>(ordinal), .host_bytes = pool},
//       &sink_));
//   LMS_ASSIGN_OR_RETURN(void* d, memory_->allocate(bytes));
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "allocator/bfc_allocator.h"
#include "backend/memory_tee.h"
#include "lms/device.h"
#include "lms/profiler/event_sink.h"

namespace lms {

class DeviceMemory {
 public:
  struct Regions {
    std::unique_ptr<SubAllocator> device;
    uint64_t device_bytes = 0;
    std::unique_ptr<SubAllocator> host;  // page-locked where it can be
    uint64_t host_bytes = 0;
  };

  // `sink` is the device's event-sink slot, read at every change (on_memory);
  // not owned, must outlive this. Errors: BfcAllocator::create's
  // (InvalidArgument for a region below one alignment unit, ResourceExhausted
  // when a region cannot be obtained).
  static absl::StatusOr<std::unique_ptr<DeviceMemory>> create(Regions regions,
                                                              const std::atomic<EventSink*>* sink);
  // Detaches the tees; the regions go back to their sub-allocators.
  ~DeviceMemory();

  absl::StatusOr<void*> allocate(uint64_t bytes) { return device_->allocate(bytes); }
  void deallocate(void* ptr);  // null is a no-op
  AllocatorStats stats() const { return device_->stats(); }
  // Both pools' peaks to their bytes in use (Device::reset_peak_memory).
  void reset_peak() {
    device_->reset_peak();
    host_->reset_peak();
  }
  void set_observer(AllocationObserver* observer) { device_tee_.set_user(observer); }

  absl::StatusOr<void*> allocate_host(uint64_t bytes) { return host_->allocate(bytes); }
  void deallocate_host(void* ptr);  // null is a no-op
  AllocatorStats host_stats() const { return host_->stats(); }
  void set_host_observer(AllocationObserver* observer) { host_tee_.set_user(observer); }
  // Whether the host sub-allocator really locked the pool's pages.
  bool host_pages_locked() const { return host_pages_locked_; }

  // The device region: [base(), base() + capacity_bytes()).
  const void* base() const { return device_->base(); }
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  // Whether [ptr, ptr + bytes) lies inside the device region.
  bool contains(const void* ptr, uint64_t bytes) const;

 private:
  explicit DeviceMemory(const std::atomic<EventSink*>* sink)
      : device_tee_(MemoryKind::kDevice, sink), host_tee_(MemoryKind::kPinnedHost, sink) {}

  MemoryTee device_tee_;
  MemoryTee host_tee_;
  std::unique_ptr<BfcAllocator> device_;
  std::unique_ptr<BfcAllocator> host_;
  uint64_t capacity_bytes_ = 0;
  bool host_pages_locked_ = false;
};

// The on_stall reason of a compute-stream wait on an event recorded on
// `stream` (Note [Stall]): "wait for d2h copy", "wait for h2d copy", "wait
// for all-reduce", otherwise "event wait".
const char* stall_reason(StreamKind stream);

}  // namespace lms
