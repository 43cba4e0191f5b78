#include "allocator/bfc_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "allocator_test_util.h"
#include "lms/units.h"

namespace lms {
namespace {

using ::lms::testing::check_all_properties;
using ::lms::testing::expect_allocator_properties;
using ::lms::testing::FailingSubAllocator;
using ::lms::testing::FakeSubAllocator;
using ::lms::testing::LiveBlocks;
using ::lms::testing::SubAllocatorLog;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

// Every scenario builds its allocator through make() and ends, in TearDown,
// with the shared property checks and a drain that must coalesce everything.
class BfcTest : public ::testing::Test {
 protected:
  void make(uint64_t capacity, uint64_t alignment = 256,
            uintptr_t fake_base = FakeSubAllocator::kDefaultBase) {
    alignment_ = alignment;
    auto a = BfcAllocator::create(std::make_unique<FakeSubAllocator>(&log_, fake_base),
                                  {.capacity_bytes = capacity, .alignment = alignment});
    ASSERT_TRUE(a.ok()) << a.status();
    alloc_ = std::move(*a);
  }
  void adopt(std::unique_ptr<BfcAllocator> a) {
    alignment_ = a->options().alignment;
    alloc_ = std::move(a);
  }
  // Allocates and records the block; nullptr (and a test failure) on error.
  void* take(uint64_t bytes) {
    auto p = alloc_->allocate(bytes);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    EXPECT_TRUE(live_.emplace(reinterpret_cast<uintptr_t>(*p), bytes).second) << "reused live";
    return *p;
  }
  void give(void* p) {
    EXPECT_EQ(live_.erase(reinterpret_cast<uintptr_t>(p)), 1u);
    alloc_->deallocate(p);
  }
  uint64_t offset(const void* p) const {
    return static_cast<uint64_t>(static_cast<const char*>(p) -
                                 static_cast<const char*>(alloc_->base()));
  }
  void TearDown() override {
    if (alloc_ != nullptr) check_all_properties(*alloc_, alignment_, live_);
  }

