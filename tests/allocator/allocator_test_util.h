// Shared by the allocator tests: fake sub-allocators and the property checks
// run after every scenario (after ggml-alloc's tests: no overlap, everything
// inside the region and aligned, accounting exact, free space coalesces back
// into one chunk).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

#include "allocator/bfc_allocator.h"

namespace lms::testing {

// What a fake sub-allocator saw; outlives the sub-allocator, which the
// allocator owns.
struct SubAllocatorLog {
  int alloc_calls = 0;
  int free_calls = 0;
  uint64_t alloc_bytes = 0;
  void* freed_base = nullptr;
  uint64_t freed_bytes = 0;
};

// Hands out a fake address range and never touches it: the allocator must
// never dereference the memory it manages (a dereference would fault).
class FakeSubAllocator : public SubAllocator {
 public:
  static constexpr uintptr_t kDefaultBase = uintptr_t{0x7e0000000000};
  FakeSubAllocator(SubAllocatorLog* log, uintptr_t base = kDefaultBase, bool locked = false)
      : log_(log), base_(base), locked_(locked) {}
  void* alloc(uint64_t bytes) override {
    ++log_->alloc_calls;
    log_->alloc_bytes = bytes;
    return reinterpret_cast<void*>(base_);
  }
  void free(void* base, uint64_t bytes) override {
    ++log_->free_calls;
    log_->freed_base = base;
    log_->freed_bytes = bytes;
  }
  bool pages_locked() const override { return locked_; }

 private:
  SubAllocatorLog* log_;
  uintptr_t base_;
  bool locked_;
};

// Always fails. The "fuse" turns a retry loop in the allocator (which would
// hang) into a test failure.
class FailingSubAllocator : public SubAllocator {
 public:
  static constexpr int kFuse = 3;
  explicit FailingSubAllocator(SubAllocatorLog* log) : log_(log) {}
  void* alloc(uint64_t) override {
    if (++log_->alloc_calls > kFuse) ADD_FAILURE() << "allocator keeps retrying a failing alloc";
    return nullptr;
  }
  void free(void*, uint64_t) override { ++log_->free_calls; }

 private:
  SubAllocatorLog* log_;
};

// Live blocks as the test sees them: address -> requested bytes.
using LiveBlocks = std::map<uintptr_t, uint64_t>;

// Properties that hold in every state. `A` is BfcAllocator or PinnedHostPool.
template <typename A>
void expect_allocator_properties(const A& a, uint64_t alignment, const LiveBlocks& live) {
  const AllocatorStats s = a.stats();
  const auto base = reinterpret_cast<uintptr_t>(a.base());
  EXPECT_EQ(base % alignment, 0u) << "region base not aligned";
  uint64_t sum_rounded = 0;
  uintptr_t prev_end = base;
  for (const auto& [addr, bytes] : live) {
    const uint64_t rounded = BfcAllocator::rounded_size(bytes, alignment);
    EXPECT_EQ(addr % alignment, 0u) << "block " << addr << " misaligned";
    EXPECT_GE(addr, prev_end) << "block " << addr << " overlaps the block before it";
    EXPECT_LE(addr - base + rounded, s.capacity_bytes) << "block " << addr << " outside region";
    prev_end = addr + rounded;
    sum_rounded += rounded;
  }
  EXPECT_EQ(s.bytes_in_use, sum_rounded);
  EXPECT_EQ(s.num_allocs, live.size());
  EXPECT_LE(s.bytes_in_use, s.peak_bytes_in_use);
  EXPECT_LE(s.peak_bytes_in_use, s.capacity_bytes);
  EXPECT_LE(s.largest_free_chunk, s.capacity_bytes - s.bytes_in_use);
  EXPECT_GE(s.fragmentation, 0.0);
  EXPECT_LT(s.fragmentation, 1.0);
  EXPECT_GE(s.total_allocs, s.num_allocs);
}

// Frees every live block; then the free space must have coalesced into one
// chunk of the full capacity, which a single allocation can take whole.
template <typename A>
void drain_and_expect_coalesced(A& a, LiveBlocks& live) {
  for (const auto& [addr, bytes] : live) a.deallocate(reinterpret_cast<void*>(addr));
  live.clear();
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.num_allocs, 0u);
  EXPECT_EQ(s.largest_free_chunk, s.capacity_bytes) << "free space did not coalesce";
  EXPECT_EQ(s.fragmentation, 0.0);
  auto whole = a.allocate(s.capacity_bytes);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, a.base());
  a.deallocate(*whole);
}

// Both of the above: what every scenario ends with.
template <typename A>
void check_all_properties(A& a, uint64_t alignment, LiveBlocks& live) {
  expect_allocator_properties(a, alignment, live);
  drain_and_expect_coalesced(a, live);
}

}  // namespace lms::testing
