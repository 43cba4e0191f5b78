// Memory statistics of an allocator (device memory or the pinned host pool)
// and the observer hook for its bytes in use. All sizes are bytes.
#pragma once

#include <cstdint>

namespace lms {

// What Device::memory_stats() (device memory) and Device::host_stats()
// (pinned host pool) report.
struct AllocatorStats {
  uint64_t capacity_bytes = 0;
  uint64_t alignment_bytes = 0;     // every allocation rounds up to a multiple
  uint64_t bytes_in_use = 0;        // sum of rounded sizes of live allocations
  uint64_t peak_bytes_in_use = 0;   // since creation or reset_peak()
  uint64_t largest_free_chunk = 0;  // bytes
  uint64_t num_allocs = 0;          // live allocations
  uint64_t total_allocs = 0;        // allocations ever made
  // 1 - largest_free_chunk / free bytes (0 when no free bytes): how scattered
  // the free space is.
  double fragmentation = 0;
};

// Called after every allocate/deallocate with the new bytes in use; lets the
// runtime forward memory counters to a profiler without this layer knowing it.
class AllocationObserver {
 public:
  virtual ~AllocationObserver() = default;
  virtual void on_allocation_change(int64_t delta_bytes, uint64_t bytes_in_use) = 0;
};

}  // namespace lms