  SubAllocatorLog log_;
  std::unique_ptr<BfcAllocator> alloc_;
  uint64_t alignment_ = 256;
  LiveBlocks live_;
};

TEST_F(BfcTest, ExactFitFillsTheRegionAndReusesTheFreedChunk) {
  constexpr uint64_t kUnit = 64 * kKiB;
  make(4 * kUnit);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(take(kUnit));
  EXPECT_EQ(alloc_->stats().largest_free_chunk, 0u);
  EXPECT_EQ(alloc_->stats().fragmentation, 0.0);
  EXPECT_EQ(alloc_->allocate(1).status().code(), absl::StatusCode::kResourceExhausted);
  give(blocks[2]);
  void* again = take(kUnit);
  EXPECT_EQ(again, blocks[2]);
  EXPECT_EQ(alloc_->stats().largest_free_chunk, 0u);
}

TEST_F(BfcTest, SplitThenMergeWithBothNeighbours) {
  constexpr uint64_t kUnit = 4 * kKiB;
  make(16 * kUnit);
  void* a = take(3 * kUnit);
  void* b = take(2 * kUnit);
  void* c = take(4 * kUnit);
  void* d = take(7 * kUnit);  // fills the region
  EXPECT_EQ(offset(b), 3 * kUnit);
  EXPECT_EQ(offset(c), 5 * kUnit);
  give(a);
  give(c);
  EXPECT_EQ(alloc_->stats().largest_free_chunk, 4 * kUnit);
  give(b);  // merges with a before it and c after it
  EXPECT_EQ(alloc_->stats().largest_free_chunk, 9 * kUnit);
  void* merged = take(9 * kUnit);
  EXPECT_EQ(merged, alloc_->base());
  (void)d;
}

TEST_F(BfcTest, BestFitPicksTheSmallestFittingChunk) {
  constexpr uint64_t kUnit = 4 * kKiB;
  make(64 * kUnit);
  // Holes of 3, 1, 2, 5 and 2 units separated by live one-unit spacers,
  // then a large free tail.
  std::vector<void*> holes;
  for (uint64_t units : {3, 1, 2, 5, 2}) {
    holes.push_back(take(units * kUnit));
    take(kUnit);
  }
  for (void* h : holes) give(h);
  EXPECT_EQ(take(2 * kUnit), holes[2]) << "two equal holes: the lower address wins";
  EXPECT_EQ(take(2 * kUnit), holes[4]);
  EXPECT_EQ(take(1 * kUnit), holes[1]);
  EXPECT_EQ(take(4 * kUnit), holes[3]) << "5-unit hole beats the tail";
  EXPECT_EQ(take(3 * kUnit), holes[0]);
  EXPECT_EQ(offset(take(3 * kUnit)), 18 * kUnit) << "no hole left: the tail";
  EXPECT_EQ(offset(take(kUnit)), 13 * kUnit) << "the split-off rest of the 5-unit hole";
}

TEST_F(BfcTest, FragmentationIsOneMinusLargestOverFree) {
  constexpr uint64_t kUnit = 1 * kKiB;
  make(8 * kUnit);
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(take(kUnit));
  for (int i = 0; i < 8; i += 2) give(blocks[i]);  // four separate 1-unit holes
  AllocatorStats s = alloc_->stats();
  EXPECT_EQ(s.largest_free_chunk, kUnit);
  EXPECT_DOUBLE_EQ(s.fragmentation, 1.0 - 1.0 / 4.0);
  give(blocks[1]);  // joins holes 0 and 2: 3 units, 5 units free
  s = alloc_->stats();
  EXPECT_EQ(s.largest_free_chunk, 3 * kUnit);
  EXPECT_DOUBLE_EQ(s.fragmentation, 1.0 - 3.0 / 5.0);
}

TEST_F(BfcTest, OutOfMemoryMessageNamesTheFiguresAndAHint) {
  make(16 * kMiB);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(take(4 * kMiB));
  give(blocks[0]);
  give(blocks[2]);  // 8 MiB free in two 4 MiB chunks
  const AllocatorStats before = alloc_->stats();
  auto p = alloc_->allocate(6 * kMiB);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(p.status().message());
  std::printf("OOM message: %s\n", msg.c_str());
  EXPECT_THAT(msg, HasSubstr("out of device memory"));
  EXPECT_THAT(msg, HasSubstr("tried to allocate " + format_bytes(6 * kMiB)));
  EXPECT_THAT(msg, HasSubstr("capacity " + format_bytes(16 * kMiB)));
  EXPECT_THAT(msg, HasSubstr(format_bytes(8 * kMiB) + " in use by 2 allocations"));
  EXPECT_THAT(msg, HasSubstr(format_bytes(8 * kMiB) + " free"));
  EXPECT_THAT(msg, HasSubstr("largest free chunk " + format_bytes(4 * kMiB)));
  EXPECT_THAT(msg, HasSubstr("fragmentation 50%"));
  // The hint is the owner's (a session picks it by situation); none by default.
  EXPECT_THAT(msg, Not(HasSubstr("lms::rewrite")));
  const AllocatorStats after = alloc_->stats();
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use) << "a failed allocate changed state";
  EXPECT_EQ(after.total_allocs, before.total_allocs);
  EXPECT_EQ(after.largest_free_chunk, before.largest_free_chunk);
}

TEST_F(BfcTest, OutOfMemoryMessageEndsWithTheOwnersHint) {
  auto a = BfcAllocator::create(std::make_unique<FakeSubAllocator>(&log_),
                                {.capacity_bytes = 4 * kMiB, .oom_hint = "Try a smaller batch."});
  ASSERT_TRUE(a.ok()) << a.status();
  adopt(std::move(*a));
  auto p = alloc_->allocate(5 * kMiB);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(p.status().message());
  EXPECT_THAT(msg, HasSubstr("(fragmentation 0%). Try a smaller batch.")) << msg;
}

TEST_F(BfcTest, HugeRequestsFailCleanly) {
  make(1 * kMiB);
  EXPECT_EQ(BfcAllocator::rounded_size(std::numeric_limits<uint64_t>::max(), 256),
            std::numeric_limits<uint64_t>::max() / 256 * 256);
  for (uint64_t bytes : {std::numeric_limits<uint64_t>::max(), uint64_t{1} << 63, 1 * kMiB + 1}) {
    auto p = alloc_->allocate(bytes);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted) << bytes;
  }
}

