// Seeded property tests over random DAG training graphs (random_dags.h:
// branches, concat and add skips, tensors read by far-apart consumers, 2-D
// and 3-D convolutions, pooling, upsampling, transposed convolutions), run
// on the CPU device through the public API only.
//
// For every graph, with B0 the device bytes of the unchanged step
// (RewriteReport::peak_bytes_after with LMS off) and W its working-set limit:
//  - on a roomy device and on a device of exactly B0 bytes, the unchanged
//    step fits and runs; the allocator's peak is B0 to the byte; the
//    executor's count by position never exceeds B0 and its maximum is the
//    persistent bytes plus the arena's lower bound (the layout's profile);
//  - one alignment unit below B0, and at the budgets below, LMS off reports
//    fits = false and Session::create fails with ResourceExhausted, leaving
//    no device memory in use;
//  - at budgets from W to B0 (half way, W + 5% and W itself) on a device of
//    that capacity, LMS auto either finds no plan (ResourceExhausted,
//    allowed) or reports fits; then the step runs at the predicted peak with
//    the same by-position properties and the predicted D2H / H2D bytes, and
//    after kSteps steps every fetched loss and every persistent tensor is
//    bit-identical to the run without LMS; at least half of these budgets
//    must fit.
// Seeds are fixed and printed with every graph; the devices run one compute
// thread (tiny kernels; OpenMP spinning on a loaded 2-core machine costs
// ten times the test's time).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lms/config.h"
#include "lms/device.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/types.h"
#include "random_dags.h"

namespace lms {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int kSteps = 2;
constexpr int kGraphsPerRank = 8;
constexpr uint64_t kSeed2d = 0x52414e44'32440001;  // "RAND" "2D"
constexpr uint64_t kSeed3d = 0x52414e44'33440001;  // "RAND" "3D"

using State = std::map<std::string, std::vector<float>>;

struct Run {
  std::vector<float> losses;  // fetched loss, by step
  State state;                // persistent tensors after the last step
};

State persistent_state(const Session& s) {
  State state;
  for (const std::string& name : s.persistent_tensors()) {
    absl::StatusOr<std::vector<float>> v = s.read(name);
    EXPECT_TRUE(v.ok()) << name << ": " << v.status();
    if (v.ok()) state.emplace(name, *std::move(v));
  }
  return state;
}

// Names of the tensors whose bits differ (empty when identical).
std::vector<std::string> differing(const State& a, const State& b) {
  std::vector<std::string> out;
  for (const auto& [name, values] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != values.size() ||
        std::memcmp(it->second.data(), values.data(), values.size() * sizeof(float)) != 0) {
      out.push_back(name);
    }
  }
  if (a.size() != b.size()) out.push_back("<a different set of tensors>");
  return out;
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// The executor's own count by position against the plan: never above the
// session's device bytes, and at most exactly persistent + the arena's lower
// bound (the layout's profile peak).
void expect_by_position(const StepResult& r, const RewriteReport& rep, int32_t positions,
                        const char* what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(r.device_bytes_by_position.size(), static_cast<size_t>(positions));
  uint64_t max = 0;
  for (size_t p = 0; p < r.device_bytes_by_position.size(); ++p) {
    const uint64_t b = r.device_bytes_by_position[p];
    EXPECT_LE(b, rep.peak_bytes_after) << "position " << p;
    EXPECT_GE(b, rep.arena_persistent_bytes) << "position " << p;
    max = std::max(max, b);
  }
  EXPECT_EQ(r.device_bytes_by_position, rep.device_bytes_by_position)
      << "measured bytes by position differ from the plan's";
  EXPECT_EQ(max, rep.arena_persistent_bytes + rep.arena_lower_bound_bytes)
      << "max of device_bytes_by_position vs persistent " << rep.arena_persistent_bytes
      << " + arena lower bound " << rep.arena_lower_bound_bytes;
}

// kSteps steps of `graph` (planned for `device`) with `feeds[i]`; checks each
// step against `rep` (the peak, the by-position count).
Run run_steps(const Graph& graph, Device& device, const std::vector<Feeds>& feeds,
              const RewriteReport& rep, const char* what) {
  SCOPED_TRACE(what);
  Run run;
  auto session = Session::create(graph, device);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return run;
  const std::string loss = graph.tensor(graph.loss()).name;
  for (int i = 0; i < kSteps; ++i) {
    SCOPED_TRACE(testing::Message() << "step " << i);
    StepResult r;
    const absl::Status s = (*session)->run(feeds[i], &r);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return run;
    EXPECT_EQ(r.peak_device_bytes, rep.peak_bytes_after)
        << "allocator peak vs RewriteReport::peak_bytes_after";
    expect_by_position(r, rep, graph.num_nodes(), what);
    EXPECT_EQ(r.bytes_d2h, rep.bytes_out_per_step);
    EXPECT_EQ(r.bytes_h2d, rep.bytes_in_per_step);
    auto it = r.fetched.find(loss);
    EXPECT_TRUE(it != r.fetched.end() && it->second.size() == 1) << "no fetched " << loss;
    if (it != r.fetched.end() && !it->second.empty()) run.losses.push_back(it->second[0]);
  }
  run.state = persistent_state(**session);
  return run;
}

void expect_same_run(const Run& run, const Run& reference, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(run.losses.size(), reference.losses.size());
  for (size_t i = 0; i < run.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&run.losses[i], &reference.losses[i], sizeof(float)), 0)
        << "step " << i << " loss " << run.losses[i] << " vs " << reference.losses[i];
  }
  EXPECT_FALSE(run.state.empty());
  const std::vector<std::string> diff = differing(run.state, reference.state);
  EXPECT_TRUE(diff.empty()) << "persistent tensors differ: " << join(diff);
}

