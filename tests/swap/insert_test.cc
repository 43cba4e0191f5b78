#include "swap/insert.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "swap/planner.h"
#include "swap/release_plan.h"
#include "swap/simulator.h"
#include "swap_test_util.h"

namespace lms::swap {
namespace {

using swap_test::kSkipGraph;
using swap_test::parse_or_die;

std::vector<std::string> schedule_names(const Graph& g) {
  auto order = schedule(g);
  EXPECT_TRUE(order.ok());
  std::vector<std::string> names;
  for (NodeId n : *order) names.push_back(g.node(n).name);
  return names;
}

SwapPlan skip_plan(const Graph& g) {
  SwapPlan plan;
  plan.items.push_back(
      {g.find_tensor("a"), g.find_node("a"), {{g.find_node("e"), {g.find_node("d")}}}, kNoNode});
  return plan;
}

TEST(Insert, SkipGraphStructureAndProfile) {
  Graph g = parse_or_die(kSkipGraph);
  auto live = analyze(g, {});
  ASSERT_TRUE(live.ok());
  SwapPlan plan = skip_plan(g);
  const uint64_t planned = plan_profile(*live, plan).peak;
  ASSERT_TRUE(insert_swaps(g, *live, plan).ok());
  ASSERT_TRUE(verify(g).ok());
  EXPECT_EQ(schedule_names(g), (std::vector<std::string>{"a", "swap_out/a", "b", "c", "e",
                                                         "swap_in/a/0", "d", "loss"}));
  const Node& d = g.node(g.find_node("d"));
  EXPECT_EQ(g.tensor(d.inputs[1]).name, "swap_in/a/0");
  EXPECT_EQ(g.tensor(g.find_tensor("swap_out/a")).role, TensorRole::kHost);
  const Node& in = g.node(g.find_node("swap_in/a/0"));
  EXPECT_EQ(in.control_inputs, std::vector<NodeId>{g.find_node("e")});
  // "needs 4 KiB without, 3 KiB with one swap" (swap_test_util.h).
  auto after = analyze(g, {});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(memory_profile(*after).peak, 3072u);
  EXPECT_EQ(planned, 3072u);
  // Applying the same plan again would reuse the names.
  auto again = analyze(g, {});
  EXPECT_EQ(insert_swaps(g, *again, skip_plan(g)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Insert, RejectsInvalidPlansAndLeavesTheGraph) {
  Graph g = parse_or_die(kSkipGraph);
  auto live = analyze(g, {});
  ASSERT_TRUE(live.ok());
  const std::string before = to_text(g);
  const NodeId a = g.find_node("a"), b = g.find_node("b"), d = g.find_node("d"),
               e = g.find_node("e");
  const TensorId ta = g.find_tensor("a");
  std::vector<SwapPlan::Item> bad = {
      {ta, d, {{e, {d}}}, kNoNode},                               // trigger before the swap-out
      {ta, a, {{e, {g.find_node("loss")}}}, kNoNode},             // loss does not read a
      {ta, a, {{d, {d}}}, kNoNode},                               // consumer not after trigger
      {ta, a, {{b, {d}}, {e, {d}}}, kNoNode},                     // d served twice
      {g.find_tensor("loss"), g.find_node("loss"), {}, kNoNode},  // fetched
      {ta, a, {{e, {}}}, kNoNode},                                // serves nobody
      {ta, a, {{e, {d}}}, a},                                     // sync_before not after
      {999, a, {}, kNoNode},                                      // no such tensor
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    SwapPlan plan;
    plan.items.push_back(bad[i]);
    absl::Status s = insert_swaps(g, *live, plan);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "case " << i << ": " << s;
    EXPECT_EQ(to_text(g), before) << "case " << i;
  }
  SwapPlan twice;
  twice.items = {{ta, a, {{e, {d}}}, kNoNode}, {ta, a, {{e, {d}}}, kNoNode}};
  EXPECT_EQ(insert_swaps(g, *live, twice).code(), absl::StatusCode::kInvalidArgument);
}

// Property: for TFLMS plans with random options on random chain/skip graphs,
// the rewritten graph verifies and its exact profile peak equals the
// planner's plan_profile peak (insertion order of insert.h).
TEST(Insert, PlanProfileIsExactOnRandomGraphs) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937_64 rng(seed);
    Graph g = swap_test::random_chain(seed, 10 + static_cast<int>(rng() % 40));
    auto live = analyze(g, {});
    ASSERT_TRUE(live.ok());
    TflmsOptions options{static_cast<int32_t>(rng() % 4), 1 + static_cast<int32_t>(rng() % 4),
                         static_cast<int32_t>(rng() % 4), static_cast<int32_t>(rng() % 4), 0};
    SwapPlan plan = plan_tflms(*live, options);
    const MemoryProfile planned = plan_profile(*live, plan);
    ASSERT_TRUE(insert_swaps(g, *live, plan).ok());
    ASSERT_TRUE(verify(g).ok());
    auto after = analyze(g, {});
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(memory_profile(*after).peak, planned.peak);
    EXPECT_LE(planned.peak, memory_profile(*live).peak);
  }
}

// Positions in comments; r is read again at v, q only by r.
constexpr char kChainGraph[] = R"(input x f32[1,1,16,16]
node p = relu(x) -> p f32[1,1,16,16] activation
node q = scale(p) {factor=2.0} -> q f32[1,1,16,16] activation
node r = relu(q) -> r f32[1,1,16,16] activation
node s = relu(r) -> s f32[1,1,16,16] activation
node u = relu(s) -> u f32[1,1,16,16] activation
node v = add(u, r) -> v f32[1,1,16,16] activation
node w = add(v, p) -> w f32[1,1,16,16] activation
node loss = reduce_mean(w) -> loss f32[] activation
loss loss
)";

// Recomputing r before v: its input q is dead there, so q is recomputed
// first from p, which is still live (read again by w).
TEST(Insert, RecomputeChainsThroughDeadInputsToLiveOnes) {
  Graph g = parse_or_die(kChainGraph);
  auto live = analyze(g, {});
  ASSERT_TRUE(live.ok());
  SwapPlan plan;
  plan.items.push_back({g.find_tensor("r"),
                        g.find_node("r"),
                        {{g.find_node("u"), {g.find_node("v")}, /*recompute=*/true}},
                        kNoNode});
  const MemoryProfile planned = plan_profile(*live, plan);
  EXPECT_EQ(to_text(plan, g), "recompute r in=[recompute@{v}]\n");
  std::vector<CloneOrigin> origins;
  ASSERT_TRUE(insert_swaps(g, *live, plan, &origins).ok());
  ASSERT_TRUE(verify(g).ok());
  EXPECT_EQ(schedule_names(g), (std::vector<std::string>{"p", "q", "r", "s", "u", "recompute/r/0/q",
                                                         "recompute/r/0", "v", "w", "loss"}));
  const Node& chain_q = g.node(g.find_node("recompute/r/0/q"));
  EXPECT_EQ(chain_q.op, OpKind::kScale);
  EXPECT_EQ(chain_q.attrs, g.node(g.find_node("q")).attrs);
  EXPECT_EQ(g.tensor(chain_q.inputs[0]).name, "p");
  const Node& chain_r = g.node(g.find_node("recompute/r/0"));
  EXPECT_EQ(g.tensor(chain_r.inputs[0]).name, "recompute/r/0/q");
  EXPECT_EQ(g.tensor(g.node(g.find_node("v")).inputs[1]).name, "recompute/r/0");
  ASSERT_EQ(origins.size(), static_cast<size_t>(g.num_nodes()));
  EXPECT_EQ(origins[g.find_node("recompute/r/0")].clone_of, g.find_node("r"));
  EXPECT_EQ(origins[g.find_node("recompute/r/0/q")].clone_of, g.find_node("q"));
  for (const char* clone : {"recompute/r/0", "recompute/r/0/q"}) {
    EXPECT_EQ(origins[g.find_node(clone)].item, 0) << clone;
    EXPECT_EQ(origins[g.find_node(clone)].restore, 0) << clone;
  }
  EXPECT_EQ(origins[g.find_node("v")].clone_of, kNoNode);
  EXPECT_EQ(origins[g.find_node("v")].item, -1);
  // r is freed after s: during u (position 4) one tensor less is live; the
  // chain's q and r are live only between u and v.
  const int32_t u = live->position[g.find_node("u")];
  EXPECT_EQ(planned.during[u] + 1024, memory_profile(*live).during[u]);
  auto after = analyze(g, {});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(memory_profile(*after).during[after->position[g.find_node("u")]], planned.during[u]);
  EXPECT_LE(memory_profile(*after).peak, planned.peak + 1024);
}

TEST(Insert, RecomputeNeedsLiveOrRecomputableInputs) {
  // a = relu(x) before d: x is a graph input read only by a.
  Graph g = parse_or_die(kSkipGraph);
  auto live = analyze(g, {});
  ASSERT_TRUE(live.ok());
  const std::string before = to_text(g);
  SwapPlan plan;
  plan.items.push_back({g.find_tensor("a"),
                        g.find_node("a"),
                        {{g.find_node("e"), {g.find_node("d")}, true}},
                        kNoNode});
  absl::Status s = insert_swaps(g, *live, plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'x'"), absl::string_view::npos) << s;
  EXPECT_EQ(to_text(g), before);
  // A tensor whose producer is not a forward op cannot be recomputed.
  Graph train = swap_test::conv_training_graph();
  auto tlive = analyze(train, {});
  ASSERT_TRUE(tlive.ok());
  const TensorId grad = train.find_tensor("grad/conv3/data");
  ASSERT_NE(grad, kNoTensor);
  const NodeId producer = train.tensor(grad).producer;
  const NodeId last = train.tensor(grad).consumers.back();
  SwapPlan bad;
  bad.items.push_back({grad, producer, {{producer, {last}, true}}, kNoNode});
  s = insert_swaps(train, *tlive, bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cannot be recomputed"), absl::string_view::npos) << s;
}

// A budget a quarter, half or three quarters of the way from the working-set
// limit of `live` to its peak, drawn from `rng`.
uint64_t budget_between_limit_and_peak(const Liveness& live, std::mt19937_64& rng) {
  const uint64_t peak = memory_profile(live).peak;
  const uint64_t ws = working_set_limit(live).bytes;
  return ws + (peak - ws) * (1 + rng() % 3) / 4;
}

// Auto options whose budget is budget_between_limit_and_peak.
AutoOptions options_between_limit_and_peak(const Liveness& live, std::mt19937_64& rng) {
  AutoOptions options;
  options.budget_bytes = budget_between_limit_and_peak(live, rng);
  return options;
}

// Recompute-only and joint plans on random chains with skips: every plan
// inserts, verifies, serves each planned consumer from a clone of the right
// node, and the result's profile at the original positions is the planned one.
TEST(Insert, RecomputePlansOnRandomGraphs) {
  int recomputed = 0, jitter_changed = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937_64 rng(seed);
    Graph g = swap_test::random_chain(seed, 10 + static_cast<int>(rng() % 40));
    absl::StatusOr<Liveness> live = analyze(g, {});
    ASSERT_TRUE(live.ok());
    AutoOptions options = options_between_limit_and_peak(*live, rng);
    options.actions = rng() % 2 == 0 ? AutoActions::kRecompute : AutoActions::kJoint;
    options.h2d_bytes_per_s = 1e6;  // a slow link: recomputation is cheaper
    const std::vector<double> times(live->size(), 1e-4);
    auto plan = plan_auto(&g, *live, times, options);
    if (!plan.ok()) {
      EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted) << plan.status();
      continue;
    }
    // Every node equally fast: near-ties everywhere. A jittered greedy
    // (Note [Jittered greedy]) plans within the budget too, and at times
    // differently.
    options.jitter_seed = seed;
    auto jittered = plan_auto(&g, *live, times, options);
    ASSERT_TRUE(jittered.ok()) << jittered.status();
    EXPECT_LE(plan_profile(*live, *jittered).peak, options.budget_bytes);
    jitter_changed += to_text(*jittered, g) != to_text(*plan, g);
    if (seed % 2 == 0) plan = std::move(jittered);  // inserted and checked below
    const MemoryProfile planned = plan_profile(*live, *plan);
    EXPECT_LE(planned.peak, options.budget_bytes);
    const Graph original = g;
    std::vector<CloneOrigin> origins;
    ASSERT_TRUE(insert_swaps(g, *live, *plan, &origins).ok()) << to_text(*plan, original);
    ASSERT_TRUE(verify(g).ok());
    for (const SwapPlan::Item& item : plan->items) {
      for (size_t k = 0; k < item.swap_ins.size(); ++k) {
        if (!item.swap_ins[k].recompute) continue;
        ++recomputed;
        const std::string name =
            absl::StrCat("recompute/", original.tensor(item.tensor).name, "/", k);
        const NodeId clone = g.find_node(name);
        ASSERT_NE(clone, kNoNode) << name;
        EXPECT_EQ(origins[clone].clone_of, original.tensor(item.tensor).producer);
        EXPECT_EQ(g.node(clone).op, original.node(origins[clone].clone_of).op);
        EXPECT_EQ(origins[clone].item, &item - plan->items.data());
        EXPECT_EQ(origins[clone].restore, static_cast<int32_t>(k));
        for (NodeId c : item.swap_ins[k].consumers) {
          const std::vector<TensorId>& in = g.node(c).inputs;
          EXPECT_NE(std::find(in.begin(), in.end(), g.find_tensor(name)), in.end());
        }
      }
    }
  }
  EXPECT_GT(recomputed, 5);
  std::printf("%d plans changed by a jittered greedy\n", jitter_changed);
  EXPECT_GT(jitter_changed, 0);
}

// A training graph of `depth` 3x3 conv + relu layers with random channel
// counts and, at random, a skip add from an earlier layer: a chain whose
// recomputes need chains of convolutions at a tight budget.
Graph random_conv_training_graph(uint64_t seed, int depth) {
  std::mt19937_64 rng(seed);
  Graph g;
  const int64_t channels = 2 + static_cast<int64_t>(rng() % 4);
  TensorId x = g.input("image", {2, 1, 32, 32});
  TensorId target = g.input("target", {2, 1, 32, 32});
  std::vector<TensorId> acts;
  TensorId h = x;
  for (int i = 0; i < depth; ++i) {
    const std::string n = std::to_string(i);
    h = relu(g, "relu" + n,
             conv2d(g, "conv" + n, h, channels, {3},
                    {.pad = {1, 1}, .seed = static_cast<uint32_t>(seed * 100 + i)}));
    if (acts.size() > 2 && rng() % 4 == 0) h = add(g, "skip" + n, h, acts[rng() % acts.size()]);
    acts.push_back(h);
  }
  TensorId y = conv2d(g, "out", h, 1, {3}, {.pad = {1, 1}, .seed = 7});
  auto train = training_graph(g, mse_loss(g, "loss", y, target), Sgd{.lr = 0.01});
  EXPECT_TRUE(train.ok()) << train.status();
  return train.ok() ? std::move(*train) : Graph{};
}

// Note [Shared recomputation] on random conv chains, recompute-only and
// joint, at budgets between the working-set limit and the peak: with
// sharing each plan clones at most as many nodes as without it (the same
// greedy choices, minus the intermediates computed twice), its profile at
// the original positions stays within the budget and its inserted graph
// verifies. Some plans clone fewer.
TEST(Insert, SharedRecomputationClonesNoMoreThanSeparateChains) {
  int shared_plans = 0, plans = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937_64 rng(seed);
    const Graph g = random_conv_training_graph(seed, 6 + static_cast<int>(rng() % 12));
    auto live = analyze(g, {});
    ASSERT_TRUE(live.ok());
    AutoOptions options = options_between_limit_and_peak(*live, rng);
    options.actions = rng() % 2 == 0 ? AutoActions::kRecompute : AutoActions::kJoint;
    options.h2d_bytes_per_s = options.d2h_bytes_per_s = 1e6;
    const std::vector<double> times(live->size(), 1e-4);
    int clones[2] = {0, 0};
    bool planned = true;
    for (bool share : {false, true}) {
      options.share_recompute = share;
      auto plan = plan_auto(&g, *live, times, options);
      if (!plan.ok()) {
        EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted) << plan.status();
        planned = false;
        break;
      }
      EXPECT_LE(plan_profile(*live, *plan).peak, options.budget_bytes);
      Graph rewritten = g;
      std::vector<CloneOrigin> origins;
      ASSERT_TRUE(insert_swaps(rewritten, *live, *plan, &origins).ok()) << to_text(*plan, g);
      ASSERT_TRUE(verify(rewritten).ok());
      for (const CloneOrigin& o : origins) clones[share] += o.clone_of != kNoNode;
    }
    if (!planned || clones[0] == 0) continue;
    ++plans;
    EXPECT_LE(clones[1], clones[0]);
    shared_plans += clones[1] < clones[0];
  }
  std::printf("%d of %d plans with recomputes clone fewer nodes with sharing\n", shared_plans,
              plans);
  EXPECT_GT(shared_plans, 0);
}

