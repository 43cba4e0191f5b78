// The exact reference (bench/exact/exact_plan.h) against enumeration: on
// small random chain networks with skip connections, every keep / swap /
// recompute choice of every gap is evaluated directly from the model's
// definitions (evaluate), and the program's optimum must equal the best of
// them.
#include "exact_plan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <limits>
#include <random>

namespace lms::exact {
namespace {

constexpr double kMiBytes = 1 << 20;

// A training-like schedule of `layers` layers: forward node k (position k)
// reads a_{k-1} (the graph input for k = 0) and, with a skip, a_{k-2};
// it produces a_k. Backward node k (position 2 layers - 1 - k) reads what
// forward k read and the gradient of the node before it, and produces a
// gradient. Sizes 1-4 MiB, node times 1-3 ms, a link of 200-3000 MiB/s.
Problem chain_problem(uint32_t seed, int layers, double limit_fraction) {
  std::mt19937 rng(seed);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  Problem pr;
  const int n = 2 * layers;
  const double mib_per_s = uniform(200, 3000);
  pr.nodes.resize(n);
  for (Problem::Node& node : pr.nodes) {
    node.seconds = uniform(1e-3, 3e-3);
    node.recomputable = true;
  }
  auto add_tensor = [&](int32_t producer, double mib) {
    Problem::Tensor t;
    t.bytes = static_cast<uint64_t>(mib * kMiBytes);
    t.producer = producer;
    t.in_s = 20e-6 + mib / mib_per_s;
    t.out_s = t.in_s;
    pr.tensors.push_back(t);
    return static_cast<int32_t>(pr.tensors.size()) - 1;
  };
  const int32_t input = add_tensor(-1, uniform(1, 4));
  std::vector<int32_t> act(layers);
  std::vector<std::vector<int32_t>> reads(layers);
  for (int k = 0; k < layers; ++k) {
    reads[k].push_back(k == 0 ? input : act[k - 1]);
    if (k >= 2 && rng() % 2 == 0) reads[k].push_back(act[k - 2]);
    act[k] = add_tensor(k, uniform(1, 4));
    pr.nodes[k].inputs = reads[k];
  }
  int32_t grad = -1;
  for (int k = layers - 1; k >= 0; --k) {
    const int32_t p = 2 * layers - 1 - k;
    pr.nodes[p].inputs = reads[k];
    if (grad >= 0) pr.nodes[p].inputs.push_back(grad);
    if (k == layers - 1) pr.nodes[p].inputs.push_back(act[k]);  // the loss's gradient
    grad = add_tensor(p, uniform(0.5, 2));
  }
  pr.tensors[grad].always_present = true;  // fetched: kept to the end
  for (int32_t p = 0; p < n; ++p) {
    for (int32_t i : pr.nodes[p].inputs) pr.tensors[i].uses.push_back(p);
  }
  pr.base_bytes.assign(n, 0);
  for (int32_t t = 0; t < static_cast<int32_t>(pr.tensors.size()); ++t) {
    Problem::Tensor& x = pr.tensors[t];
    std::sort(x.uses.begin(), x.uses.end());
    x.uses.erase(std::unique(x.uses.begin(), x.uses.end()), x.uses.end());
    const int32_t first = x.producer >= 0 ? x.producer : 0;
    const int32_t last = x.always_present || x.uses.empty() ? n - 1 : x.uses.back();
    for (int32_t p = first; p <= last; ++p) pr.base_bytes[p] += static_cast<int64_t>(x.bytes);
    if (x.always_present || x.uses.empty()) continue;
    int32_t prev = x.producer >= 0 ? x.producer : x.uses.front();
    for (int32_t use : x.uses) {
      if (use > prev + 1) pr.gaps.push_back({t, prev, use});
      prev = std::max(prev, use);
    }
  }
  const int64_t peak = *std::max_element(pr.base_bytes.begin(), pr.base_bytes.end());
  pr.limit_bytes = static_cast<int64_t>(limit_fraction * static_cast<double>(peak));
  pr.link_share = uniform(0.3, 1.0);
  return pr;
}

// Every choice of every gap, evaluated; the best feasible step (infinity
// when none is).
double enumerate_best(const Problem& pr, std::vector<Choice>& best, long& plans) {
  std::vector<std::vector<Choice>> options(pr.gaps.size());
  for (int32_t j = 0; j < static_cast<int32_t>(pr.gaps.size()); ++j) {
    options[j].push_back({});
    for (int32_t g = pr.gaps[j].after + 1; g < pr.gaps[j].before; ++g) {
      options[j].push_back({Choice::kSwap, g});
    }
    for (int32_t g : recompute_triggers(pr, j)) options[j].push_back({Choice::kRecompute, g});
  }
  double best_s = std::numeric_limits<double>::infinity();
  std::vector<Choice> current(pr.gaps.size());
  plans = 0;
  std::function<void(size_t)> walk = [&](size_t j) {
    if (j == pr.gaps.size()) {
      ++plans;
      const Evaluation ev = evaluate(pr, current);
      if (ev.feasible && ev.step_s() < best_s - 1e-12) best_s = ev.step_s(), best = current;
      return;
    }
    for (const Choice& c : options[j]) {
      current[j] = c;
      walk(j + 1);
    }
  };
  walk(0);
  return best_s;
}

TEST(ExactPlan, MatchesEnumerationOnRandomChainsWithSkips) {
  int solved = 0, infeasible = 0, with_recompute = 0, with_swap = 0;
  for (uint32_t seed = 1; seed <= 24; ++seed) {
    const int layers = 3 + static_cast<int>(seed % 4);  // 3..6
    const double fraction = 0.6 + 0.05 * static_cast<double>(seed % 7);
    const Problem pr = chain_problem(seed, layers, fraction);
    std::vector<Choice> best;
    long plans = 0;
    const double enumerated = enumerate_best(pr, best, plans);
    absl::StatusOr<Solution> sol = solve(pr, {.time_limit_s = 60});
    std::printf("seed %u: %d layers, limit %.2f of peak, %zu gaps, %ld plans enumerated: ", seed,
                layers, fraction, pr.gaps.size(), plans);
    if (!std::isfinite(enumerated)) {
      std::printf("none fits\n");
      ASSERT_FALSE(sol.ok()) << "seed " << seed << ": the program found a plan enumeration did not";
      EXPECT_EQ(sol.status().code(), absl::StatusCode::kNotFound) << sol.status();
      ++infeasible;
      continue;
    }
    ASSERT_TRUE(sol.ok()) << "seed " << seed << ": " << sol.status();
    std::printf("best %.6f s, program %.6f s (%s, %d columns, %d rows, %.2f s)\n", enumerated,
                sol->objective_s, sol->optimal ? "optimal" : "not proven", sol->columns, sol->rows,
                sol->solve_s);
    EXPECT_TRUE(sol->optimal) << "seed " << seed;
    ASSERT_TRUE(sol->evaluation.feasible) << "seed " << seed << ": " << sol->evaluation.reason;
    // The program's objective is the model's step of the plan it returns,
    // and no enumerated plan is better.
    EXPECT_NEAR(sol->evaluation.step_s(), sol->objective_s, 1e-9) << "seed " << seed;
    EXPECT_NEAR(sol->objective_s, enumerated, 1e-9) << "seed " << seed;
    ++solved;
    bool r = false, s = false;
    for (const Choice& c : sol->choices) {
      r = r || c.kind == Choice::kRecompute;
      s = s || c.kind == Choice::kSwap;
    }
    with_recompute += r;
    with_swap += s;
  }
  std::printf("%d solved (%d with recomputation, %d with swaps), %d with no plan\n", solved,
              with_recompute, with_swap, infeasible);
  // The cases exercise both actions, not only one of them.
  EXPECT_GE(solved, 12);
  EXPECT_GT(with_recompute, 0);
  EXPECT_GT(with_swap, 0);
}

// One big activation that must be gone at positions 2 and 3. A fast link:
// the swap with trigger 3 hides its copy behind node 4 and costs nothing;
// a slow link: recomputing its one producer is cheaper than the stalls.
TEST(ExactPlan, HiddenSwapOrRecomputeByTheLinkSpeed) {
  Problem pr;
  pr.nodes.resize(6, {1e-3, true, {}});
  // t0 input, t1 = f(t0) at 0 (8 MiB), read at 1 and at 5; t2 small chain.
  pr.tensors = {{1 << 20, -1, {0}, true, 0, 0},
                {8 << 20, 0, {1, 5}, false, 0, 0},
                {1 << 20, 1, {2, 3, 4, 5}, true, 0, 0}};
  pr.nodes[0].inputs = {0};
  pr.nodes[1].inputs = {1};
  for (int p = 2; p <= 4; ++p) pr.nodes[p].inputs = {2};
  pr.nodes[5].inputs = {1, 2};
  pr.gaps = {{1, 1, 5}};
  pr.base_bytes = {10 << 20, 10 << 20, 14 << 20, 14 << 20, 10 << 20, 10 << 20};
  pr.limit_bytes = 10 << 20;                          // t1 must be gone at 2 and 3
  pr.tensors[1].in_s = pr.tensors[1].out_s = 0.5e-3;  // hidden by one node
  absl::StatusOr<Solution> fast = solve(pr);
  ASSERT_TRUE(fast.ok()) << fast.status();
  EXPECT_EQ(fast->choices[0].kind, Choice::kSwap);
  EXPECT_EQ(fast->choices[0].trigger, 3);
  EXPECT_NEAR(fast->objective_s, 6e-3, 1e-12);

  pr.tensors[1].in_s = pr.tensors[1].out_s = 5e-3;  // a 5 ms copy
  absl::StatusOr<Solution> slow = solve(pr);
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_EQ(slow->choices[0].kind, Choice::kRecompute);
  EXPECT_EQ(slow->choices[0].trigger, 4);
  EXPECT_NEAR(slow->objective_s, 7e-3, 1e-12);  // node 0 once more

  pr.limit_bytes = 1 << 20;  // below what every position must hold
  absl::StatusOr<Solution> none = solve(pr);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();
}

TEST(ExactPlan, EvaluateNamesWhatIsWrong) {
  const Problem pr = chain_problem(7, 4, 0.7);
  std::vector<Choice> choices(pr.gaps.size());
  choices[0] = {Choice::kSwap, pr.gaps[0].before};
  EXPECT_FALSE(evaluate(pr, choices).feasible);
  EXPECT_NE(evaluate(pr, choices).reason.find("outside"), std::string::npos);
  EXPECT_NE(evaluate(pr, {}).reason.find("choices"), std::string::npos);
  Problem bad = pr;
  bad.gaps[0].before = bad.gaps[0].after + 1;
  absl::StatusOr<Solution> s = solve(bad);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("gap 0"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace lms::exact