std::unique_ptr<Device> cpu_device(uint64_t capacity) {
  // One compute thread: the kernels are tiny, and OpenMP threads spinning on
  // a loaded 2-core machine cost more than they give.
  auto d = make_cpu_device(
      {.capacity_bytes = capacity, .host_pool_bytes = 64 * kMiB, .compute_threads = 1});
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(*d) : nullptr;
}

// LMS off planned for a device of `capacity` < B0: fits is false and the
// session cannot be created; the failed create leaves nothing allocated.
void expect_no_fit_without_lms(const Graph& train, uint64_t capacity) {
  SCOPED_TRACE(testing::Message() << "LMS off at " << capacity << " bytes");
  std::unique_ptr<Device> device = cpu_device(capacity);
  ASSERT_NE(device, nullptr);
  Graph g = train;
  LmsConfig off;
  off.enabled = false;
  auto rep = rewrite(g, off, *device);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_FALSE(rep->fits) << rep->summary();
  EXPECT_TRUE(rep->fit_unknown_reason.empty()) << rep->fit_unknown_reason;
  auto session = Session::create(g, *device);
  EXPECT_FALSE(session.ok()) << "created a session on " << capacity << " bytes, the plan needs "
                             << rep->peak_bytes_after;
  if (!session.ok()) {
    EXPECT_EQ(session.status().code(), absl::StatusCode::kResourceExhausted) << session.status();
  }
  session = absl::UnknownError("dropped");  // the session, if any, is gone
  EXPECT_EQ(device->memory_stats().bytes_in_use, 0u);
}

struct Tally {
  int lms_budgets = 0;  // budgets between W and B0 tried with LMS
  int lms_fits = 0;
  int lms_no_plan = 0;
  int swapped_runs = 0;          // runs that fit with at least one swap
  int least_workspace_runs = 0;  // runs with least-workspace kernels
  int graphs = 0;
  int searched_b0 = 0;  // graphs whose searched layout fits below the roomy one
};

