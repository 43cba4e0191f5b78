#include "allocator/bfc_allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/align.h"
#include "common/mutex.h"
#include "lms/status.h"
#include "lms/units.h"

namespace lms {
// A named namespace, not an anonymous one: BfcAllocator::Impl (a class with
// external linkage) holds these types, which GCC rejects from an anonymous
// namespace when a unity build includes this file (-Wsubobject-linkage).
namespace bfc_internal {

// Every SubAllocator hands out regions aligned to at least this.
constexpr uint64_t kSubAllocatorAlignment = 4096;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;

// Bin i holds free chunks of [2^i, 2^(i+1)) alignment units; 64 bins cover
// every 64-bit size.
constexpr int kNumBins = 64;

using ChunkHandle = int32_t;
constexpr ChunkHandle kInvalidChunk = -1;

// A contiguous piece of the region, either handed out or free. Neighbours are
// linked by handle (index into Impl::chunks_) so the chunk table can grow
// without invalidating links.
struct Chunk {
  uint64_t offset = 0;  // from the region base
  uint64_t size = 0;    // bytes, a multiple of the alignment
  ChunkHandle prev = kInvalidChunk;
  ChunkHandle next = kInvalidChunk;
  bool in_use = false;
};

// Free chunks in a bin, ordered by (size, offset): the first entry not below
// (size, 0) is the best fit within the bin, ties going to the lowest address.
struct FreeKey {
  uint64_t size;
  uint64_t offset;
  ChunkHandle handle;
  bool operator<(const FreeKey& other) const {
    return std::tie(size, offset) < std::tie(other.size, other.offset);
  }
};

}  // namespace bfc_internal
using namespace bfc_internal;

uint64_t BfcAllocator::rounded_size(uint64_t bytes, uint64_t alignment) {
  return lms::rounded_size(bytes, alignment);
}

class BfcAllocator::Impl {
 public:
  Impl(std::unique_ptr<SubAllocator> sub, Options options, void* raw, uint64_t raw_bytes,
       char* base, uint64_t capacity);
  ~Impl() { sub_->free(raw_, raw_bytes_); }

