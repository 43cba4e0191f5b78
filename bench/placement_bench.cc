// Static placement (swap/placement.h, Note [Static placement]): time to place
// a step's buffers and the arena it needs against the lower bound (the most
// bytes live at one position), on
//  - generated live-range sets shaped like a long training graph, two buffers
//    per position: an activation read 1..3 positions later or, with
//    probability `long %`, kept to its mirrored backward position (a skip
//    tensor; at 100% every forward activation is, as in real training), and
//    a workspace or small tensor; sizes from four feature-map levels, so
//    many are equal;
//  - real training graphs (examples/models, Adam): VDSR (batch 16, 48x48
//    crops), the 2-D U-Net and two 3-D U-Nets, with the kernel workspaces of
//    the CPU device. For these the
//    benchmark also finds the smallest device on which a BFC allocator
//    running the same step fits (swap::replay_step, per-node workspaces):
//    the fragmentation static placement removes.
//
//   placement_bench --benchmark_filter=Random
//   placement_bench --benchmark_filter=Model --benchmark_counters_tabular=true
//
// Counters: lb_MiB = lower bound, arena_MiB, gap_pct = arena / lb - 1,
// breadth = 1 when greedy by breadth won. For the models, device figures
// count persistent tensors too: peak_MiB = memory_profile peak (persistent +
// the most bytes live at one position, per-node workspaces), bfc_MiB = the
// smallest capacity (alignment units, bisection) on which the BFC replay
// fits, static_MiB = persistent + arena (what Session::create allocates),
// and bfc_gap_pct / static_gap_pct their excess over peak_MiB.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "lms/device.h"
#include "lms/graph.h"
#include "lms/session.h"
#include "lms/training.h"
#include "models.h"
#include "swap/liveness.h"
#include "swap/placement.h"
#include "swap/replay.h"

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Two buffers per position over `count / 2` positions; the first half of the
// positions is the forward pass, the second its mirror (the backward pass).
std::vector<lms::swap::PlacementBuffer> training_like_ranges(size_t count, uint64_t seed,
                                                             double long_fraction) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  const int32_t positions = static_cast<int32_t>(std::max<size_t>(count / 2, 2));
  const int32_t forward = positions / 2;
  auto level_bytes = [&](int32_t pos) {
    const int32_t f = pos < forward ? pos : std::max(0, 2 * forward - 1 - pos);
    return (uint64_t{4} << 20) >> (2 * ((f / 50) % 4));  // 4 MiB, 1 MiB, 256 KiB, 64 KiB
  };
  std::vector<lms::swap::PlacementBuffer> buffers;
  buffers.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    const int32_t pos = static_cast<int32_t>(std::min<size_t>(k / 2, positions - 1));
    const uint64_t level = level_bytes(pos);
    if (k % 2 == 0) {
      int32_t last = std::min(positions - 1, pos + 1 + static_cast<int32_t>(rng() % 3));
      if (pos < forward && unit(rng) < long_fraction) last = 2 * forward - 1 - pos;
      buffers.push_back({pos, last, level});
    } else if (rng() % 2 == 0) {
      buffers.push_back({pos, pos, 1024 + rng() % (2 * level)});  // a workspace
    } else {
      const int32_t last = std::min(positions - 1, pos + static_cast<int32_t>(rng() % 8));
      buffers.push_back({pos, last, 256 + rng() % (64 << 10)});  // a small tensor
    }
  }
  return buffers;
}

void set_gap_counters(benchmark::State& state, const lms::swap::Placement& p) {
  state.counters["lb_MiB"] = static_cast<double>(p.lower_bound_bytes) / kMiB;
  state.counters["arena_MiB"] = static_cast<double>(p.arena_bytes) / kMiB;
  state.counters["gap_pct"] =
      p.lower_bound_bytes == 0
          ? 0
          : 100.0 *
                (static_cast<double>(p.arena_bytes) / static_cast<double>(p.lower_bound_bytes) - 1);
  state.counters["breadth"] = p.method == lms::swap::PlacementMethod::kGreedyByBreadth ? 1 : 0;
}

