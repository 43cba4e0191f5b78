// What profiling costs a training step: the same VDSR step with and without the
// profiler's Recorder as the session's event sink (target: under 3% of step
// time). Prints both step times and the overhead.
//
//   build-release/bench/profiling_overhead_bench
#include <benchmark/benchmark.h>

#include <memory>
#include <random>

#include "lms/device.h"
#include "lms/profiler/recorder.h"
#include "lms/session.h"
#include "lms/training.h"
#include "models.h"

namespace lms {
namespace {

constexpr uint64_t kMiB = 1 << 20;

struct Fixture {
  Graph train;
  std::unique_ptr<Device> device;
  Feeds feeds;
  Recorder recorder;
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    Graph g;
    auto m = models::build_vdsr(g, {.batch = 8, .height = 32, .width = 32});
    fx->train = *training_graph(g, m.loss, Adam{.lr = 1e-4});
    fx->device = *make_cpu_device({.capacity_bytes = 1024 * kMiB});
    std::mt19937_64 gen(1);
    std::uniform_real_distribution<float> u(0, 1);
    std::vector<float> lr(8 * 32 * 32), hr(lr.size());
    for (float& x : lr) x = u(gen);
    for (float& x : hr) x = u(gen);
    fx->feeds = {{"lr", lr}, {"hr", hr}};
    return fx;
  }();
  return *f;
}

void BM_VdsrStep(benchmark::State& state) {
  Fixture& f = fixture();
  const bool profiled = state.range(0) != 0;
  SessionOptions options;
  if (profiled) options.sink = &f.recorder;
  auto session = Session::create(f.train, *f.device, options);
  if (!session.ok()) {
    state.SkipWithError(std::string(session.status().message()).c_str());
    return;
  }
  StepResult r;
  (void)(*session)->run(f.feeds, &r);  // warm-up
  for (auto _ : state) {
    f.recorder.clear();
    absl::Status s = (*session)->run(f.feeds, &r);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  }
  state.SetLabel(profiled ? "profiled (Recorder sink)" : "no sink");
  state.counters["events"] = profiled ? static_cast<double>(f.recorder.event_count()) : 0;
}
BENCHMARK(BM_VdsrStep)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3);

}  // namespace
}  // namespace lms