TEST_F(BfcTest, ZeroBytesGivesDistinctMinimumBlocks) {
  make(1 * kMiB);
  void* a = take(0);
  void* b = take(0);
  EXPECT_NE(a, b);
  EXPECT_EQ(alloc_->stats().bytes_in_use, 2 * 256u);
}

TEST_F(BfcTest, PeakTracksAndResets) {
  make(1 * kMiB);
  void* a = take(100 * kKiB);
  void* b = take(200 * kKiB);
  take(10 * kKiB);
  give(a);
  give(b);
  AllocatorStats s = alloc_->stats();
  EXPECT_EQ(s.peak_bytes_in_use, 310 * kKiB);
  EXPECT_EQ(s.total_allocs, 3u);
  alloc_->reset_peak();
  EXPECT_EQ(alloc_->stats().peak_bytes_in_use, 10 * kKiB);
  take(20 * kKiB);
  EXPECT_EQ(alloc_->stats().peak_bytes_in_use, 30 * kKiB);
}

class RecordingObserver : public AllocationObserver {
 public:
  void on_allocation_change(int64_t delta_bytes, uint64_t bytes_in_use) override {
    calls.emplace_back(delta_bytes, bytes_in_use);
  }
  std::vector<std::pair<int64_t, uint64_t>> calls;
};

TEST_F(BfcTest, ObserverSeesEveryChangeInOrder) {
  make(1 * kMiB);
  RecordingObserver obs;
  alloc_->set_observer(&obs);
  void* a = take(1000);                           // 1024 bytes
  take(5000);                                     // 5120 bytes
  EXPECT_FALSE(alloc_->allocate(2 * kMiB).ok());  // not reported
  give(a);
  ASSERT_EQ(obs.calls.size(), 3u);
  EXPECT_EQ(obs.calls[0], std::make_pair(int64_t{1024}, uint64_t{1024}));
  EXPECT_EQ(obs.calls[1], std::make_pair(int64_t{5120}, uint64_t{6144}));
  EXPECT_EQ(obs.calls[2], std::make_pair(int64_t{-1024}, uint64_t{5120}));
  alloc_->set_observer(nullptr);
  take(1);
  EXPECT_EQ(obs.calls.size(), 3u);
}

TEST_F(BfcTest, AlignmentAboveThePageAlignsTheBase) {
  // The fake base is only page aligned, so the allocator must over-allocate
  // and align up, and give the raw range back unchanged.
  make(1 * kMiB, 64 * kKiB, FakeSubAllocator::kDefaultBase + 4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(alloc_->base()) % (64 * kKiB), 0u);
  EXPECT_EQ(log_.alloc_bytes, 1 * kMiB + 64 * kKiB);
  for (int i = 0; i < 16; ++i) take(i * 1000);
  EXPECT_TRUE(alloc_->contains(alloc_->base()));
  EXPECT_FALSE(alloc_->contains(static_cast<char*>(alloc_->base()) + kMiB));
}

TEST_F(BfcTest, DestructionReturnsTheRegion) {
  make(1 * kMiB);
  alloc_.reset();
  EXPECT_EQ(log_.free_calls, 1);
  EXPECT_EQ(log_.freed_base, reinterpret_cast<void*>(FakeSubAllocator::kDefaultBase));
  EXPECT_EQ(log_.freed_bytes, 1 * kMiB);
}

TEST_F(BfcTest, CapacityRoundsDownToTheAlignment) {
  make(1000);
  EXPECT_EQ(alloc_->stats().capacity_bytes, 768u);
}

