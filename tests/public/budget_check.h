// The budget sweep the op tests of tests/public share, and the LMS check
// every one of them runs on a small model that uses its op.
//
// A sweep plans the training graph with LMS through the Device overload of
// lms::rewrite on a device of each budget between the no-LMS working-set
// limit and peak, and keeps the first plan that fits and that the test
// wants (one that swaps a tensor, one that recomputes an attention node):
//
//   const NoLmsReference ref = no_lms_reference(*train, feeds, 3);
//   ASSERT_TRUE(ref.ok);
//   std::optional<BudgetPlan> p = first_plan_in_sweep(*train, ref, config, 32, wanted);
//   ASSERT_TRUE(p.has_value()) << "no budget planned ...";
//   expect_steps_bit_identical(*p, feeds, ref);
//
// expect_lms_steps_bit_identical is that with a plan that swaps or
// recomputes a tensor, and also checks the measured peak against the
// predicted one. Int64 inputs (token ids, class labels) come in
// `int64_feeds`.
#pragma once

#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lms/config.h"
#include "lms/rewrite.h"
#include "user_models.h"

namespace lms::user {

// The graph without LMS on a roomy device: its working-set limit and peak
// (the ends of every sweep) and `steps` steps to compare with (none when
// `steps` is 0: a test of the plan alone).
struct NoLmsReference {
  bool ok = false;  // planned and ran; the test has failed otherwise
  uint64_t working_set_limit_bytes = 0;
  uint64_t peak_bytes = 0;
  StepsRun steps;
};

// Fails the calling test when the graph cannot be planned or run without LMS
// (ok is false then).
// `base` gives the settings besides enabled (chunked_head).
inline NoLmsReference no_lms_reference(const Graph& train, const Feeds& feeds, int steps,
                                       const Int64Feeds& int64_feeds = {},
                                       const LmsConfig& base = {}) {
  NoLmsReference ref;
  auto big = make_cpu_device({.capacity_bytes = 256 * kMiB, .host_pool_bytes = 64 * kMiB});
  EXPECT_TRUE(big.ok()) << big.status();
  if (!big.ok()) return ref;
  LmsConfig off = base;
  off.enabled = false;
  Graph plain = train;
  auto limits = rewrite(plain, off, **big);
  EXPECT_TRUE(limits.ok()) << limits.status();
  if (!limits.ok()) return ref;
  ref.working_set_limit_bytes = limits->working_set_limit_bytes;
  ref.peak_bytes = limits->peak_bytes_after;
  if (steps > 0) {
    ref.steps = run_steps(plain, **big, feeds, {"loss"}, steps, int64_feeds);
    EXPECT_TRUE(ref.steps.status.ok()) << ref.steps.status;
    EXPECT_EQ(ref.steps.peak, limits->peak_bytes_after);
    EXPECT_EQ(ref.steps.fetched.size(), static_cast<size_t>(steps));
  }
  std::printf("working-set limit %" PRIu64 " bytes, no-LMS peak %" PRIu64 " bytes\n",
              ref.working_set_limit_bytes, ref.peak_bytes);
  EXPECT_LT(ref.working_set_limit_bytes, ref.peak_bytes);
  ref.ok = ref.working_set_limit_bytes < ref.peak_bytes &&
           (steps == 0 || (ref.steps.status.ok() && ref.steps.peak == ref.peak_bytes &&
                           ref.steps.fetched.size() == static_cast<size_t>(steps)));
  return ref;
}

// A plan the sweep kept: the device of its budget and the rewritten graph.
struct BudgetPlan {
  uint64_t budget_bytes = 0;
  std::unique_ptr<Device> device;
  Graph graph;
  RewriteReport report;
};

// Plans `train` with `config` on devices of the budgets low + (high - low) *
// i / points (i = 0 .. points - 1) between ref's working-set limit and peak,
// and returns the first plan that fits and that `wanted` accepts; nullopt
// when none does.
inline std::optional<BudgetPlan> first_plan_in_sweep(
    const Graph& train, const NoLmsReference& ref, const LmsConfig& config, int points,
    const std::function<bool(const Graph&, const RewriteReport&)>& wanted) {
  const uint64_t low = ref.working_set_limit_bytes, high = ref.peak_bytes;
  for (int i = 0; i < points && low < high; ++i) {
    BudgetPlan p;
    p.budget_bytes = low + (high - low) * i / points;
    auto device = make_cpu_device({.capacity_bytes = p.budget_bytes, .host_pool_bytes = 64 * kMiB});
    EXPECT_TRUE(device.ok()) << device.status();
    if (!device.ok()) return std::nullopt;
    p.device = *std::move(device);
    p.graph = train;
    auto lms = rewrite(p.graph, config, *p.device);
    if (!lms.ok() || !lms->fits || !wanted(p.graph, *lms)) continue;
    p.report = *std::move(lms);
    std::printf("budget %" PRIu64 ": %zu swapped, %zu recomputed, predicted peak %" PRIu64 "\n%s",
                p.budget_bytes, p.report.swapped.size(), p.report.recomputed.size(),
                p.report.peak_bytes_after, p.report.decisions_text().c_str());
    return p;
  }
  return std::nullopt;
}

// The first plan of a recompute-only sweep (roofline times, so the same
// plan on every machine) in which `op` has more than `original_nodes` nodes:
// one of them recomputed.
inline std::optional<BudgetPlan> first_plan_recomputing(const Graph& train,
                                                        const NoLmsReference& ref, OpKind op,
                                                        int original_nodes) {
  LmsConfig config;
  config.auto_actions = AutoActions::kRecompute;
  config.time_model = TimeModel::kRoofline;
  return first_plan_in_sweep(train, ref, config, 32, [&](const Graph& g, const RewriteReport&) {
    int nodes = 0;
    for (NodeId n = 0; n < g.num_nodes(); ++n) nodes += g.node(n).op == op;
    return nodes > original_nodes;
  });
}

// `plan` trained for as many steps as `ref` gives the same losses and
// persistent state, bit for bit.
inline void expect_steps_bit_identical(const BudgetPlan& plan, const Feeds& feeds,
                                       const NoLmsReference& ref,
                                       const Int64Feeds& int64_feeds = {}) {
  SCOPED_TRACE(::testing::Message() << "budget " << plan.budget_bytes);
  const int steps = static_cast<int>(ref.steps.fetched.size());
  const StepsRun step = run_steps(plan.graph, *plan.device, feeds, {"loss"}, steps, int64_feeds);
  ASSERT_TRUE(step.status.ok()) << step.status;
  EXPECT_EQ(step.peak, plan.report.peak_bytes_after);
  ASSERT_EQ(step.fetched.size(), ref.steps.fetched.size());
  for (size_t s = 0; s < step.fetched.size(); ++s) {
    EXPECT_TRUE(same_bits(step.fetched[s], ref.steps.fetched[s])) << "step " << s;
  }
  EXPECT_EQ(differing(step.state, ref.steps.state), std::vector<std::string>{});
}

// The LMS check of the op tests: at the first budget whose plan swaps or
// recomputes a tensor and fits, `steps` steps are bit-identical to the
// steps without LMS, with the measured peak the predicted one.
inline void expect_lms_steps_bit_identical(const Graph& train, const Feeds& feeds, int steps,
                                           const Int64Feeds& int64_feeds = {},
                                           const LmsConfig& config = {}) {
  const NoLmsReference ref = no_lms_reference(train, feeds, steps, int64_feeds, config);
  ASSERT_TRUE(ref.ok);
  // Training moves the loss: the gradients reach the parameters.
  EXPECT_NE(ref.steps.fetched.front()[0], ref.steps.fetched.back()[0]);
  const std::optional<BudgetPlan> plan =
      first_plan_in_sweep(train, ref, config, 16, [](const Graph&, const RewriteReport& r) {
        return !r.swapped.empty() || !r.recomputed.empty();
      });
  ASSERT_TRUE(plan.has_value()) << "no budget in [" << ref.working_set_limit_bytes << ", "
                                << ref.peak_bytes
                                << ") planned to fit with a tensor swapped or recomputed";
  EXPECT_LE(plan->report.peak_bytes_after, plan->budget_bytes);
  expect_steps_bit_identical(*plan, feeds, ref, int64_feeds);
}

}  // namespace lms::user
