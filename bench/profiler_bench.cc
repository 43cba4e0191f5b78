// Cost of reporting one event to the Recorder, the sink the executor calls on
// its hot path: ns per event, one thread and four threads sharing one
// Recorder (the host thread and three stream workers of a device).
//
//   build-prof/bench/profiler_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "lms/profiler/recorder.h"

namespace lms {
namespace {

// 300 distinct node names, as in a training graph of about that size.
const std::vector<std::string>& node_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (int i = 0; i < 300; ++i) v.push_back("vdsr/conv" + std::to_string(i) + "/grad_input");
    return v;
  }();
  return names;
}

// One Recorder per benchmark run, created by thread 0 before the timed loop
// (threads meet at the loop's start and end) and destroyed after it.
std::unique_ptr<Recorder> g_recorder;

void setup(const benchmark::State& state) {
  if (state.thread_index() == 0) g_recorder = std::make_unique<Recorder>();
}

void teardown(benchmark::State& state) {
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) g_recorder.reset();
}

void BM_OnNode(benchmark::State& state) {
  setup(state);
  const auto& names = node_names();
  const auto stream = static_cast<StreamKind>(state.thread_index() % kNumStreams);
  size_t i = static_cast<size_t>(state.thread_index()) * 7;
  double t = 0;
  for (auto _ : state) {
    EventSink* sink = g_recorder.get();  // called through the interface, as the executor does
    sink->on_node(stream, names[i % names.size()], "conv2d_backward_data", t, t + 1e-6);
    t += 2e-6;
    ++i;
  }
  teardown(state);
}

void BM_OnMemory(benchmark::State& state) {
  setup(state);
  const auto memory = static_cast<MemoryKind>(state.thread_index() % kNumMemories);
  uint64_t bytes = 1 << 20;
  double t = 0;
  for (auto _ : state) {
    EventSink* sink = g_recorder.get();
    sink->on_memory(memory, bytes, t);
    bytes += 4096;
    t += 1e-6;
  }
  teardown(state);
}

void BM_OnCopy(benchmark::State& state) {
  setup(state);
  const auto& names = node_names();
  const auto stream = state.thread_index() % 2 == 0 ? StreamKind::kD2H : StreamKind::kH2D;
  size_t i = 0;
  double t = 0;
  for (auto _ : state) {
    EventSink* sink = g_recorder.get();
    sink->on_copy(stream, names[i % names.size()], 1 << 22, t, t + 1e-4);
    t += 2e-4;
    ++i;
  }
  teardown(state);
}

BENCHMARK(BM_OnNode)->Threads(1)->Threads(4)->UseRealTime();
BENCHMARK(BM_OnMemory)->Threads(1)->Threads(4)->UseRealTime();
BENCHMARK(BM_OnCopy)->Threads(1)->Threads(4)->UseRealTime();

}  // namespace
}  // namespace lms