void check_graph(uint64_t seed, int rank, Tally& tally) {
  auto dag = random_dags::random_dag(seed, rank);
  ASSERT_TRUE(dag.ok()) << dag.status();
  const Graph& train = dag->train;
  std::printf("seed %#" PRIx64 " rank %d: %d nodes, %d tensors: %s\n", seed, rank,
              train.num_nodes(), train.num_tensors(), dag->description.c_str());
  std::vector<Feeds> feeds;
  for (int i = 0; i < kSteps; ++i) feeds.push_back(random_dags::random_feeds(train, seed + i));

  // B0 and W on a roomy device, and the reference run without LMS.
  LmsConfig off;
  off.enabled = false;
  std::unique_ptr<Device> big = cpu_device(64 * kMiB);
  ASSERT_NE(big, nullptr);
  Graph plain = train;
  auto base = rewrite(plain, off, *big);
  ASSERT_TRUE(base.ok()) << base.status();
  ASSERT_TRUE(base->fits) << base->summary();
  // On a roomy device the layout is not searched; on a device just below
  // its peak the searched layout (Notes [Squeaky wheel] and [Random tie
  // orders] in src/swap/placement.h) may still fit. B0 is the least device
  // the graph fits on without LMS: a device B0 bytes large fits, one
  // alignment unit smaller does not. The search is not monotone in the
  // budget (a layout that peaks at p on a larger device may not be found
  // on a device of exactly p), so each candidate is a device tried.
  const uint64_t align = big->memory_stats().alignment_bytes;
  auto fits_on = [&](uint64_t capacity, uint64_t* peak) {
    std::unique_ptr<Device> device = cpu_device(capacity);
    if (device == nullptr) return false;
    Graph g = train;
    auto rep = rewrite(g, off, *device);
    if (!rep.ok() || !rep->fits) return false;
    *peak = rep->peak_bytes_after;
    return true;
  };
  uint64_t b0 = 0, peak = 0;
  ASSERT_TRUE(fits_on(base->peak_bytes_after, &peak));
  b0 = base->peak_bytes_after;
  while (fits_on(b0 - align, &peak)) {
    ASSERT_LT(peak, b0);
    b0 -= align;
    uint64_t tighter = 0;
    if (peak < b0 && fits_on(peak, &tighter)) b0 = peak;
  }
  ++tally.graphs;
  tally.searched_b0 += b0 < base->peak_bytes_after;
  const uint64_t w = base->working_set_limit_bytes;
  EXPECT_EQ(base->peak_bytes_after, base->arena_persistent_bytes + base->arena_bytes);
  EXPECT_GE(base->arena_bytes, base->arena_lower_bound_bytes);
  EXPECT_GE(b0, base->arena_persistent_bytes + base->arena_lower_bound_bytes);
  // A working set is part of what is live at its position.
  EXPECT_LE(w, base->arena_persistent_bytes + base->arena_lower_bound_bytes);
  std::printf("  B0 %" PRIu64 " (roomy device: persistent %" PRIu64 " + arena %" PRIu64
              ", bound %" PRIu64 "), W %" PRIu64 "\n",
              b0, base->arena_persistent_bytes, base->arena_bytes, base->arena_lower_bound_bytes,
              w);
  const Run reference = run_steps(plain, *big, feeds, *base, "reference, roomy device");
  ASSERT_EQ(reference.losses.size(), static_cast<size_t>(kSteps));

  // Exactly B0 bytes: fits without LMS, same results.
  {
    std::unique_ptr<Device> exact = cpu_device(b0);
    ASSERT_NE(exact, nullptr);
    Graph g = train;
    auto rep = rewrite(g, off, *exact);
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_TRUE(rep->fits) << rep->summary();
    EXPECT_LE(rep->peak_bytes_after, b0);
    const Run run = run_steps(g, *exact, feeds, *rep, "LMS off on a device of B0 bytes");
    expect_same_run(run, reference, "LMS off on a device of B0 bytes");
  }
  // One alignment unit less: does not fit.
  expect_no_fit_without_lms(train, b0 - big->memory_stats().alignment_bytes);

  ASSERT_LT(w, b0);
  std::vector<uint64_t> budgets = {w + (b0 - w) / 2};
  if (w + w / 20 < b0) budgets.push_back(w + w / 20);
  budgets.push_back(w);
  for (size_t k = 0; k < budgets.size(); ++k) {
    const uint64_t budget = budgets[k];
    // The half-way budget plans with the default measured time model (plans
    // may vary from run to run), the tight ones with the roofline
    // (deterministic plans).
    const bool measured = k == 0;
    SCOPED_TRACE(testing::Message() << "budget " << budget << (measured ? " measured" : ""));
    expect_no_fit_without_lms(train, budget);

    std::unique_ptr<Device> device = cpu_device(budget);
    ASSERT_NE(device, nullptr);
    Graph g = train;
    LmsConfig cfg;
    if (!measured) cfg.time_model = TimeModel::kRoofline;
    ++tally.lms_budgets;
    auto rep = rewrite(g, cfg, *device);
    if (!rep.ok()) {
      EXPECT_EQ(rep.status().code(), absl::StatusCode::kResourceExhausted) << rep.status();
      std::printf("  budget %" PRIu64 " (%s): no plan: %s\n", budget,
                  measured ? "measured" : "roofline", std::string(rep.status().message()).c_str());
      ++tally.lms_no_plan;
      continue;
    }
    std::printf("  budget %" PRIu64 " (%s): fits %d, %zu swapped, %zu recomputed, peak %" PRIu64
                " (arena %" PRIu64 ", bound %" PRIu64 ")\n",
                budget, measured ? "measured" : "roofline", rep->fits, rep->swapped.size(),
                rep->recomputed.size(), rep->peak_bytes_after, rep->arena_bytes,
                rep->arena_lower_bound_bytes);
    // A successful auto rewrite with every fact known fits (lms/rewrite.h).
    EXPECT_TRUE(rep->fits) << rep->summary();
    if (!rep->fits) continue;
    ++tally.lms_fits;
    EXPECT_LE(rep->peak_bytes_after, budget);
    // Least-workspace kernels, or weight gradients run first, can make a
    // budget below B0 fit without swaps.
    EXPECT_TRUE(!rep->decisions.empty() || !rep->least_workspace_nodes.empty() ||
                !rep->weight_gradients_first.empty())
        << "fits below B0 with no decision, no least-workspace kernel and no node moved";
    if (!rep->swapped.empty()) ++tally.swapped_runs;
    const Run run = run_steps(g, *device, feeds, *rep, "LMS auto");
    if (rep->least_workspace_nodes.empty()) {
      expect_same_run(run, reference, "LMS auto");
    } else {
      // The rewrite switched convolutions to their least-workspace kernels
      // (lms/types.h kWorkspaceAttr): the reference is the same kernels
      // without LMS.
      ++tally.least_workspace_runs;
      Graph same_kernels = train;
      ASSERT_TRUE(use_least_workspace_kernels(same_kernels, rep->least_workspace_nodes).ok());
      std::unique_ptr<Device> roomy = cpu_device(64 * kMiB);
      ASSERT_NE(roomy, nullptr);
      auto same_rep = rewrite(same_kernels, off, *roomy);
      ASSERT_TRUE(same_rep.ok() && same_rep->fits) << same_rep.status();
      const Run same = run_steps(same_kernels, *roomy, feeds, *same_rep, "same kernels, no LMS");
      expect_same_run(run, same, "LMS auto with least-workspace kernels");
    }
    EXPECT_EQ(device->memory_stats().bytes_in_use, 0u) << "after the session";
  }
}

