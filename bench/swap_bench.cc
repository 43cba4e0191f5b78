// Planner and pass cost on generated training-like graphs: a forward chain of
// relu / scale / add(previous, recent tensor) nodes followed by a mirrored
// "backward" chain in which node i reads forward activation i, so, as in
// training, every activation is live from the forward to the backward pass
// and has one long idle interval. The device budget is the midpoint between
// the working-set limit and the unswapped peak.
//
//   swap_bench --benchmark_filter=Auto
#include <random>
#include <string>

#include "benchmark/benchmark.h"
#include "lms/graph.h"
#include "lms/ops.h"
#include "lms/rewrite.h"
#include "swap/cost_model.h"
#include "swap/liveness.h"
#include "swap/planner.h"

namespace {

lms::Graph training_like(int nodes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  lms::Graph g;
  std::vector<lms::TensorId> fwd = {g.input("x", {1, 4, 16, 16})};
  const int half = nodes / 2;
  for (int i = 0; i < half; ++i) {
    std::string name = "f";
    name += std::to_string(i);
    const lms::TensorId prev = fwd.back();
    switch (rng() % 3) {
      case 0:
        fwd.push_back(lms::relu(g, name, prev));
        break;
      case 1:
        fwd.push_back(lms::scale(g, name, prev, 0.5));
        break;
      default: {
        const size_t back = 1 + rng() % std::min<size_t>(fwd.size(), 16);
        fwd.push_back(lms::add(g, name, prev, fwd[fwd.size() - back]));
      }
    }
  }
  lms::TensorId grad = fwd.back();
  for (int i = half - 1; i >= 0 && g.num_nodes() < nodes - 1; --i) {
    std::string name = "b";
    name += std::to_string(i);
    grad = lms::add(g, name, grad, fwd[i]);
  }
  g.set_loss(lms::reduce_mean(g, "loss", grad));
  return g;
}

// ws + fraction * (peak - ws), before the fragmentation reserve.
uint64_t budget_between(const lms::Graph& g, double fraction) {
  auto live = lms::swap::analyze(g, {});
  const uint64_t peak = lms::swap::memory_profile(*live).peak;
  const uint64_t ws = lms::swap::working_set_limit(*live).bytes;
  return static_cast<uint64_t>(static_cast<double>(ws) / 0.95 +
                               fraction * static_cast<double>(peak - ws));
}
uint64_t midpoint_budget(const lms::Graph& g) { return budget_between(g, 0.5); }

void BM_AnalyzeAndPlanAuto(benchmark::State& state) {
  const lms::Graph g = training_like(static_cast<int>(state.range(0)), 1);
  lms::swap::AutoOptions options;
  options.budget_bytes = midpoint_budget(g);
  size_t swapped = 0;
  for (auto _ : state) {
    auto live = lms::swap::analyze(g, {});
    lms::swap::CostModel cost(g, {});
    auto plan =
        lms::swap::plan_auto(&g, *live, lms::swap::times_by_position(cost, live->order), options);
    if (!plan.ok()) state.SkipWithError(std::string(plan.status().message()).c_str());
    swapped = plan.ok() ? plan->items.size() : 0;
    benchmark::DoNotOptimize(plan);
  }
  state.counters["swapped"] = static_cast<double>(swapped);
  state.SetComplexityN(state.range(0));
}

// A budget just above the working-set limit: nearly every activation swapped.
void BM_PlanAutoTight(benchmark::State& state) {
  const lms::Graph g = training_like(static_cast<int>(state.range(0)), 1);
  auto live = lms::swap::analyze(g, {});
  lms::swap::CostModel cost(g, {});
  const std::vector<double> times = lms::swap::times_by_position(cost, live->order);
  lms::swap::AutoOptions options;
  options.budget_bytes = budget_between(g, 0.02);
  size_t swapped = 0;
  for (auto _ : state) {
    auto plan = lms::swap::plan_auto(&g, *live, times, options);
    if (!plan.ok()) state.SkipWithError(std::string(plan.status().message()).c_str());
    swapped = plan.ok() ? plan->items.size() : 0;
    benchmark::DoNotOptimize(plan);
  }
  state.counters["swapped"] = static_cast<double>(swapped);
  state.SetComplexityN(state.range(0));
}

// range(1): LmsConfig::auto_actions (0 swap, 1 recompute, 2 joint).
void BM_RewriteAuto(benchmark::State& state) {
  const lms::Graph g = training_like(static_cast<int>(state.range(0)), 1);
  lms::LmsConfig config;
  config.device_memory_limit = midpoint_budget(g);
  config.auto_actions = static_cast<lms::AutoActions>(state.range(1));
  double stall = 0;
  for (auto _ : state) {
    state.PauseTiming();
    lms::Graph copy = g;
    state.ResumeTiming();
    auto rep = lms::rewrite(copy, config);
    if (!rep.ok()) state.SkipWithError(std::string(rep.status().message()).c_str());
    stall = rep.ok() ? rep->stall_s : 0;
    benchmark::DoNotOptimize(rep);
  }
  state.counters["stall_s"] = stall;
  state.SetComplexityN(state.range(0));
}

void BM_RewriteTflms(benchmark::State& state) {
  const lms::Graph g = training_like(static_cast<int>(state.range(0)), 1);
  lms::LmsConfig config;
  config.policy = lms::SwapPolicy::kTflms;
  config.swapout_threshold = 8;
  for (auto _ : state) {
    state.PauseTiming();
    lms::Graph copy = g;
    state.ResumeTiming();
    auto rep = lms::rewrite(copy, config);
    if (!rep.ok()) state.SkipWithError(std::string(rep.status().message()).c_str());
    benchmark::DoNotOptimize(rep);
  }
  state.SetComplexityN(state.range(0));
}

BENCHMARK(BM_AnalyzeAndPlanAuto)
    ->RangeMultiplier(10)
    ->Range(1000, 100000)
    ->Unit(benchmark::kMillisecond)
    ->Complexity(benchmark::oNLogN);
BENCHMARK(BM_PlanAutoTight)
    ->RangeMultiplier(10)
    ->Range(1000, 100000)
    ->Unit(benchmark::kMillisecond)
    ->Complexity(benchmark::oNLogN);
BENCHMARK(BM_RewriteAuto)
    ->ArgsProduct({{1000, 2000, 10000, 100000}, {0, 1, 2}})
    ->ArgNames({"nodes", "actions"})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RewriteTflms)
    ->RangeMultiplier(10)
    ->Range(1000, 100000)
    ->Unit(benchmark::kMillisecond)
    ->Complexity(benchmark::oNLogN);

}  // namespace
