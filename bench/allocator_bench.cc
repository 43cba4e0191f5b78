// Throughput of the BFC allocator. The region comes from HeapSubAllocator and
// is never touched, so only the allocator's bookkeeping is measured.
//
//   build/bench/allocator_bench --benchmark_filter=BM_Bfc
// items_per_second counts allocate and deallocate calls alike (ops/s).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "allocator/bfc_allocator.h"

namespace lms {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kCapacityBytes = 1024 * kMiB;  // 64 live blocks of <= 4 MiB fit easily
constexpr int kWorkingSet = 64;                   // live blocks in steady state
constexpr uint32_t kSeed = 42;
constexpr int kSizeTable = 1 << 16;  // pre-drawn sizes, so the RNG is not measured

std::unique_ptr<BfcAllocator> make_allocator() {
  auto a = BfcAllocator::create(std::make_unique<HeapSubAllocator>(),
                                {.capacity_bytes = kCapacityBytes});
  if (!a.ok()) {
    std::fprintf(stderr, "allocator_bench: %s\n", a.status().ToString().c_str());
    std::abort();
  }
  return std::move(*a);
}

void* must_allocate(BfcAllocator& a, uint64_t bytes, benchmark::State& state) {
  auto p = a.allocate(bytes);
  if (!p.ok()) {
    state.SkipWithError(p.status().ToString().c_str());
    return nullptr;
  }
  return *p;
}

// Log-uniform sizes in [256 B, 4 MiB] and victim slots, drawn once.
struct RandomPlan {
  std::vector<uint64_t> sizes;
  std::vector<int> slots;
  RandomPlan() {
    std::mt19937_64 rng(kSeed);
    std::uniform_real_distribution<double> log2_size(8.0, 22.0);
    std::uniform_int_distribution<int> slot(0, kWorkingSet - 1);
    for (int i = 0; i < kSizeTable; ++i) {
      sizes.push_back(static_cast<uint64_t>(std::exp2(log2_size(rng))));
      slots.push_back(slot(rng));
    }
  }
};

// Steady state: 64 live blocks; each iteration frees a random one and
// allocates a random size in its place.
void BM_BfcRandomSteadyState(benchmark::State& state) {
  static const RandomPlan plan;
  auto alloc = make_allocator();
  std::vector<void*> live(kWorkingSet);
  for (int i = 0; i < kWorkingSet; ++i) live[i] = must_allocate(*alloc, plan.sizes[i], state);
  int i = kWorkingSet;
  for (auto _ : state) {
    const int k = i & (kSizeTable - 1);
    void*& slot = live[plan.slots[k]];
    alloc->deallocate(slot);
    slot = must_allocate(*alloc, plan.sizes[k], state);
    if (slot == nullptr) break;
    ++i;
  }
  state.counters["fragmentation"] = alloc->stats().fragmentation;
  for (void* p : live) alloc->deallocate(p);
  state.SetItemsProcessed(2 * state.iterations());
}
BENCHMARK(BM_BfcRandomSteadyState);

// Allocate and immediately free one block of a fixed size (the common
// short-lived temporary), with the 64-block working set resident.
void BM_BfcAllocFreePair(benchmark::State& state) {
  static const RandomPlan plan;
  const auto bytes = static_cast<uint64_t>(state.range(0));
  auto alloc = make_allocator();
  std::vector<void*> live;
  for (int i = 0; i < kWorkingSet; ++i) live.push_back(must_allocate(*alloc, plan.sizes[i], state));
  for (auto _ : state) {
    void* p = must_allocate(*alloc, bytes, state);
    benchmark::DoNotOptimize(p);
    alloc->deallocate(p);
  }
  for (void* p : live) alloc->deallocate(p);
  state.SetItemsProcessed(2 * state.iterations());
}
BENCHMARK(BM_BfcAllocFreePair)->Arg(256)->Arg(64 << 10)->Arg(4 << 20);

}  // namespace
}  // namespace lms
