// Planning speed and plan quality of lms::plan_step on the models of the
// benchmarks, through the public API only:
//
//   build-release/bench/plan_speed_bench [--repeat N] [--case unet3d-72]
//
// For each case it prints the graph's nodes, the seconds of the Device
// overload's lms::plan_step (the planning of lms::rewrite; the least of N
// runs; time_model "roofline", so nothing is profiled and the plan is the
// same on every run), the seconds of Session::create on the StepPlan (its
// own layout) and on the planned graph alone (laid out again from its plan
// record), and the plan: fits, the predicted
// peak, the arena against its lower bound, and the plan's swapped and
// recomputed tensors. Cases:
//  - unet3d-72: the main job's Isensee 3-D U-Net (4 levels, 8 base filters,
//    1 channel, 13 classes, deep supervision over 3 levels) at 72^3 under a
//    96 MiB device, with kernel_choice "least_workspace_to_fit" as the main
//    job;
//  - vdsr-100k: VDSR with 11,111 layers (about 100k nodes of the training
//    graph), 16 channels, 16x16, at 80% of its no-LMS peak (at least 5%
//    above its working-set limit);
//  - vdsr-20: VDSR (20 layers, 64 channels), batch 32 of 48x48 crops under
//    256 MiB.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "flags.h"
#include "lms/config.h"
#include "lms/device.h"
#include "lms/graph.h"
#include "lms/plan.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/training.h"
#include "models.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Case {
  std::string name;
  std::function<absl::StatusOr<lms::Graph>()> build;
  // Device capacity in bytes; 0: this fraction of the no-LMS peak.
  uint64_t capacity_bytes = 0;
  double peak_fraction = 0;
  // As the main job, which opts in to reach the working-set limit.
  lms::KernelChoice kernel_choice = lms::KernelChoice::kDefault;
};

absl::StatusOr<lms::Graph> unet3d_72() {
  lms::Graph g;
  const lms::models::ModelTensors t = lms::models::build_isensee_unet(g, {.batch = 1,
                                                                          .in_channels = 1,
                                                                          .classes = 13,
                                                                          .size = 72,
                                                                          .base_filters = 8,
                                                                          .levels = 4,
                                                                          .segmentation_levels = 3,
                                                                          .deep_supervision = true,
                                                                          .seed = 1});
  if (!g.status().ok()) return g.status();
  return lms::training_graph(g, t.loss, lms::Adam{.lr = 1e-3});
}

absl::StatusOr<lms::Graph> vdsr(int64_t batch, int64_t size, int64_t depth, int64_t channels) {
  lms::Graph g;
  const lms::models::ModelTensors t = lms::models::build_vdsr(
      g, {.batch = batch, .height = size, .width = size, .depth = depth, .channels = channels});
  if (!g.status().ok()) return g.status();
  return lms::training_graph(g, t.loss, lms::Adam{.lr = 1e-4});
}

