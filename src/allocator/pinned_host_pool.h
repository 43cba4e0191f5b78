// Pinned (page-locked) host memory pool with its own limit: the host side of
// every swap-out / swap-in copy. A thin owner of a BfcAllocator whose region
// comes from a page-locking sub-allocator (mlock on the CPU backend,
// cudaHostAlloc on the CUDA backend, injected by that backend).
//
//   LMS_ASSIGN_OR_RETURN(auto pool, PinnedHostPool::create({.limit_bytes = 1 << 30}));
//   LMS_ASSIGN_OR_RETURN(void* host, pool->allocate(tensor_bytes));
//   ...  // D2H copy into `host`, later H2D copy back
//   pool->deallocate(host);
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "allocator/bfc_allocator.h"

namespace lms {

// Heap memory that is page-locked where the process may (best effort; see
// pages_locked()).
class HostSubAllocator : public HeapSubAllocator {
 public:
  HostSubAllocator() : HeapSubAllocator(/*lock_pages=*/true) {}
};

class PinnedHostPool {
 public:
  struct Options {
    uint64_t limit_bytes = 0;  // pool capacity (host_memory_limit), taken up front
    uint64_t alignment = 256;  // bytes; a power of two
  };

  // Pool over a HostSubAllocator. InvalidArgument for a zero limit or a bad
  // alignment; ResourceExhausted if the host cannot provide `limit_bytes`.
  static absl::StatusOr<std::unique_ptr<PinnedHostPool>> create(Options options);
  // Same over an injected sub-allocator (e.g. one calling cudaHostAlloc).
  static absl::StatusOr<std::unique_ptr<PinnedHostPool>> create(Options options,
                                                                std::unique_ptr<SubAllocator> sub);

  // An `alignment`-aligned host block of at least `bytes`. ResourceExhausted
  // naming "pinned host" memory when the pool limit would be exceeded.
  absl::StatusOr<void*> allocate(uint64_t bytes) { return bfc_->allocate(bytes); }
  // `ptr` must come from allocate() and not be freed yet; null is a no-op.
  void deallocate(void* ptr) { bfc_->deallocate(ptr); }

  AllocatorStats stats() const { return bfc_->stats(); }
  void reset_peak() { bfc_->reset_peak(); }
  // Nullable, not owned; same contract as BfcAllocator::set_observer.
  void set_observer(AllocationObserver* observer) { bfc_->set_observer(observer); }
  const Options& options() const { return options_; }
  // Whether the sub-allocator managed to page-lock the pool's region.
  bool pages_locked() const { return pages_locked_; }
  void* base() const { return bfc_->base(); }  // start of the region
  // Whether `ptr` lies inside the pool's region.
  bool contains(const void* ptr) const { return bfc_->contains(ptr); }

 private:
  PinnedHostPool(Options options, bool pages_locked, std::unique_ptr<BfcAllocator> bfc)
      : options_(options), pages_locked_(pages_locked), bfc_(std::move(bfc)) {}

  Options options_;
  bool pages_locked_;
  std::unique_ptr<BfcAllocator> bfc_;
};

}  // namespace lms