void check_rank(int rank, uint64_t seed) {
  std::printf("random DAG test, rank %d, seed %#" PRIx64 ", %d graphs\n", rank, seed,
              kGraphsPerRank);
  const auto start = std::chrono::steady_clock::now();
  std::mt19937_64 rng(seed);
  Tally tally;
  for (int i = 0; i < kGraphsPerRank; ++i) {
    const uint64_t graph_seed = rng();
    SCOPED_TRACE(testing::Message() << "graph seed " << std::hex << std::showbase << graph_seed
                                    << std::dec << " rank " << rank);
    check_graph(graph_seed, rank, tally);
  }
  std::printf(
      "LMS off fits below the roomy device's layout in %d of %d graphs (searched layouts); LMS "
      "budgets: %d, fit %d (%d with swaps, %d with least-workspace kernels), no plan %d; "
      "%.1f s\n",
      tally.searched_b0, tally.graphs, tally.lms_budgets, tally.lms_fits, tally.swapped_runs,
      tally.least_workspace_runs, tally.lms_no_plan,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  EXPECT_GE(2 * tally.lms_fits, tally.lms_budgets) << "fewer than half the budgets fit";
}

TEST(RandomDag, TwoDimensionalGraphs) { check_rank(2, kSeed2d); }

TEST(RandomDag, ThreeDimensionalGraphs) { check_rank(3, kSeed3d); }

}  // namespace
}  // namespace lms
