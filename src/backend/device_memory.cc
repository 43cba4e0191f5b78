#include "backend/device_memory.h"

#include <utility>

#include "lms/status.h"

namespace lms {

absl::StatusOr<std::unique_ptr<DeviceMemory>> DeviceMemory::create(
    Regions regions, const std::atomic<EventSink*>* sink) {
  std::unique_ptr<DeviceMemory> memory(new DeviceMemory(sink));
  LMS_ASSIGN_OR_RETURN(
      memory->device_,
      BfcAllocator::create(std::move(regions.device),
                           {.capacity_bytes = regions.device_bytes, .name = "device"}));
  // The sub-allocator knows whether its pages were locked only once the
  // region is taken, and the allocator owns it from then on.
  const SubAllocator* host_sub = regions.host.get();
  LMS_ASSIGN_OR_RETURN(memory->host_, BfcAllocator::create(std::move(regions.host),
                                                           {.capacity_bytes = regions.host_bytes,
                                                            .name = "pinned host"}));
  memory->host_pages_locked_ = host_sub->pages_locked();
  memory->capacity_bytes_ = memory->device_->stats().capacity_bytes;
  memory->device_->set_observer(&memory->device_tee_);
  memory->host_->set_observer(&memory->host_tee_);
  return memory;
}

DeviceMemory::~DeviceMemory() {
  if (device_) device_->set_observer(nullptr);
  if (host_) host_->set_observer(nullptr);
}

void DeviceMemory::deallocate(void* ptr) {
  if (ptr != nullptr) device_->deallocate(ptr);
}

void DeviceMemory::deallocate_host(void* ptr) {
  if (ptr != nullptr) host_->deallocate(ptr);
}

bool DeviceMemory::contains(const void* ptr, uint64_t bytes) const {
  const auto base = reinterpret_cast<uintptr_t>(device_->base());
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  return p >= base && p - base <= capacity_bytes_ && bytes <= capacity_bytes_ - (p - base);
}

const char* stall_reason(StreamKind stream) {
  switch (stream) {
    case StreamKind::kD2H:
      return "wait for d2h copy";
    case StreamKind::kH2D:
      return "wait for h2d copy";
    case StreamKind::kComm:
      return "wait for all-reduce";
    default:
      return "event wait";
  }
}

}  // namespace lms