// Note [Prefetch for recomputation], on random conv training chains planned
// joint with two links slower than the compute (one activation's copy takes
// as long as 70 to 160 nodes, or 7 to 16): the plan with the prefetch is the
// plan without it except that some swap-ins start earlier; it stays within
// the budget; both insert into a valid graph; and its simulated step never
// stalls more, in some plans less.
TEST(Insert, RecomputesReadingASwappedTensorHaveItPrefetched) {
  int earlier = 0, less_stall = 0, plans = 0;
  for (int run = 0; run < 120; ++run) {
    const uint64_t seed = 1 + run % 60;
    const double link = run < 60 ? 2e6 : 2e7;  // bytes/s, both ways
    SCOPED_TRACE(testing::Message() << "seed " << seed << ", link " << link << " B/s");
    std::mt19937_64 rng(seed);
    const Graph g = random_conv_training_graph(seed, 6 + static_cast<int>(rng() % 14));
    auto live = analyze(g, {});
    ASSERT_TRUE(live.ok());
    AutoOptions options = options_between_limit_and_peak(*live, rng);
    options.actions = AutoActions::kJoint;
    options.link_share = 0.5;
    options.h2d_bytes_per_s = options.d2h_bytes_per_s = link;
    const double node_s = 1.0 / 8192;  // exact prefix sums
    const std::vector<double> times(live->size(), node_s);
    SwapPlan plans_by_kind[2];
    double stall[2] = {0, 0};
    bool planned = true;
    for (bool prefetch : {false, true}) {
      SCOPED_TRACE(prefetch ? "with the prefetch" : "without the prefetch");
      options.prefetch_for_recompute = prefetch;
      auto plan = plan_auto(&g, *live, times, options);
      if (!plan.ok()) {
        EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted) << plan.status();
        planned = false;
        break;
      }
      EXPECT_LE(plan_profile(*live, *plan).peak, options.budget_bytes);
      Graph rewritten = g;
      const absl::Status inserted = insert_swaps(rewritten, *live, *plan);
      // Every chain is checked at any depth (live_leaves): seed 1 on the
      // slower link has a recompute whose chain grew past chain()'s depth
      // to a swapped graph input, which the insertion refused before.
      ASSERT_TRUE(inserted.ok()) << inserted << "\n" << to_text(*plan, g);
      ASSERT_TRUE(verify(rewritten).ok());
      auto after = analyze(rewritten, {});
      ASSERT_TRUE(after.ok()) << after.status();
      const SimResult sim =
          simulate(rewritten, *after, std::vector<double>(after->size(), node_s),
                   {.device_budget_bytes = options.budget_bytes, .wait_at_release = true});
      stall[prefetch] = sim.stall_s;
      plans_by_kind[prefetch] = *std::move(plan);
    }
    if (!planned) continue;
    ++plans;
    const SwapPlan& without = plans_by_kind[0];
    const SwapPlan& with = plans_by_kind[1];
    ASSERT_EQ(with.items.size(), without.items.size()) << to_text(with, g);
    bool moved = false;
    for (size_t i = 0; i < with.items.size(); ++i) {
      const SwapPlan::Item& a = with.items[i];
      const SwapPlan::Item& b = without.items[i];
      ASSERT_EQ(a.tensor, b.tensor);
      ASSERT_EQ(a.swap_ins.size(), b.swap_ins.size());
      for (size_t k = 0; k < a.swap_ins.size(); ++k) {
        EXPECT_EQ(a.swap_ins[k].recompute, b.swap_ins[k].recompute);
        EXPECT_EQ(a.swap_ins[k].consumers, b.swap_ins[k].consumers);
        const int32_t pa = live->position[a.swap_ins[k].trigger];
        const int32_t pb = live->position[b.swap_ins[k].trigger];
        EXPECT_LE(pa, pb) << "a swap-in moved later";
        moved = moved || pa < pb;
      }
    }
    earlier += moved;
    EXPECT_LE(stall[1], stall[0] + 1e-12) << to_text(with, g);
    less_stall += stall[1] < stall[0] - 1e-12;
  }
  std::printf("%d of %d plans prefetch a swap-in earlier for a recompute; %d stall less\n", earlier,
              plans, less_stall);
  EXPECT_GT(less_stall, 0);
}