  absl::StatusOr<void*> allocate(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void deallocate(void* ptr) ABSL_LOCKS_EXCLUDED(mu_);
  AllocatorStats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  void reset_peak() ABSL_LOCKS_EXCLUDED(mu_);
  void set_observer(AllocationObserver* observer) ABSL_LOCKS_EXCLUDED(mu_);
  const Options& options() const { return options_; }
  void* base() const { return base_; }
  bool contains(const void* ptr) const;

 private:
  ChunkHandle new_chunk() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void delete_chunk(ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int bin_for(uint64_t size) const;
  void insert_free(ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void remove_free(ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ChunkHandle find_best_fit(uint64_t size) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void split_chunk(ChunkHandle h, uint64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void merge_with_next(ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void free_and_maybe_coalesce(ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t largest_free_chunk() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double fragmentation() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status out_of_memory(uint64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void notify(int64_t delta_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<SubAllocator> sub_;
  const Options options_;
  void* const raw_;  // as returned by the sub-allocator
  const uint64_t raw_bytes_;
  char* const base_;  // raw_ aligned up to the alignment
  const uint64_t capacity_;

  mutable absl::Mutex mu_;
  std::vector<Chunk> chunks_ ABSL_GUARDED_BY(mu_);
  std::vector<ChunkHandle> unused_handles_ ABSL_GUARDED_BY(mu_);
  std::array<absl::btree_set<FreeKey>, kNumBins> bins_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, ChunkHandle> in_use_ ABSL_GUARDED_BY(mu_);  // offset -> chunk
  uint64_t bytes_in_use_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t peak_bytes_in_use_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t total_allocs_ ABSL_GUARDED_BY(mu_) = 0;
  AllocationObserver* observer_ ABSL_GUARDED_BY(mu_) = nullptr;
};

BfcAllocator::Impl::Impl(std::unique_ptr<SubAllocator> sub, Options options, void* raw,
                         uint64_t raw_bytes, char* base, uint64_t capacity)
    : sub_(std::move(sub)),
      options_(std::move(options)),
      raw_(raw),
      raw_bytes_(raw_bytes),
      base_(base),
      capacity_(capacity) {
  MutexLock lock(&mu_);
  const ChunkHandle whole = new_chunk();
  chunks_[whole].size = capacity_;
  insert_free(whole);
}

ChunkHandle BfcAllocator::Impl::new_chunk() {
  if (!unused_handles_.empty()) {
    const ChunkHandle h = unused_handles_.back();
    unused_handles_.pop_back();
    chunks_[h] = Chunk{};
    return h;
  }
  LMS_CHECK(chunks_.size() < static_cast<size_t>(std::numeric_limits<ChunkHandle>::max()));
  chunks_.emplace_back();
  return static_cast<ChunkHandle>(chunks_.size() - 1);
}

void BfcAllocator::Impl::delete_chunk(ChunkHandle h) { unused_handles_.push_back(h); }

int BfcAllocator::Impl::bin_for(uint64_t size) const {
  const uint64_t units = std::max<uint64_t>(size / options_.alignment, 1);
  return std::min(static_cast<int>(std::bit_width(units)) - 1, kNumBins - 1);
}

void BfcAllocator::Impl::insert_free(ChunkHandle h) {
  const Chunk& c = chunks_[h];
  LMS_CHECK(!c.in_use);
  bins_[bin_for(c.size)].insert(FreeKey{c.size, c.offset, h});
}

void BfcAllocator::Impl::remove_free(ChunkHandle h) {
  const Chunk& c = chunks_[h];
  const size_t erased = bins_[bin_for(c.size)].erase(FreeKey{c.size, c.offset, h});
  LMS_CHECK(erased == 1);
}

// The smallest free chunk of at least `size` bytes, ties to the lowest offset.
// Bins hold disjoint, increasing size ranges, so the first bin with a fitting
// chunk holds the best one.
ChunkHandle BfcAllocator::Impl::find_best_fit(uint64_t size) const {
  for (int b = bin_for(size); b < kNumBins; ++b) {
    auto it = bins_[b].lower_bound(FreeKey{size, 0, kInvalidChunk});
    if (it != bins_[b].end()) return it->handle;
  }
  return kInvalidChunk;
}

// Cuts the free chunk `h` to `size` bytes; the rest becomes a new free chunk
// right after it. `h` must not be in a bin.
void BfcAllocator::Impl::split_chunk(ChunkHandle h, uint64_t size) {
  const ChunkHandle rest = new_chunk();  // may reallocate chunks_: index afresh below
  Chunk& c = chunks_[h];
  Chunk& r = chunks_[rest];
  r.offset = c.offset + size;
  r.size = c.size - size;
  r.prev = h;
  r.next = c.next;
  if (c.next != kInvalidChunk) chunks_[c.next].prev = rest;
  c.next = rest;
  c.size = size;
  insert_free(rest);
}

// Absorbs the chunk after `h` into `h`; neither may be in a bin.
void BfcAllocator::Impl::merge_with_next(ChunkHandle h) {
  const ChunkHandle n = chunks_[h].next;
  Chunk& c = chunks_[h];
  const Chunk& next = chunks_[n];
  c.size += next.size;
  c.next = next.next;
  if (c.next != kInvalidChunk) chunks_[c.next].prev = h;
  delete_chunk(n);
}

void BfcAllocator::Impl::free_and_maybe_coalesce(ChunkHandle h) {
  chunks_[h].in_use = false;
  const ChunkHandle next = chunks_[h].next;
  if (next != kInvalidChunk && !chunks_[next].in_use) {
    remove_free(next);
    merge_with_next(h);
  }
  const ChunkHandle prev = chunks_[h].prev;
  if (prev != kInvalidChunk && !chunks_[prev].in_use) {
    remove_free(prev);
    merge_with_next(prev);
    h = prev;
  }
  insert_free(h);
}

uint64_t BfcAllocator::Impl::largest_free_chunk() const {
  for (int b = kNumBins - 1; b >= 0; --b) {
    if (!bins_[b].empty()) return bins_[b].rbegin()->size;
  }
  return 0;
}

double BfcAllocator::Impl::fragmentation() const {
  const uint64_t free_bytes = capacity_ - bytes_in_use_;
  if (free_bytes == 0) return 0;
  return 1.0 - static_cast<double>(largest_free_chunk()) / static_cast<double>(free_bytes);
}

absl::Status BfcAllocator::Impl::out_of_memory(uint64_t bytes) const {
  return absl::ResourceExhaustedError(absl::StrFormat(
      "out of %s memory: tried to allocate %s; capacity %s, %s in use by %d allocations, "
      "%s free, largest free chunk %s (fragmentation %.0f%%).%s%s",
      options_.name, format_bytes(bytes), format_bytes(capacity_), format_bytes(bytes_in_use_),
      in_use_.size(), format_bytes(capacity_ - bytes_in_use_), format_bytes(largest_free_chunk()),
      100.0 * fragmentation(), options_.oom_hint.empty() ? "" : " ", options_.oom_hint));
}

void BfcAllocator::Impl::notify(int64_t delta_bytes) {
  if (observer_ != nullptr) observer_->on_allocation_change(delta_bytes, bytes_in_use_);
}

absl::StatusOr<void*> BfcAllocator::Impl::allocate(uint64_t bytes) {
  const uint64_t size = rounded_size(bytes, options_.alignment);
  MutexLock lock(&mu_);
  const ChunkHandle h = size <= capacity_ ? find_best_fit(size) : kInvalidChunk;
  if (h == kInvalidChunk) return out_of_memory(bytes);
  remove_free(h);
  if (chunks_[h].size > size) split_chunk(h, size);
  Chunk& c = chunks_[h];
  c.in_use = true;
  in_use_.emplace(c.offset, h);
  bytes_in_use_ += size;
  peak_bytes_in_use_ = std::max(peak_bytes_in_use_, bytes_in_use_);
  ++total_allocs_;
  notify(static_cast<int64_t>(size));
  return static_cast<void*>(base_ + c.offset);
}

void BfcAllocator::Impl::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  LMS_CHECK(contains(ptr));  // not from this allocator
  const uint64_t offset = static_cast<uint64_t>(static_cast<char*>(ptr) - base_);
  MutexLock lock(&mu_);
  auto it = in_use_.find(offset);
  LMS_CHECK(it != in_use_.end());  // double free, or not a block start
  const ChunkHandle h = it->second;
  in_use_.erase(it);
  const uint64_t size = chunks_[h].size;
  free_and_maybe_coalesce(h);
  bytes_in_use_ -= size;
  notify(-static_cast<int64_t>(size));
}

AllocatorStats BfcAllocator::Impl::stats() const {
  MutexLock lock(&mu_);
  AllocatorStats s;
  s.capacity_bytes = capacity_;
  s.alignment_bytes = options_.alignment;
  s.bytes_in_use = bytes_in_use_;
  s.peak_bytes_in_use = peak_bytes_in_use_;
  s.largest_free_chunk = largest_free_chunk();
  s.num_allocs = in_use_.size();
  s.total_allocs = total_allocs_;
  s.fragmentation = fragmentation();
  return s;
}

void BfcAllocator::Impl::reset_peak() {
  MutexLock lock(&mu_);
  peak_bytes_in_use_ = bytes_in_use_;
}

void BfcAllocator::Impl::set_observer(AllocationObserver* observer) {
  MutexLock lock(&mu_);
  observer_ = observer;
}

bool BfcAllocator::Impl::contains(const void* ptr) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  const auto b = reinterpret_cast<uintptr_t>(base_);
  return p >= b && p - b < capacity_;
}

// ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<BfcAllocator>> BfcAllocator::create(
    std::unique_ptr<SubAllocator> sub, Options options) {
  const uint64_t a = options.alignment;
  if (a == 0 || !std::has_single_bit(a) || a > kMaxAlignment) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s allocator: alignment %d is not allowed; it must be a power of two in [1, %d] bytes",
        options.name, a, kMaxAlignment));
  }
  if (options.capacity_bytes < a) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s allocator: capacity %d bytes is below one alignment unit (%d bytes)",
                        options.name, options.capacity_bytes, a));
  }
  if (sub == nullptr) {
    return absl::InvalidArgumentError(options.name + " allocator: sub-allocator is null");
  }
  const uint64_t capacity = align_down(options.capacity_bytes, a);
  // The sub-allocator only promises 4096-byte alignment: ask for slack to
  // align the base up when more is needed.
  const uint64_t slack = a > kSubAllocatorAlignment ? a : 0;
  if (capacity > std::numeric_limits<uint64_t>::max() - slack) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s allocator: capacity %d bytes is too large", options.name, options.capacity_bytes));
  }
  const uint64_t raw_bytes = capacity + slack;
  void* raw = sub->alloc(raw_bytes);
  if (raw == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("out of %s memory: could not obtain the %s region of %s from the system",
                        options.name, options.name, format_bytes(raw_bytes)));
  }
  const uintptr_t raw_addr = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t base_addr = align_up(raw_addr, a);
  if (base_addr + capacity > raw_addr + raw_bytes) {
    sub->free(raw, raw_bytes);
    return absl::InternalError(
        absl::StrFormat("%s allocator: sub-allocator returned %p, not aligned to %d bytes",
                        options.name, raw, kSubAllocatorAlignment));
  }
  auto impl = std::make_unique<Impl>(std::move(sub), std::move(options), raw, raw_bytes,
                                     reinterpret_cast<char*>(base_addr), capacity);
  return std::unique_ptr<BfcAllocator>(new BfcAllocator(std::move(impl)));
}

