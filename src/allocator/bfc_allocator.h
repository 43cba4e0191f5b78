// BFC (best-fit with coalescing) allocator over one region of fixed capacity,
// after TensorFlow's bfc_allocator: free chunks are kept in size bins; an
// allocation takes the smallest free chunk that fits (splitting off the rest)
// and a free merges the chunk with free neighbours. Assumes single-region
// memory obtained up front from an injected SubAllocator; thread-safe.
//
//   auto alloc = BfcAllocator::create(std::make_unique<HeapSubAllocator>(),
//                                     {.capacity_bytes = 256 << 20});
//   LMS_ASSIGN_OR_RETURN(void* p, (*alloc)->allocate(1000));  // 1024 bytes used
//   (*alloc)->deallocate(p);
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lms/memory_stats.h"

namespace lms {

// Provides the physical memory the allocator carves. Tests inject fakes that
// hand out addresses without touching memory.
class SubAllocator {
 public:
  virtual ~SubAllocator() = default;
  // Returns the base of a region of `bytes` aligned to at least 4096, or null.
  virtual void* alloc(uint64_t bytes) = 0;
  virtual void free(void* base, uint64_t bytes) = 0;
  // Whether the memory handed out is page-locked (pinned); false unless the
  // implementation says so.
  virtual bool pages_locked() const { return false; }
};

// Heap memory (aligned_alloc); with `lock_pages`, also mlock()s the region
// where the process may (best effort: a refused mlock is not an error).
class HeapSubAllocator : public SubAllocator {
 public:
  explicit HeapSubAllocator(bool lock_pages = false) : lock_pages_(lock_pages) {}
  void* alloc(uint64_t bytes) override;
  void free(void* base, uint64_t bytes) override;
  // True once a region was mlock()ed successfully.
  bool pages_locked() const override { return pages_locked_; }

 private:
  bool lock_pages_;
  bool pages_locked_ = false;
};

class BfcAllocator {
 public:
  struct Options {
    uint64_t capacity_bytes = 0;  // region size, taken from the sub-allocator up front
    uint64_t alignment = 256;     // bytes; a power of two; every size rounds up to it
    std::string name = "device";  // used in error messages ("device", "pinned host")
    // Last sentence of the out-of-memory message: what the user can do. Empty
    // for device memory: the executor knows the situation (LMS on or off, a
    // budget set or not) and adds the hint that matches it.
    std::string oom_hint;
  };

  // InvalidArgument for a capacity below one alignment unit or an alignment
  // that is not a power of two in [1, 1 GiB]; ResourceExhausted if the
  // sub-allocator cannot provide the region. A capacity that is not a multiple
  // of the alignment is rounded down to one (stats().capacity_bytes says so).
  static absl::StatusOr<std::unique_ptr<BfcAllocator>> create(std::unique_ptr<SubAllocator> sub,
                                                              Options options);
  ~BfcAllocator();

  // Returns an `alignment`-aligned block of at least `bytes` (0 is allowed and
  // gives a distinct alignment-sized block). ResourceExhausted when no free
  // chunk fits, with requested, capacity, in use, free, largest free chunk and
  // a hint, in the manner of PyTorch's caching allocator.
  absl::StatusOr<void*> allocate(uint64_t bytes);
  // `ptr` must come from allocate() and not be freed yet (LMS_CHECK otherwise);
  // null is a no-op, as for free().
  void deallocate(void* ptr);

  // Size in bytes an allocation of `bytes` occupies: lms::rounded_size
  // (common/align.h), the rule the swap planner's exact accounting shares:
  // rounded up to alignment, minimum one alignment unit, saturating at the
  // largest multiple of `alignment` instead of overflowing; an alignment of 0
  // counts as 1.
  static uint64_t rounded_size(uint64_t bytes, uint64_t alignment = 256);

  AllocatorStats stats() const;
  void reset_peak();
  // Nullable, not owned. Called with the allocator's lock held, so callbacks
  // arrive in the order of the operations; the observer must not call back
  // into this allocator.
  void set_observer(AllocationObserver* observer);
  const Options& options() const;
  void* base() const;  // start of the region
  // Whether `ptr` lies inside the region [base(), base() + capacity).
  bool contains(const void* ptr) const;

 private:
  class Impl;
  explicit BfcAllocator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lms