TEST_F(BfcTest, InvalidOptionsAreRejected) {
  const std::vector<std::pair<uint64_t, uint64_t>> bad = {
      {0, 256}, {100, 256}, {kMiB, 0}, {kMiB, 3}, {kMiB, 768}, {kMiB, uint64_t{1} << 31}};
  for (const auto& [capacity, alignment] : bad) {
    auto a = BfcAllocator::create(std::make_unique<FakeSubAllocator>(&log_),
                                  {.capacity_bytes = capacity, .alignment = alignment});
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument)
        << capacity << " " << alignment;
  }
  EXPECT_EQ(log_.alloc_calls, 0) << "no region is taken for bad options";
  auto null_sub = BfcAllocator::create(nullptr, {.capacity_bytes = kMiB});
  EXPECT_EQ(null_sub.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(BfcTest, FailingSubAllocatorIsResourceExhaustedAtCreate) {
  auto a = BfcAllocator::create(std::make_unique<FailingSubAllocator>(&log_),
                                {.capacity_bytes = 64 * kMiB});
  ASSERT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("device"));
  EXPECT_THAT(std::string(a.status().message()), HasSubstr(format_bytes(64 * kMiB)));
  EXPECT_EQ(log_.alloc_calls, 1);
  EXPECT_EQ(log_.free_calls, 0);
}

TEST_F(BfcTest, DoubleFreeAndForeignPointersAreInvariantFailures) {
  make(1 * kMiB);
  void* a = take(1000);
  void* inner = static_cast<char*>(a) + 256;
  EXPECT_DEATH(alloc_->deallocate(inner), "LMS_CHECK failed");
  EXPECT_DEATH(alloc_->deallocate(reinterpret_cast<void*>(0x1000)), "LMS_CHECK failed");
  give(a);
  EXPECT_DEATH(alloc_->deallocate(a), "LMS_CHECK failed");
  alloc_->deallocate(nullptr);  // a no-op, as for free()
}

// ---------------------------------------------------------------------------

class BfcAlignmentTest : public BfcTest, public ::testing::WithParamInterface<uint64_t> {};

TEST_P(BfcAlignmentTest, BlocksAreAlignedAndPackedByRoundedSize) {
  const uint64_t a = GetParam();
  make(4 * kMiB, a);
  const std::vector<uint64_t> sizes = {0,   1,    63,   64,   65,   255,  256,
                                       257, 1000, 4095, 4096, 4097, 10000};
  void* prev = nullptr;
  uint64_t prev_rounded = 0;
  for (uint64_t n : sizes) {
    const uint64_t r = BfcAllocator::rounded_size(n, a);
    EXPECT_EQ(r % a, 0u);
    EXPECT_GE(r, std::max(n, a));
    EXPECT_LT(r - std::max(n, uint64_t{1}), a) << "rounded up by more than one unit";
    void* p = take(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % a, 0u);
    // A fresh region is carved front to back, so blocks sit exactly one
    // rounded size apart.
    if (prev != nullptr) {
      EXPECT_EQ(offset(p) - offset(prev), prev_rounded);
    }
    prev = p;
    prev_rounded = r;
  }
}

INSTANTIATE_TEST_SUITE_P(Alignments, BfcAlignmentTest, ::testing::Values(64, 256, 4096));

// ---------------------------------------------------------------------------

// Reference model of best fit with coalescing: free ranges by offset, scanned
// linearly. Slow and obviously right; the allocator must agree with it on
// every offset and every failure.
class ShadowBestFit {
 public:
  explicit ShadowBestFit(uint64_t capacity) { free_[0] = capacity; }
  std::optional<uint64_t> allocate(uint64_t size) {
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= size && (best == free_.end() || it->second < best->second)) best = it;
    }
    if (best == free_.end()) return std::nullopt;
    const auto [off, len] = *best;
    free_.erase(best);
    if (len > size) free_[off + size] = len - size;
    return off;
  }
  void deallocate(uint64_t off, uint64_t size) {
    auto it = free_.emplace(off, size).first;
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }
  uint64_t largest() const {
    uint64_t l = 0;
    for (const auto& [off, len] : free_) l = std::max(l, len);
    return l;
  }

 private:
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes
};