BfcAllocator::BfcAllocator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BfcAllocator::~BfcAllocator() = default;

absl::StatusOr<void*> BfcAllocator::allocate(uint64_t bytes) { return impl_->allocate(bytes); }
void BfcAllocator::deallocate(void* ptr) { impl_->deallocate(ptr); }
AllocatorStats BfcAllocator::stats() const { return impl_->stats(); }
void BfcAllocator::reset_peak() { impl_->reset_peak(); }
void BfcAllocator::set_observer(AllocationObserver* observer) { impl_->set_observer(observer); }
const BfcAllocator::Options& BfcAllocator::options() const { return impl_->options(); }
void* BfcAllocator::base() const { return impl_->base(); }
bool BfcAllocator::contains(const void* ptr) const { return impl_->contains(ptr); }

// ---------------------------------------------------------------------------

void* HeapSubAllocator::alloc(uint64_t bytes) {
  if (bytes == 0 || bytes > std::numeric_limits<uint64_t>::max() - kSubAllocatorAlignment) {
    return nullptr;
  }
  // aligned_alloc wants the size to be a multiple of the alignment.
  const uint64_t padded = align_up(bytes, kSubAllocatorAlignment);
  void* base = std::aligned_alloc(kSubAllocatorAlignment, padded);
  if (base != nullptr && lock_pages_) {
    // Best effort: RLIMIT_MEMLOCK often refuses large regions; the memory is
    // still usable, only not pinned.
    pages_locked_ = mlock(base, padded) == 0;
  }
  return base;
}

void HeapSubAllocator::free(void* base, uint64_t bytes) {
  if (base == nullptr) return;
  if (pages_locked_) munlock(base, align_up(bytes, kSubAllocatorAlignment));
  std::free(base);
}

}  // namespace lms