int run_case(const Case& c, int repeat) {
  absl::StatusOr<lms::Graph> train = c.build();
  if (!train.ok()) {
    std::fprintf(stderr, "%s: %s\n", c.name.c_str(), std::string(train.status().message()).c_str());
    return 1;
  }
  uint64_t capacity = c.capacity_bytes;
  if (capacity == 0) {
    auto big = lms::make_cpu_device({.capacity_bytes = uint64_t{8} << 30});
    if (!big.ok()) return 1;
    lms::LmsConfig off;
    off.enabled = false;
    lms::Graph probe = *train;
    auto none = lms::rewrite(probe, off, **big);
    if (!none.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(),
                   std::string(none.status().message()).c_str());
      return 1;
    }
    // That fraction of the peak, but at least 5% above the working-set
    // limit, so that a plan exists.
    capacity = std::max(
        static_cast<uint64_t>(c.peak_fraction * static_cast<double>(none->peak_bytes_after)),
        none->working_set_limit_bytes + none->working_set_limit_bytes / 20);
  }
  // The Device overload plans within the pinned host pool; the pool is
  // reserved lazily, and nothing here runs a step, so it is sized for the
  // largest case's swaps (the 100k-node VDSR holds over 8 GiB on the host).
  auto device =
      lms::make_cpu_device({.capacity_bytes = capacity, .host_pool_bytes = uint64_t{64} << 30});
  if (!device.ok()) return 1;
  lms::LmsConfig cfg;
  cfg.time_model = lms::TimeModel::kRoofline;
  cfg.kernel_choice = c.kernel_choice;
  double best_rewrite_s = 1e30, best_create_s = 1e30, best_graph_create_s = 1e30;
  lms::RewriteReport rep;
  for (int r = 0; r < repeat; ++r) {
    const Clock::time_point start = Clock::now();
    auto plan = lms::plan_step(*train, cfg, **device);
    best_rewrite_s = std::min(best_rewrite_s, seconds_since(start));
    if (!plan.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(),
                   std::string(plan.status().message()).c_str());
      return 1;
    }
    rep = plan->report();
    {
      const Clock::time_point create_start = Clock::now();
      auto session = lms::Session::create(*plan, **device);
      best_create_s = std::min(best_create_s, seconds_since(create_start));
      if (!session.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.name.c_str(),
                     std::string(session.status().message()).c_str());
        return 1;
      }
    }
    // The planned graph alone (as lms::rewrite leaves it): the session lays
    // the step out again from its plan record.
    const lms::Graph g = plan->graph();
    const Clock::time_point graph_start = Clock::now();
    auto session = lms::Session::create(g, **device);
    best_graph_create_s = std::min(best_graph_create_s, seconds_since(graph_start));
    if (!session.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(),
                   std::string(session.status().message()).c_str());
      return 1;
    }
  }
  const double gap = rep.arena_lower_bound_bytes == 0
                         ? 0
                         : 100.0 *
                               static_cast<double>(rep.arena_bytes - rep.arena_lower_bound_bytes) /
                               static_cast<double>(rep.arena_lower_bound_bytes);
  std::printf("%-10s kernel_choice %s\n", c.name.c_str(), lms::kernel_choice_name(c.kernel_choice));
  std::printf(
      "%-10s %7d nodes  plan %7.3f s  create %7.3f s (from the graph %7.3f s)  fits %d  "
      "peak %10" PRIu64 " B of %10" PRIu64 "  arena %10" PRIu64 " (lower bound %10" PRIu64
      ", gap %.2f%%)  %zu swapped %zu recomputed  predicted step %.6f s\n",
      c.name.c_str(), static_cast<int>(train->num_nodes()), best_rewrite_s, best_create_s,
      best_graph_create_s, rep.fits, rep.peak_bytes_after, capacity, rep.arena_bytes,
      rep.arena_lower_bound_bytes, gap, rep.swapped.size(), rep.recomputed.size(),
      rep.step_time_after_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Case> cases = {
      {"unet3d-72", unet3d_72, uint64_t{96} << 20, 0, lms::KernelChoice::kLeastToFit},
      {"vdsr-20", [] { return vdsr(32, 48, 20, 64); }, uint64_t{256} << 20, 0},
      {"vdsr-100k", [] { return vdsr(1, 16, 11111, 16); }, 0, 0.8},
  };
  int repeat = 3;
  std::string only;
  std::vector<std::string> names;
  for (const Case& c : cases) names.push_back(c.name);
  CLI::App app(
      "plan_speed_bench: planning speed and plan quality of lms::rewrite on the benchmarks'\n"
      "models.",
      "plan_speed_bench");
  lms::flags::add_int(app, "--repeat", &repeat, "runs of each rewrite; the least is printed",
                      {.min = 1});
  lms::flags::add_choice(app, "--case", &only, "only this case (default: all)", names);
  if (std::optional<int> exit = lms::flags::parse_main(app, argc, argv, 2)) return *exit;
  int failed = 0;
  for (const Case& c : cases) {
    if (only.empty() || c.name == only) failed += run_case(c, repeat);
  }
  return failed == 0 ? 0 : 1;
}