// Joint plans with deferred releases (AutoOptions::defer_release) on random
// chains with a link slower than the compute: a swap whose swap-out is not
// done by the original's last reader gets release_after on its swap_out,
// naming the node by which the copy is predicted done; liveness and the
// executor's release plan both hold the original until that node; and the
// rewritten graph's profile stays within the budget wherever the plan only
// swaps.
TEST(Insert, DeferredReleaseHoldsTheOriginalUntilItsSwapOutIsDone) {
  int deferred = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937_64 rng(seed);
    Graph g = swap_test::random_chain(seed, 10 + static_cast<int>(rng() % 40));
    absl::StatusOr<Liveness> live = analyze(g, {});
    ASSERT_TRUE(live.ok());
    AutoOptions options = options_between_limit_and_peak(*live, rng);
    options.actions = AutoActions::kJoint;
    options.defer_release = true;
    options.h2d_bytes_per_s = options.d2h_bytes_per_s = 2e6;
    // A power of two, so the planner's prefix sums are exact.
    const double node_s = 1.0 / 8192;
    const std::vector<double> times(live->size(), node_s);
    auto plan = plan_auto(&g, *live, times, options);
    if (!plan.ok()) {
      EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted) << plan.status();
      continue;
    }
    // The swap-outs queue on the D2H stream in issue order: a release that
    // comes before its copy is done could not have been held longer.
    const MemoryProfile planned = plan_profile(*live, *plan);
    std::vector<const SwapPlan::Item*> queue;
    for (const SwapPlan::Item& item : plan->items) {
      if (copies(item)) queue.push_back(&item);
    }
    std::stable_sort(queue.begin(), queue.end(), [&](const auto* a, const auto* b) {
      return live->position[a->swap_out_after] < live->position[b->swap_out_after];
    });
    double link_free_s = 0;
    for (const SwapPlan::Item* item : queue) {
      const uint64_t bytes = live->tensors[item->tensor].bytes;
      const double issue_s = node_s * (live->position[item->swap_out_after] + 1);
      const double done_s = std::max(issue_s, link_free_s) + options.copy_latency_s +
                            static_cast<double>(bytes) / options.d2h_bytes_per_s;
      link_free_s = done_s;
      if (item->release_after == kNoNode) continue;
      const int32_t from = live->position[item->release_after] + 1;
      const auto done_at = static_cast<int32_t>(std::ceil(done_s / node_s));
      const int32_t trigger = live->position[item->swap_ins.front().trigger];
      if (from >= done_at || done_at > trigger) continue;
      uint64_t most = 0;
      for (int32_t p = from; p < done_at; ++p) most = std::max(most, planned.during[p]);
      EXPECT_GT(most + bytes, options.budget_bytes)
          << g.tensor(item->tensor).name << " released at " << from << ", its copy done at "
          << done_at;
    }
    const Graph original = g;
    ASSERT_TRUE(insert_swaps(g, *live, *plan).ok()) << to_text(*plan, original);
    ASSERT_TRUE(verify(g).ok());
    auto after = analyze(g, {});
    ASSERT_TRUE(after.ok());
    auto releases = release_plan(g, {});
    ASSERT_TRUE(releases.ok());
    bool only_swaps = true;
    for (const SwapPlan::Item& item : plan->items) {
      for (const SwapPlan::SwapIn& in : item.swap_ins) only_swaps = only_swaps && !in.recompute;
      if (item.release_after == kNoNode) continue;
      ++deferred;
      const std::string& name = original.tensor(item.tensor).name;
      const NodeId out = g.find_node(absl::StrCat("swap_out/", name));
      ASSERT_NE(out, kNoNode) << name;
      const auto it = g.node(out).attrs.find("release_after");
      ASSERT_NE(it, g.node(out).attrs.end()) << name;
      EXPECT_EQ(std::get<std::string>(it->second), original.node(item.release_after).name);
      // Held until that node, past the position of its last reader.
      const int32_t hold = after->position[item.release_after];
      EXPECT_EQ(after->tensors[item.tensor].last, hold) << name;
      int32_t last_reader = 0;
      for (NodeId c : g.tensor(item.tensor).consumers) {
        last_reader = std::max(last_reader, after->position[c]);
      }
      EXPECT_GT(hold, last_reader) << name;
      const std::vector<TensorId>& freed = releases->release_after[hold];
      EXPECT_NE(std::find(freed.begin(), freed.end(), item.tensor), freed.end()) << name;
    }
    if (only_swaps) {
      EXPECT_LE(memory_profile(*after).peak, options.budget_bytes);
    }
  }
  EXPECT_GT(deferred, 5);
}

