// CpuStream: FIFO order, synchronize, concurrent enqueue, drain on shutdown.
#include "backend/cpu/stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace lms::cpu {
namespace {

using Clock = std::chrono::steady_clock;

TEST(CpuStreamTest, RunsManySmallClosuresInEnqueueOrder) {
  constexpr int kCount = 20000;
  std::vector<int> order;  // touched only by the worker until synchronize()
  order.reserve(kCount);
  CpuStream stream(StreamKind::kCompute);
  for (int i = 0; i < kCount; ++i) stream.enqueue([&order, i] { order.push_back(i); });
  stream.synchronize();
  ASSERT_EQ(order.size(), static_cast<size_t>(kCount));
  for (int i = 0; i < kCount; ++i) ASSERT_EQ(order[i], i) << "position " << i;
  EXPECT_TRUE(stream.idle());
}

TEST(CpuStreamTest, EnqueueReturnsBeforeWorkRunsAndSynchronizeWaits) {
  CpuStream stream(StreamKind::kD2H);
  std::atomic<bool> release{false};
  std::atomic<bool> ran{false};
  stream.enqueue([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  });
  stream.enqueue([&] { ran.store(true); });
  // The host is not blocked by the gate closure.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(ran.load());
  EXPECT_FALSE(stream.idle());
  release.store(true);
  stream.synchronize();
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(stream.idle());
}

TEST(CpuStreamTest, KeepsEachProducerThreadsOrderUnderConcurrentEnqueue) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 5000;
  std::vector<std::vector<int>> seen(kThreads);
  CpuStream stream(StreamKind::kH2D);
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) stream.enqueue([&seen, t, i] { seen[t].push_back(i); });
    });
  }
  for (auto& p : producers) p.join();
  stream.synchronize();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t].size(), static_cast<size_t>(kPerThread)) << "thread " << t;
    for (int i = 0; i < kPerThread; ++i) ASSERT_EQ(seen[t][i], i) << "thread " << t;
  }
}

TEST(CpuStreamTest, RunsOnStartOnTheWorkerBeforeAnyWork) {
  std::thread::id start_thread;
  std::thread::id work_thread;
  std::vector<int> order;
  {
    CpuStream stream(StreamKind::kCompute, [&] {
      start_thread = std::this_thread::get_id();
      order.push_back(0);
    });
    stream.enqueue([&] {
      work_thread = std::this_thread::get_id();
      order.push_back(1);
    });
    stream.synchronize();
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1}));
  EXPECT_EQ(start_thread, work_thread);
  EXPECT_NE(work_thread, std::this_thread::get_id());
}

TEST(CpuStreamTest, DestructionDrainsQueuedWorkWithoutHanging) {
  constexpr int kCount = 200;
  std::atomic<int> ran{0};
  const auto start = Clock::now();
  {
    CpuStream stream(StreamKind::kCompute);
    for (int i = 0; i < kCount; ++i) {
      stream.enqueue([&ran] {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        ran.fetch_add(1);
      });
    }
  }  // destroyed with nearly all of the work still queued
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(ran.load(), kCount);
  EXPECT_LT(elapsed_s, 5.0);
}

}  // namespace
}  // namespace lms::cpu
