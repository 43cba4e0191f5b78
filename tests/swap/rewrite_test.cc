#include "lms/rewrite.h"

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "gtest/gtest.h"
#include "swap/cost_model.h"
#include "swap/liveness.h"
#include "swap/placement.h"
#include "swap/planner.h"
#include "swap/simulator.h"
#include "swap_test_util.h"

namespace lms {
namespace {

std::string golden_path(const std::string& name) {
  return std::string(LMS_SOURCE_DIR) + "/tests/swap/golden/" + name + ".txt";
}

// Compares `text` with the golden file; LMS_UPDATE_GOLDEN=1 rewrites it.
void expect_golden(const std::string& name, const std::string& text) {
  const std::string path = golden_path(name);
  const char* update = std::getenv("LMS_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path) << text;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing " << path << " (run with LMS_UPDATE_GOLDEN=1)";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(text, expected.str()) << "golden " << path
                                  << " differs (LMS_UPDATE_GOLDEN=1 regenerates)";
}

// The device bytes a session of `g` holds: persistent tensors + the arena of
// its static layout (Note [Step layout]), no workspaces.
uint64_t layout_bytes(const Graph& g) {
  // A planned graph is laid out for its budget and with its placement
  // search bound, as Session::create does (Note [Random tie orders]).
  auto layout = swap::layout_step(g, {}, g.plan_record().budget_bytes,
                                  g.plan_record().placement_search_buffers);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return layout.ok() ? layout->device_bytes() : 0;
}

uint64_t unswapped_peak(const Graph& g) {
  auto live = swap::analyze(g, {});
  EXPECT_TRUE(live.ok());
  return swap::memory_profile(*live).peak;
}

uint64_t working_set(const Graph& g) {
  auto live = swap::analyze(g, {});
  EXPECT_TRUE(live.ok());
  return swap::working_set_limit(*live).bytes;
}

struct PolicyCase {
  const char* name;
  const char* overrides;
  // auto: the budget is this share of the way from the working-set limit to
  // the un-swapped layout (1: 256 bytes under the layout or the profile
  // peak; < 0: the least budget, in 16-byte steps up from the working-set
  // limit, at which the plan kind fits).
  double tightness = 1.0;
};

// The text form of a rewritten graph with rank-3 [N,T,D] tensors, axes
// counted from the end and int64 token ids, the ids among the tensors the
// manual policy swaps: dtype, shapes and axis attributes print, and the
// swap copies keep the int64 dtype.
TEST(Rewrite, GoldenManualOnATokenGraphWithInt64Ids) {
  Graph g;
  const TensorId ids = g.input("ids", {2, 4}, DType::kInt64);
  const TensorId target = g.input("target", {2, 1, 8});
  const TensorId table = g.parameter("table", {10, 8}, Init::he_normal(1, 8));
  const TensorId x = embedding(g, "embed", ids, table);
  const TensorId lo = slice(g, "lo", x, 0, 4, -1);
  const TensorId hi = slice(g, "hi", x, 4, 4, -1);
  const TensorId p = softmax(g, "softmax", concat(g, "halves", {hi, lo}, -1), -1);
  g.set_loss(mse_loss(g, "loss", reduce_mean(g, "token_mean", p, 1), target));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.01});
  ASSERT_TRUE(train.ok()) << train.status();
  LmsConfig config;
  ASSERT_TRUE(config.apply_override("policy=manual").ok());
  ASSERT_TRUE(config.apply_override("tensors=[\"ids\", \"embed\"]").ok());
  Graph rewritten = *train;
  auto rep = rewrite(rewritten, config);
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_TRUE(verify(rewritten).ok());
  EXPECT_EQ(rep->swapped, (std::vector<std::string>{"ids", "embed"}));
  const std::string text = to_text(rewritten);
  EXPECT_NE(text.find("swap_out/ids i64[2,4] host"), std::string::npos) << text;
  expect_golden("manual_token_int64", text + "# plan\n" + rep->plan_text);
}

TEST(Rewrite, GoldenPerPolicyOnConvTrainingGraph) {
  const Graph original = swap_test::conv_training_graph();
  const uint64_t peak = unswapped_peak(original), ws = working_set(original);
  ASSERT_LT(ws, peak);
  const std::vector<PolicyCase> cases = {
      {"tflms", "policy=tflms"},
      {"tflms_sync3", "policy=tflms,swapout_threshold=2,swapin_ahead=2,sync_mode=3"},
      {"vdnn", "policy=vdnn"},
      {"manual", "policy=manual,tensors=relu1"},
      {"auto", "policy=auto"},
      {"auto_swap", "policy=auto,auto_actions=swap"},
      {"auto_recompute", "policy=auto,auto_actions=recompute", -1},
      {"auto_joint_slow_link",
       "policy=auto,auto_actions=joint,link.d2h_bandwidth=10MB/s,link.h2d_bandwidth=10MB/s", 0.3},
  };
  for (const PolicyCase& c : cases) {
    SCOPED_TRACE(c.name);
    LmsConfig config;
    std::stringstream overrides(c.overrides);
    for (std::string kv; std::getline(overrides, kv, ',');) {
      if (kv.find('=') == std::string::npos) kv = "tensors=" + kv;
      ASSERT_TRUE(config.apply_override(kv).ok()) << kv;
    }
    config.fragmentation_reserve = 0;
    config.device_memory_limit = (ws + peak) / 2;
    // Give auto 256 bytes less than the un-swapped graph needs, its layout
    // or the profile peak no layout beats: it has to swap, and its layout
    // has to fit.
    if (config.policy == SwapPolicy::kAuto) {
      const uint64_t layout = layout_bytes(original);
      config.device_memory_limit =
          c.tightness == 1.0
              ? std::min(layout, peak) - 256
              : ws + static_cast<uint64_t>(c.tightness * static_cast<double>(layout - ws));
    }
    // This graph has no kernels: its workspaces are known to be zero, which
    // lets the rewrite decide `fits` (Note [Honest fits]).
    const PlanningFacts facts{.workspace_bytes = std::vector<uint64_t>(original.num_nodes(), 0)};
    if (c.tightness < 0) {
      config.device_memory_limit = ws;
      for (int i = 0; i < 4096; ++i, config.device_memory_limit += 16) {
        Graph probe = original;
        auto r = rewrite(probe, config, facts);
        if (r.ok() && r->fits) break;
      }
    }
    Graph g = original;
    auto rep = rewrite(g, config, facts);
    ASSERT_TRUE(rep.ok()) << rep.status();
    ASSERT_TRUE(verify(g).ok());
    EXPECT_TRUE(rep->fit_unknown_reason.empty()) << rep->fit_unknown_reason;
    {
      // Without the workspaces the same plan cannot be called fitting.
      Graph unknown = original;
      auto guess = rewrite(unknown, config);
      ASSERT_TRUE(guess.ok()) << guess.status();
      EXPECT_FALSE(guess->fits);
      EXPECT_NE(guess->fit_unknown_reason.find("workspaces"), std::string::npos);
      EXPECT_NE(guess->summary().find("cannot say"), std::string::npos) << guess->summary();
    }
    // Recompute-only cannot take this graph below what it needs unchanged
    // (relu1's recompute relieves no position at the peak), and the layout
    // reaches that once ties are broken at random (Note [Random tie
    // orders]): at the least budget it fits, it needs no decision. The
    // recompute golden is auto_joint_slow_link.
    if (config.auto_actions == AutoActions::kRecompute) {
      EXPECT_TRUE(rep->decisions.empty()) << rep->plan_text;
    } else {
      EXPECT_FALSE(rep->decisions.empty());
    }
    // The device bytes of the final graph's layout, never below its profile.
    EXPECT_EQ(rep->peak_bytes_after, layout_bytes(g));
    EXPECT_GE(rep->peak_bytes_after, unswapped_peak(g));
    EXPECT_EQ(rep->peak_bytes_after, rep->arena_persistent_bytes + rep->arena_bytes);
    EXPECT_EQ(rep->peak_bytes_before, peak);
    if (config.policy == SwapPolicy::kAuto) {
      EXPECT_LT(rep->peak_bytes_after, layout_bytes(original));
    }
    if (rep->fits) {
      EXPECT_LE(rep->peak_bytes_after, config.device_memory_limit);
    }
    if (rep->peak_bytes_after > config.device_memory_limit) {
      EXPECT_FALSE(rep->fits);
    }
    if (config.policy == SwapPolicy::kAuto) {
      EXPECT_TRUE(rep->fits);
    }
    expect_golden(c.name, to_text(g) + "# plan\n" + rep->plan_text);
  }
}

TEST(Rewrite, DisabledLeavesTheGraph) {
  Graph g = swap_test::conv_training_graph();
  const std::string before = to_text(g);
  LmsConfig config;
  config.enabled = false;
  auto rep = rewrite(g, config);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_FALSE(rep->enabled);
  EXPECT_TRUE(rep->swapped.empty());
  EXPECT_EQ(to_text(g), before);
  // The profile peak is the bound; the layout holds at least that.
  EXPECT_EQ(rep->peak_bytes_after, layout_bytes(g));
  EXPECT_GE(rep->peak_bytes_after, rep->peak_bytes_before);
  EXPECT_NE(rep->summary().find("disabled"), std::string::npos);
}

TEST(Rewrite, ErrorsNameWhatIsWrong) {
  Graph g = swap_test::conv_training_graph();
  const std::string before = to_text(g);
  LmsConfig manual;
  manual.policy = SwapPolicy::kManual;
  manual.tensors = {"relu1", "no_such_tensor"};
  auto rep = rewrite(g, manual);
  EXPECT_EQ(rep.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rep.status().ToString().find("no_such_tensor"), std::string::npos);

  LmsConfig tiny;  // auto under the working set
  tiny.device_memory_limit = working_set(g) - 1;
  rep = rewrite(g, tiny);
  EXPECT_EQ(rep.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(rep.status().ToString().find("node '"), std::string::npos) << rep.status();

  LmsConfig no_budget;  // auto without any budget
  EXPECT_EQ(rewrite(g, no_budget).status().code(), absl::StatusCode::kInvalidArgument);

  LmsConfig host;
  host.policy = SwapPolicy::kTflms;
  host.host_memory_limit = 1;
  EXPECT_EQ(rewrite(g, host).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(to_text(g), before);  // failures leave the graph unchanged
}

TEST(Rewrite, ReportIsConsistent) {
  Graph g = swap_test::conv_training_graph();
  LmsConfig config;
  config.policy = SwapPolicy::kTflms;
  PlanningFacts facts;
  facts.device_capacity_bytes = 1 << 30;
  auto rep = rewrite(g, config, facts);
  ASSERT_TRUE(rep.ok()) << rep.status();
  uint64_t out = 0;
  for (const std::string& name : rep->swapped) out += g.tensor(g.find_tensor(name)).bytes();
  EXPECT_EQ(rep->bytes_out_per_step, out);
  EXPECT_GE(rep->bytes_in_per_step, out);
  EXPECT_EQ(rep->budget_bytes, uint64_t{1} << 30);
  EXPECT_GE(rep->step_time_after_s, rep->step_time_before_s - 1e-12);
  EXPECT_GE(rep->stall_s, 0);
  EXPECT_NE(rep->summary().find("tflms"), std::string::npos);
}

TEST(Rewrite, RuntimeWorkspaceAndMeasuredTimesAreUsed) {
  Graph g = swap_test::conv_training_graph();
  const int nodes = g.num_nodes();
  PlanningFacts facts;
  std::vector<uint64_t> workspace(g.num_nodes(), 0);
  workspace[g.find_node("conv2")] = 1 << 20;  // 1 MiB of scratch
  facts.workspace_bytes = std::move(workspace);
  facts.node_time_s.assign(g.num_nodes(), 1e-3);
  LmsConfig config;
  // conv2's workspace is a buffer of its own, live while conv2 runs (Note
  // [Step buffers]), so conv2's working set holds the 1 MiB.
  config.device_memory_limit = 1 << 20;
  auto rep = rewrite(g, config, facts);
  EXPECT_EQ(rep.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(rep.status().ToString().find("needs"), std::string::npos) << rep.status();
  config.device_memory_limit = 4 << 20;
  rep = rewrite(g, config, facts);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_GT(rep->working_set_limit_bytes, uint64_t{1} << 20);
  EXPECT_GT(rep->peak_bytes_before, uint64_t{1} << 20);
  // Every node takes 1 ms on the one compute stream: the unswapped step is
  // exactly 1 ms per node after the upload of the fed inputs, one copy each
  // over the link (SimOptions::input_upload_s).
  double upload_s = 0;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    if (g.tensor(t).role != TensorRole::kInput || g.tensor(t).consumers.empty()) continue;
    upload_s += config.link.copy_latency_s +
                static_cast<double>(g.tensor(t).bytes()) / config.link.h2d_bytes_per_s;
  }
  EXPECT_GT(upload_s, 0);
  EXPECT_NEAR(rep->step_time_before_s, 1e-3 * nodes + upload_s, 1e-12);
}

// LmsConfig::link_devices: the same TFLMS plan (a rule, so the link does not
// change it) is predicted slower when two devices share the link, and a
// count below 1 is refused before anything changes.
TEST(Rewrite, ASharedLinkSlowsThePredictedStep) {
  LmsConfig config;
  config.policy = SwapPolicy::kTflms;
  config.link = {.d2h_bytes_per_s = 1e6, .h2d_bytes_per_s = 1e6, .copy_latency_s = 0};
  PlanningFacts facts;
  facts.device_capacity_bytes = 1 << 30;
  std::vector<RewriteReport> reports;
  for (int k : {1, 2}) {
    Graph g = swap_test::conv_training_graph();
    facts.node_time_s.assign(g.num_nodes(), 1e-4);
    config.link_devices = k;
    auto rep = rewrite(g, config, facts);
    ASSERT_TRUE(rep.ok()) << rep.status();
    reports.push_back(*rep);
  }
  ASSERT_FALSE(reports[0].swapped.empty());
  EXPECT_EQ(reports[1].swapped, reports[0].swapped);
  EXPECT_GT(reports[1].step_time_after_s, reports[0].step_time_after_s);
  EXPECT_GE(reports[1].stall_s, reports[0].stall_s);

  Graph g = swap_test::conv_training_graph();
  const std::string before = to_text(g);
  config.link_devices = 0;
  auto rep = rewrite(g, config, facts);
  EXPECT_EQ(rep.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rep.status().ToString().find("link_devices"), std::string::npos) << rep.status();
  EXPECT_EQ(to_text(g), before);
}

// Property: for random chain/skip graphs and random budgets between the
// working-set limit and the unswapped peak, auto's plan fits the usable
// budget in the rewritten graph's exact profile, the graph verifies, and the
// simulated executor never runs out of memory under the budget.
TEST(Rewrite, AutoFitsRandomBudgetsOnRandomGraphs) {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    std::mt19937_64 rng(seed * 7919);
    Graph g = swap_test::random_chain(seed, 20 + static_cast<int>(rng() % 80));
    const uint64_t peak = unswapped_peak(g), ws = working_set(g);
    const double reserve = 0.05;
    const uint64_t lo = static_cast<uint64_t>(ws / (1 - reserve)) + 1;
    const uint64_t hi = static_cast<uint64_t>(peak / (1 - reserve));
    if (lo >= hi) continue;
    // In whole 256-byte units, as a device's allocator holds its capacity and
    // the rewrite plans (Note [Capacity units]).
    const uint64_t budget = (lo + rng() % (hi - lo) + 255) / 256 * 256;
    SCOPED_TRACE(testing::Message() << "seed " << seed << " budget " << budget);
    LmsConfig config;
    config.device_memory_limit = budget;
    config.fragmentation_reserve = reserve;
    auto rep = rewrite(g, config);
    ASSERT_TRUE(rep.ok()) << rep.status();
    ASSERT_TRUE(verify(g).ok());
    EXPECT_LE(unswapped_peak(g), swap::usable_budget(budget, reserve));
    auto live = swap::analyze(g, {});
    swap::CostModel cost(g, {});
    swap::SimResult sim = swap::simulate(g, *live, swap::times_by_position(cost, live->order),
                                         {.device_budget_bytes = budget});
    EXPECT_FALSE(sim.out_of_memory);
    EXPECT_LE(sim.peak_device_bytes, budget);
  }
}

}  // namespace
}  // namespace lms