// Joint plans that mix swaps and recomputes, at every link share the
// rewrite tries, on random chains with skips and uneven node times: every
// plan the planner returns inserts (a recompute never reads a swapped input
// that is swapped in only after its restore, even when its chain grew after
// it was chosen); a plan it cannot make so is refused as ResourceExhausted.
TEST(Insert, JointPlansAtEveryLinkShareInsert) {
  int mixed = 0, refused = 0, planned = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937_64 rng(seed);
    const Graph original = random_conv_training_graph(seed, 4 + static_cast<int>(rng() % 12));
    absl::StatusOr<Liveness> live = analyze(original, {});
    ASSERT_TRUE(live.ok());
    AutoOptions options = options_between_limit_and_peak(*live, rng);
    options.actions = AutoActions::kJoint;
    // Activations of 16-40 KiB against convolutions of 50-150 us and other
    // nodes of 5 us: copies from as fast as a convolution to 30x slower, so
    // the greedy weighs swaps against recomputes.
    const double rates[] = {1e7, 3e7, 1e8, 3e8};
    options.h2d_bytes_per_s = options.d2h_bytes_per_s = rates[rng() % 4];
    std::vector<double> times(live->size());
    for (size_t p = 0; p < times.size(); ++p) {
      const OpKind op = original.node(live->order[p]).op;
      const bool conv =
          op == OpKind::kConv || op == OpKind::kConvBwdData || op == OpKind::kConvBwdWeights;
      times[p] = conv ? 5e-5 * static_cast<double>(1 + rng() % 3) : 5e-6;
    }
    for (double share : {1.0, 0.5, 0.0}) {
      options.link_share = share;
      auto plan = plan_auto(&original, *live, times, options);
      if (!plan.ok()) {
        EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted) << plan.status();
        refused += 1;
        continue;
      }
      ++planned;
      bool swaps = false, recomputes = false;
      for (const SwapPlan::Item& item : plan->items) {
        for (const auto& in : item.swap_ins) (in.recompute ? recomputes : swaps) = true;
      }
      mixed += swaps && recomputes;
      Graph g = original;
      ASSERT_TRUE(insert_swaps(g, *live, *plan).ok()) << "share " << share << "\n"
                                                      << to_text(*plan, original);
    }
  }
  std::printf("%d plans inserted (%d with swaps and recomputes), %d refused\n", planned, mixed,
              refused);
  EXPECT_GT(mixed, 20);
}

}  // namespace
}  // namespace lms::swap
