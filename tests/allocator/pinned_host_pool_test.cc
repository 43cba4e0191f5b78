#include "allocator/pinned_host_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "allocator_test_util.h"

namespace lms {
namespace {

using ::lms::testing::check_all_properties;
using ::lms::testing::FailingSubAllocator;
using ::lms::testing::FakeSubAllocator;
using ::lms::testing::LiveBlocks;
using ::lms::testing::SubAllocatorLog;
using ::testing::HasSubstr;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

// The sanitizers' runtime replaces mlock with a no-op that reports success.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(LMS_SANITIZER_RUNTIME)
constexpr bool kSanitizerFakesMlock = true;
#else
constexpr bool kSanitizerFakesMlock = false;
#endif

// Locked memory of this process in KiB (VmLck in /proc/self/status), or -1.
long locked_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmLck:") {
      long kib = -1;
      status >> kib;
      return kib;
    }
  }
  return -1;
}

class PinnedHostPoolTest : public ::testing::Test {
 protected:
  void* take(uint64_t bytes) {
    auto p = pool_->allocate(bytes);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    live_.emplace(reinterpret_cast<uintptr_t>(*p), bytes);
    return *p;
  }
  void give(void* p) {
    EXPECT_EQ(live_.erase(reinterpret_cast<uintptr_t>(p)), 1u);
    pool_->deallocate(p);
  }
  void TearDown() override {
    if (pool_ != nullptr) check_all_properties(*pool_, pool_->options().alignment, live_);
  }

  std::unique_ptr<PinnedHostPool> pool_;
  LiveBlocks live_;
};

TEST_F(PinnedHostPoolTest, LimitIsEnforcedAndMemoryIsUsable) {
  const long locked_before = locked_kib();
  auto pool = PinnedHostPool::create({.limit_bytes = 1 * kMiB});
  ASSERT_TRUE(pool.ok()) << pool.status();
  pool_ = std::move(*pool);
  if (pool_->pages_locked()) {
    std::printf("pool page-locked: VmLck %ld -> %ld KiB\n", locked_before, locked_kib());
    if (kSanitizerFakesMlock) {
      std::printf("sanitizer build: mlock is intercepted as a no-op, VmLck not checked\n");
    } else {
      EXPECT_GE(locked_kib() - locked_before, static_cast<long>(kMiB / kKiB));
    }
  } else {
    std::printf("mlock refused (RLIMIT_MEMLOCK); the pool is unpinned heap memory\n");
  }
  auto* a = static_cast<unsigned char*>(take(512 * kKiB));
  auto* b = static_cast<unsigned char*>(take(512 * kKiB));
  std::memset(a, 0xA5, 512 * kKiB);
  std::memset(b, 0x5A, 512 * kKiB);
  EXPECT_EQ(a[512 * kKiB - 1], 0xA5) << "b overlapped the end of a";
  auto over = pool_->allocate(1);
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(over.status().message());
  EXPECT_THAT(msg, HasSubstr("out of pinned host memory"));
  EXPECT_THAT(msg, HasSubstr("host_memory_limit"));
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("device_memory_limit")));
  give(a);
  EXPECT_EQ(take(1), a) << "freed space is reused";
  EXPECT_EQ(pool_->stats().peak_bytes_in_use, 1 * kMiB);
}

TEST_F(PinnedHostPoolTest, AlignmentOptionIsHonoured) {
  auto pool = PinnedHostPool::create({.limit_bytes = 256 * kKiB, .alignment = 4096});
  ASSERT_TRUE(pool.ok()) << pool.status();
  pool_ = std::move(*pool);
  for (uint64_t bytes : {1, 100, 4096, 5000}) {
    void* p = take(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
    EXPECT_TRUE(pool_->contains(p));
  }
  EXPECT_EQ(pool_->stats().bytes_in_use, 5 * 4096u);
}

TEST_F(PinnedHostPoolTest, InjectedSubAllocatorIsUsedAndReturned) {
  SubAllocatorLog log;
  {
    auto pool = PinnedHostPool::create(
        {.limit_bytes = 4 * kMiB},
        std::make_unique<FakeSubAllocator>(&log, FakeSubAllocator::kDefaultBase, true));
    ASSERT_TRUE(pool.ok()) << pool.status();
    EXPECT_TRUE((*pool)->pages_locked());
    EXPECT_EQ((*pool)->base(), reinterpret_cast<void*>(FakeSubAllocator::kDefaultBase));
    EXPECT_EQ(log.alloc_bytes, 4 * kMiB);
    pool_ = std::move(*pool);
    for (int i = 0; i < 8; ++i) take(300 * kKiB);
    check_all_properties(*pool_, pool_->options().alignment, live_);
    pool_.reset();
  }
  EXPECT_EQ(log.free_calls, 1);
  EXPECT_EQ(log.freed_bytes, 4 * kMiB);
}

TEST_F(PinnedHostPoolTest, FailingSubAllocatorNamesPinnedHost) {
  SubAllocatorLog log;
  auto pool = PinnedHostPool::create({.limit_bytes = 4 * kMiB},
                                     std::make_unique<FailingSubAllocator>(&log));
  ASSERT_EQ(pool.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(pool.status().message()), HasSubstr("pinned host"));
  EXPECT_EQ(log.alloc_calls, 1);
}

TEST_F(PinnedHostPoolTest, BadOptionsAreInvalidArgument) {
  EXPECT_EQ(PinnedHostPool::create({.limit_bytes = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto bad_alignment = PinnedHostPool::create({.limit_bytes = kMiB, .alignment = 1000});
  ASSERT_EQ(bad_alignment.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_alignment.status().message()), HasSubstr("pinned host"));
  EXPECT_THAT(std::string(bad_alignment.status().message()), HasSubstr("power of two"));
}

class CountingObserver : public AllocationObserver {
 public:
  void on_allocation_change(int64_t delta_bytes, uint64_t bytes_in_use) override {
    sum += delta_bytes;
    last = bytes_in_use;
    ++calls;
  }
  int64_t sum = 0;
  uint64_t last = 0;
  int calls = 0;
};

TEST_F(PinnedHostPoolTest, ObserverFollowsBytesInUse) {
  auto pool = PinnedHostPool::create({.limit_bytes = 1 * kMiB});
  ASSERT_TRUE(pool.ok()) << pool.status();
  pool_ = std::move(*pool);
  CountingObserver obs;
  pool_->set_observer(&obs);
  void* a = take(1000);
  take(3000);
  give(a);
  EXPECT_EQ(obs.calls, 3);
  EXPECT_EQ(obs.last, pool_->stats().bytes_in_use);
  EXPECT_EQ(static_cast<uint64_t>(obs.sum), pool_->stats().bytes_in_use);
  pool_->set_observer(nullptr);
}

}  // namespace
}  // namespace lms
