// Events of the emulated CPU device: generations, query / synchronize / wait
// across real worker threads, and concurrent host use (run under TSan too).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_device.h"
#include "backend/cpu/cpu_event.h"
#include "backend/cpu/stream.h"

namespace lms::cpu {
namespace {

using namespace std::chrono_literals;

// Blocks a stream until open() is called, so tests control when markers run.
class Gate {
 public:
  std::function<void()> closure() {
    return [this] {
      while (!open_.load()) std::this_thread::sleep_for(50us);
    };
  }
  void open() { open_.store(true); }

 private:
  std::atomic<bool> open_{false};
};

// A kernel that blocks its stream until the gate opens, then bumps a counter.
class GateKernel : public Kernel {
 public:
  explicit GateKernel(Gate* gate) : gate_(gate) {}
  absl::Status run(const KernelArgs&) override {
    gate_->closure()();
    return absl::OkStatus();
  }

 private:
  Gate* gate_;
};

std::unique_ptr<CpuDevice> make_device() {
  auto dev = CpuDevice::create({.capacity_bytes = 16 << 20, .host_pool_bytes = 16 << 20});
  EXPECT_TRUE(dev.ok()) << dev.status();
  return std::move(dev).value();
}

TEST(EventStateTest, GenerationsCompleteIndependentlyAndOutOfOrder) {
  EventState state;
  EXPECT_EQ(state.latest(), 0u);
  EXPECT_TRUE(state.is_complete(0));  // never recorded
  int markers = 0;
  const uint64_t g1 = state.record([&](uint64_t) { ++markers; });
  const uint64_t g2 = state.record([&](uint64_t) { ++markers; });
  EXPECT_EQ(markers, 2);
  EXPECT_EQ(state.latest(), g2);
  EXPECT_EQ(g1, 1u);
  EXPECT_EQ(g2, 2u);
  EXPECT_FALSE(state.is_complete(g1));
  state.complete(g2);  // e.g. re-recorded on a faster stream
  EXPECT_TRUE(state.is_complete(g2));
  EXPECT_FALSE(state.is_complete(g1));
  state.complete(g1);
  EXPECT_TRUE(state.is_complete(g1));
  EXPECT_FALSE(state.wait_for(g1));  // already complete: does not block
}

TEST(EventStateTest, WaitForBlocksUntilAnotherThreadCompletes) {
  EventState state;
  const uint64_t g = state.record([](uint64_t) {});
  std::atomic<bool> completed{false};
  std::thread completer([&] {
    std::this_thread::sleep_for(20ms);
    completed.store(true);
    state.complete(g);
  });
  EXPECT_TRUE(state.wait_for(g));
  EXPECT_TRUE(completed.load());
  completer.join();
}

TEST(CpuEventTest, NeverRecordedEventIsComplete) {
  auto dev = make_device();
  auto ev = dev->create_event();
  EXPECT_TRUE(dev->query(*ev));
  dev->synchronize(*ev);  // must not block
  dev->wait(StreamKind::kCompute, *ev);
  EXPECT_TRUE(dev->synchronize().ok());
}

TEST(CpuEventTest, QueryIsFalseUntilTheStreamReachesTheRecord) {
  auto dev = make_device();
  Gate gate;
  GateKernel blocker(&gate);
  dev->launch(blocker, {}, "gate", "test");
  auto ev = dev->create_event();
  dev->record(*ev, StreamKind::kCompute);
  std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(dev->query(*ev));
  gate.open();
  dev->synchronize(*ev);
  EXPECT_TRUE(dev->query(*ev));
  EXPECT_TRUE(dev->synchronize().ok());
}

TEST(CpuEventTest, ReRecordStartsANewGenerationThatQueryFollows) {
  auto dev = make_device();
  auto ev = dev->create_event();
  dev->record(*ev, StreamKind::kCompute);
  dev->synchronize(*ev);
  EXPECT_TRUE(dev->query(*ev));
  // Record again behind a gate: the event is pending again (cudaEventRecord).
  Gate gate;
  GateKernel blocker(&gate);
  dev->launch(blocker, {}, "gate", "test");
  dev->record(*ev, StreamKind::kCompute);
  EXPECT_FALSE(dev->query(*ev));
  gate.open();
  dev->synchronize(*ev);
  EXPECT_TRUE(dev->query(*ev));
  EXPECT_EQ(static_cast<CpuEvent&>(*ev).state()->latest(), 2u);
}

TEST(CpuEventTest, WaitCapturesTheGenerationLatestAtWaitTime) {
  // D2H waits on generation 1 (compute, gated). Re-recording on the idle H2D
  // stream afterwards must not release that wait.
  auto dev = make_device();
  Gate gate;
  GateKernel blocker(&gate);
  auto ev = dev->create_event();
  dev->launch(blocker, {}, "gate", "test");
  dev->record(*ev, StreamKind::kCompute);
  dev->wait(StreamKind::kD2H, *ev);
  auto after_wait = dev->create_event();
  dev->record(*after_wait, StreamKind::kD2H);
  dev->record(*ev, StreamKind::kH2D);  // generation 2, completes at once
  auto h2d_done = dev->create_event();
  dev->record(*h2d_done, StreamKind::kH2D);
  dev->synchronize(*h2d_done);
  EXPECT_TRUE(dev->query(*ev));  // latest generation done
  std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(dev->query(*after_wait));  // D2H still waits for generation 1
  gate.open();
  dev->synchronize(*after_wait);
  EXPECT_TRUE(dev->synchronize().ok());
}

TEST(CpuEventTest, StreamWaitDoesNotBlockTheHost) {
  auto dev = make_device();
  Gate gate;
  GateKernel blocker(&gate);
  auto ev = dev->create_event();
  dev->launch(blocker, {}, "gate", "test");
  dev->record(*ev, StreamKind::kCompute);
  const auto start = std::chrono::steady_clock::now();
  dev->wait(StreamKind::kH2D, *ev);
  dev->wait(StreamKind::kD2H, *ev);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  gate.open();
  EXPECT_TRUE(dev->synchronize().ok());
  EXPECT_TRUE(dev->query(*ev));
}

TEST(CpuEventTest, DestroyingAnEventWithPendingRecordsIsSafe) {
  auto dev = make_device();
  Gate gate;
  GateKernel blocker(&gate);
  dev->launch(blocker, {}, "gate", "test");
  {
    auto ev = dev->create_event();
    dev->record(*ev, StreamKind::kCompute);
    dev->wait(StreamKind::kD2H, *ev);
  }  // destroyed while its record and wait are queued
  gate.open();
  EXPECT_TRUE(dev->synchronize().ok());
}

TEST(CpuEventTest, ManyThreadsRecordQueryAndWaitConcurrently) {
  const unsigned seed = 20240611;
  std::printf("seed %u\n", seed);
  auto dev = make_device();
  constexpr int kThreads = 6;
  constexpr int kIters = 400;
  std::vector<std::unique_ptr<Event>> events;
  for (int i = 0; i < 4; ++i) events.push_back(dev->create_event());
  const StreamKind kinds[] = {StreamKind::kCompute, StreamKind::kD2H, StreamKind::kH2D};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(seed + t);
      for (int i = 0; i < kIters; ++i) {
        Event& ev = *events[rng() % events.size()];
        switch (rng() % 4) {
          case 0:
            dev->record(ev, kinds[rng() % 3]);
            break;
          case 1:
            dev->wait(kinds[rng() % 3], ev);
            break;
          case 2:
            (void)dev->query(ev);
            break;
          default:
            dev->synchronize(ev);
            break;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(dev->synchronize().ok());
  for (auto& ev : events) EXPECT_TRUE(dev->query(*ev));
}

}  // namespace
}  // namespace lms::cpu