TEST_F(BfcTest, RandomStressAgreesWithShadowModel) {
  constexpr uint64_t kCapacity = 64 * kMiB;
  constexpr int kOps = 100000;
  constexpr uint32_t kSeed = 20240611;
  std::printf("random stress seed %u\n", kSeed);
  make(kCapacity);
  ShadowBestFit shadow(kCapacity);
  std::mt19937_64 rng(kSeed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  // Log-uniform sizes from 1 B to 8 MiB: many small blocks, some large.
  auto random_size = [&] { return static_cast<uint64_t>(std::exp2(unit(rng) * 23.0)) - 1; };
  std::vector<std::pair<void*, uint64_t>> blocks;  // for random picks
  int failures = 0;
  uint64_t successes = 0;
  for (int op = 0; op < kOps; ++op) {
    // Grow towards the capacity in the first half, shrink in the second.
    const double p_alloc = op < kOps / 2 ? 0.6 : 0.4;
    if (blocks.empty() || unit(rng) < p_alloc) {
      const uint64_t bytes = random_size();
      const auto expected = shadow.allocate(BfcAllocator::rounded_size(bytes));
      auto p = alloc_->allocate(bytes);
      ASSERT_EQ(p.ok(), expected.has_value()) << "op " << op << ": " << p.status();
      if (!p.ok()) {
        ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
        ++failures;
        continue;
      }
      ASSERT_EQ(offset(*p), *expected) << "op " << op << " bytes " << bytes;
      ++successes;
      live_.emplace(reinterpret_cast<uintptr_t>(*p), bytes);
      blocks.emplace_back(*p, bytes);
    } else {
      const size_t i = std::uniform_int_distribution<size_t>(0, blocks.size() - 1)(rng);
      const auto [p, bytes] = blocks[i];
      blocks[i] = blocks.back();
      blocks.pop_back();
      shadow.deallocate(offset(p), BfcAllocator::rounded_size(bytes));
      give(p);
    }
    if (op % 997 == 0) {
      ASSERT_EQ(alloc_->stats().largest_free_chunk, shadow.largest()) << "op " << op;
      expect_allocator_properties(*alloc_, alignment_, live_);
    }
  }
  std::printf("%d of %d operations hit out-of-memory, %zu blocks live at the end\n", failures, kOps,
              blocks.size());
  EXPECT_GT(failures, 0) << "the stress never reached the capacity";
  EXPECT_EQ(alloc_->stats().total_allocs, successes);
}

// ---------------------------------------------------------------------------

// Real memory: each thread fills its blocks with its own byte and checks the
// byte is still there at free, which fails if blocks of different threads
// ever overlap.
TEST_F(BfcTest, ThreadsAllocateAndFreeConcurrently) {
  constexpr int kThreads = 4;
  constexpr int kOpsPerThread = 5000;
  constexpr uint32_t kSeed = 7;
  std::printf("thread smoke seed %u (+ thread index)\n", kSeed);
  auto a = BfcAllocator::create(std::make_unique<HeapSubAllocator>(), {.capacity_bytes = 8 * kMiB});
  ASSERT_TRUE(a.ok()) << a.status();
  adopt(std::move(*a));
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(kSeed + t);
      std::vector<std::pair<unsigned char*, uint64_t>> mine;
      const unsigned char tag = static_cast<unsigned char>(0x10 + t);
      auto release = [&](std::pair<unsigned char*, uint64_t> b) {
        for (uint64_t i = 0; i < b.second; ++i) bad[t] += b.first[i] != tag;
        alloc_->deallocate(b.first);
      };
      for (int op = 0; op < kOpsPerThread; ++op) {
        if (mine.size() < 32 && rng() % 2 == 0) {
          const uint64_t bytes = rng() % (16 * kKiB);
          auto p = alloc_->allocate(bytes);
          if (!p.ok()) {
            ++bad[t];
            continue;
          }
          std::memset(*p, tag, bytes);
          mine.emplace_back(static_cast<unsigned char*>(*p), bytes);
        } else if (!mine.empty()) {
          release(mine.back());
          mine.pop_back();
        }
      }
      for (const auto& b : mine) release(b);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
  EXPECT_GT(alloc_->stats().total_allocs, 0u);
}

}  // namespace
}  // namespace lms
