// A synthetic multi-threaded run for the profiler tests: four threads (one per
// stream) report non-overlapping intervals, memory samples below a capacity,
// and steps to one sink at the same time. Each thread also keeps its own copy
// of what it reported, so tests can compare without trusting the Recorder.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lms/profiler/event_sink.h"

namespace lms::testing {

struct Reported {
  StreamKind stream;
  int kind;  // 0 node, 1 copy, 2 stall, 3 host wait (IntervalKind)
  std::string name, detail;
  uint64_t bytes;
  double start_s, end_s;
};

struct SyntheticRun {
  std::array<std::vector<Reported>, 4> intervals;                  // by stream, in report order
  std::array<std::vector<std::pair<double, uint64_t>>, 2> memory;  // by MemoryKind
  std::vector<std::array<double, 2>> steps;
  uint64_t capacity_bytes = 0;
  double base_s = 0;
};

// Stream s's thread reports `per_thread` intervals back to back with random
// gaps; copy streams report copies, compute reports nodes with a stall every
// 5th event, host reports nodes with a host wait every 7th event and a step
// every 25 events.
inline SyntheticRun run_synthetic(EventSink& sink, uint32_t seed, int per_thread,
                                  uint64_t capacity_bytes) {
  SyntheticRun run;
  run.capacity_bytes = capacity_bytes;
  run.base_s = 1000.0;
  std::array<std::vector<std::pair<double, uint64_t>>, 4> mem_by_thread;
  auto body = [&](int s) {
    std::mt19937 rng(seed * 31 + s);
    std::uniform_real_distribution<double> dur(1e-6, 1e-3), gap(0, 5e-4);
    std::uniform_int_distribution<uint64_t> bytes(1, 1 << 24), used(0, capacity_bytes);
    const auto stream = static_cast<StreamKind>(s);
    double t = run.base_s + gap(rng);
    double step_start = t;
    for (int k = 0; k < per_thread; ++k) {
      double start = t, end = t + dur(rng);
      std::string name = "n", op = "op";  // appended, not operator+: GCC 12 -Wrestrict
      name += std::to_string(k % 40);
      op += std::to_string(k % 5);
      Reported r{stream, 0, name, op, 0, start, end};
      if (s == 2 || s == 3) {
        r.kind = 1;
        r.detail.clear();
        r.bytes = bytes(rng);
        sink.on_copy(stream, r.name, r.bytes, start, end);
      } else if (s == 0 && k % 7 == 3) {
        r.kind = 3;
        r.detail = "pinned host block in use by a swap-in";
        sink.on_host_wait(r.detail, r.name, start, end);
      } else if (s == 1 && k % 5 == 2) {
        r.kind = 2;
        r.detail = "wait for h2d copy";
        sink.on_stall(stream, r.detail, r.name, start, end);
      } else {
        sink.on_node(stream, r.name, r.detail, start, end);
      }
      run.intervals[s].push_back(r);
      uint64_t u = used(rng);
      sink.on_memory(static_cast<MemoryKind>(s % 2), u, end);
      mem_by_thread[s].emplace_back(end, u);
      t = end + gap(rng);
      if (s == 0 && k % 25 == 24) {
        sink.on_step(k / 25, step_start, end);
        run.steps.push_back({step_start, end});
        step_start = t;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int s = 0; s < 4; ++s) threads.emplace_back(body, s);
  for (auto& th : threads) th.join();
  for (int s = 0; s < 4; ++s) {
    auto& dst = run.memory[s % 2];
    dst.insert(dst.end(), mem_by_thread[s].begin(), mem_by_thread[s].end());
  }
  return run;
}

// A fresh, empty directory unique to this process and test case (ctest runs
// the cases of one executable in parallel, and several builds may run at once).
inline std::filesystem::path fresh_test_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = "lms_profiler_";
  name += info->test_suite_name();
  name += "_";
  name += info->name();
  name += "_";
  name += std::to_string(::getpid());
  std::filesystem::path dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace lms::testing