// range(0): buffers; range(1): percent of forward activations kept to the
// backward pass; range(2): heuristics, 1 = greedy by size, 2 = by breadth,
// 3 = both (the default); range(3): 1 = best fit (the default), 0 = first fit.
void BM_PlaceRandom(benchmark::State& state) {
  const auto buffers =
      training_like_ranges(static_cast<size_t>(state.range(0)), 1, state.range(1) / 100.0);
  const lms::swap::PlacementOptions options{.greedy_by_size = (state.range(2) & 1) != 0,
                                            .greedy_by_breadth = (state.range(2) & 2) != 0,
                                            .best_fit = state.range(3) != 0};
  lms::swap::Placement placement;
  for (auto _ : state) {
    auto p = lms::swap::place_buffers(buffers, options);
    if (!p.ok()) {
      state.SkipWithError(std::string(p.status().message()).c_str());
      break;
    }
    placement = std::move(*p);
    benchmark::DoNotOptimize(placement);
  }
  if (auto st = lms::swap::check_placement(buffers, placement, placement.arena_bytes); !st.ok()) {
    state.SkipWithError(std::string(st.message()).c_str());
  }
  set_gap_counters(state, placement);
}
BENCHMARK(BM_PlaceRandom)
    ->ArgNames({"buffers", "long%", "heuristics", "best_fit"})
    ->ArgsProduct({{10000, 100000, 400000}, {5, 100}, {3}, {1}})
    ->ArgsProduct({{400000}, {5, 100}, {1, 2}, {1}})
    ->ArgsProduct({{400000}, {5, 100}, {3}, {0}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The training graph of a model (Adam), its kernel workspaces on a CPU
// device, and its liveness.
struct ModelCase {
  lms::Graph graph;
  std::vector<uint64_t> workspace;
  lms::swap::Liveness live;
};

ModelCase model_case(int which) {
  lms::Graph g;
  lms::models::ModelTensors m;
  if (which == 0) {
    m = lms::models::build_vdsr(g, {.batch = 16, .height = 48, .width = 48});
  } else if (which == 1) {
    m = lms::models::build_unet(g,
                                {.size = 128, .base_filters = 16, .levels = 4, .spatial_dims = 2});
  } else if (which == 2) {
    m = lms::models::build_unet(g, {.size = 32});  // lms-bench unet3d's default
  } else {
    m = lms::models::build_unet(g, {.size = 64, .base_filters = 8, .levels = 4});
  }
  ModelCase c;
  auto train = lms::training_graph(g, m.loss, lms::Adam{1e-4});
  if (!g.status().ok() || !train.ok()) return c;
  c.graph = std::move(*train);
  auto device = lms::make_cpu_device({.capacity_bytes = uint64_t{64} << 20});
  if (device.ok()) {
    auto ws = lms::kernel_workspace_bytes(c.graph, **device);
    if (ws.ok()) c.workspace = std::move(*ws);
  }
  auto live = lms::swap::analyze(c.graph, {.workspace_bytes = c.workspace});
  if (live.ok()) c.live = std::move(*live);
  return c;
}

// The smallest capacity (a multiple of the alignment) on which the BFC
// replay of the step fits, by bisection between the profile peak and twice it.
uint64_t bfc_min_capacity(const ModelCase& c, uint64_t peak) {
  const uint64_t a = c.live.alignment_bytes;
  uint64_t lo = peak / a, hi = 2 * peak / a + 1;  // in alignment units: lo may fail, hi fits
  auto fits = [&](uint64_t units) {
    return lms::swap::replay_step(c.graph, {units * a, a, c.workspace, {}}).ok();
  };
  if (!fits(hi)) return 0;
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return hi * a;
}

const char* const kModelNames[] = {"vdsr_b16_48px", "unet2d_128px_f16_l4", "unet3d_32_f8_l3",
                                   "unet3d_64_f8_l4"};

// range(0): model. Timed: the step layout Session::create computes
// (swap::layout_step: analysis, step buffers with per-node workspaces,
// placement).
void BM_PlaceModel(benchmark::State& state) {
  const ModelCase c = model_case(static_cast<int>(state.range(0)));
  if (c.live.order.empty()) {
    state.SkipWithError("model build or analysis failed");
    return;
  }
  state.SetLabel(kModelNames[state.range(0)]);
  lms::swap::StepLayout layout;
  for (auto _ : state) {
    auto l = lms::swap::layout_step(c.graph, {.workspace_bytes = c.workspace});
    if (!l.ok()) {
      state.SkipWithError(std::string(l.status().message()).c_str());
      break;
    }
    layout = std::move(*l);
  }
  if (auto st = lms::swap::check_placement(layout.step.buffers, layout.placement,
                                           layout.placement.arena_bytes);
      !st.ok()) {
    state.SkipWithError(std::string(st.message()).c_str());
  }
  set_gap_counters(state, layout.placement);
  state.counters["buffers"] = static_cast<double>(layout.step.buffers.size());
  state.counters["persist_MiB"] = static_cast<double>(layout.step.persistent_bytes) / kMiB;
  // Device bytes: the profile peak (the least any device could hold)
  // against the session's persistent tensors + arena, and against the
  // smallest device on which a BFC allocator running the same step fits.
  const uint64_t peak = lms::swap::memory_profile(c.live).peak;
  const uint64_t bfc = bfc_min_capacity(c, peak);
  const double static_bytes = static_cast<double>(layout.device_bytes());
  state.counters["peak_MiB"] = static_cast<double>(peak) / kMiB;
  state.counters["static_MiB"] = static_bytes / kMiB;
  state.counters["bfc_MiB"] = static_cast<double>(bfc) / kMiB;
  state.counters["static_gap_pct"] = 100.0 * (static_bytes / static_cast<double>(peak) - 1);
  state.counters["bfc_gap_pct"] =
      100.0 * (static_cast<double>(bfc) / static_cast<double>(peak) - 1);
}
BENCHMARK(BM_PlaceModel)
    ->ArgNames({"model"})
    ->DenseRange(0, 3)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Planning and placing a ~100k-node training graph: VDSR of range(0) layers
// (Adam; about 9 nodes per layer), batch 1, 16x16 crops. Timed: analyze()
// (schedule and live ranges), step_buffers() and place_buffers(). Workspaces
// are synthetic (compiling 100k kernels is not what is measured): each
// conv node's workspace is its output's size.
void BM_PlanAndPlaceDeepVdsr(benchmark::State& state) {
  lms::Graph g;
  const lms::models::ModelTensors m = lms::models::build_vdsr(
      g, {.batch = 1, .height = 16, .width = 16, .depth = state.range(0), .channels = 16});
  auto train = lms::training_graph(g, m.loss, lms::Adam{1e-4});
  if (!g.status().ok() || !train.ok()) {
    state.SkipWithError("model build failed");
    return;
  }
  std::vector<uint64_t> workspace(train->num_nodes(), 0);
  for (lms::NodeId n = 0; n < train->num_nodes(); ++n) {
    const lms::Node& node = train->node(n);
    const bool conv = node.op == lms::OpKind::kConv || node.op == lms::OpKind::kConvBwdData ||
                      node.op == lms::OpKind::kConvBwdWeights;
    if (conv && !node.outputs.empty()) {
      workspace[n] = train->tensor(node.outputs[0]).bytes();
    }
  }
  lms::swap::Placement placement;
  lms::swap::StepBuffers step;
  for (auto _ : state) {
    auto live = lms::swap::analyze(*train, {.workspace_bytes = workspace});
    if (!live.ok()) {
      state.SkipWithError(std::string(live.status().message()).c_str());
      break;
    }
    auto s = lms::swap::step_buffers(*train, *live, workspace);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.status().message()).c_str());
      break;
    }
    auto p = lms::swap::place_buffers(s->buffers, {.alignment_bytes = live->alignment_bytes});
    if (!p.ok()) {
      state.SkipWithError(std::string(p.status().message()).c_str());
      break;
    }
    step = std::move(*s);
    placement = std::move(*p);
  }
  if (auto st = lms::swap::check_placement(step.buffers, placement, placement.arena_bytes);
      !st.ok()) {
    state.SkipWithError(std::string(st.message()).c_str());
  }
  set_gap_counters(state, placement);
  state.counters["nodes"] = static_cast<double>(train->num_nodes());
  state.counters["buffers"] = static_cast<double>(step.buffers.size());
}
BENCHMARK(BM_PlanAndPlaceDeepVdsr)
    ->ArgNames({"layers"})
    ->Arg(11111)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
