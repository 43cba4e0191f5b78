// The joint planner's local search (LmsConfig::auto_refine_plans,
// Note [Plan refinement]), used as a user would (include/lms and the example
// model builders only), on VDSR, a 2-D U-Net with concat skips and a tensor
// read by three far-apart consumers, and Isensee's 3-D U-Net, at links from
// as fast as the roofline's compute to 10,000x slower:
//  - the refined joint plan is never predicted slower than the plan without
//    the local search, and is predicted faster on some of these cases;
//  - a refined plan that differs from the unrefined one fits, runs at its
//    planned peak, and gives the same bits as the steps without LMS.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "lms/config.h"
#include "lms/rewrite.h"
#include "lms/types.h"
#include "same_run.h"
#include "user_models.h"

namespace lms::user {
namespace {

constexpr uint64_t kSeed = 9127;
constexpr int kSteps = 2;

LmsConfig joint_config(double link_bytes_per_s, int32_t refine_plans) {
  LmsConfig cfg;
  cfg.auto_actions = AutoActions::kJoint;
  cfg.time_model = TimeModel::kRoofline;  // the same plan on every machine
  cfg.link.d2h_bytes_per_s = cfg.link.h2d_bytes_per_s = link_bytes_per_s;
  cfg.auto_refine_plans = refine_plans;
  return cfg;
}

TEST(PlanRefinement, NeverSlowerSometimesFasterAndBitIdentical) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  int cases = 0, faster = 0, ran = 0;
  auto models = planner_test_models(kSeed);
  ASSERT_TRUE(models.ok()) << models.status();
  for (NamedModel& model : *models) {
    SCOPED_TRACE(model.name);
    const std::vector<std::string> names = loss_and_edge_gradients(model.graph);
    auto big = make_cpu_device({.capacity_bytes = 512 * kMiB, .host_pool_bytes = 256 * kMiB});
    ASSERT_TRUE(big.ok()) << big.status();
    LmsConfig off;
    off.enabled = false;
    RewriteOptions ropts;
    ropts.fetched = names;
    Graph plain = model.graph;
    auto none = rewrite(plain, off, **big, ropts);
    ASSERT_TRUE(none.ok()) << none.status();
    std::printf("%s: no-LMS peak %" PRIu64 " bytes, working-set limit %" PRIu64 "\n",
                model.name.c_str(), none->peak_bytes_after, none->working_set_limit_bytes);
    std::optional<StepsRun> reference;
    bool ran_model = false;
    // The roofline computes at 1 TFLOP/s: these links are 1 to 10,000x
    // slower per byte than a FLOP, around H100 + PCIe Gen5's 7.5e-4 B/FLOP.
    for (double link : {1e12, 3e9, 7.5e8, 1e8}) {
      // Budgets this fraction of the way from the working-set limit (below
      // which no plan fits) to the no-LMS peak.
      for (double fraction : {0.15, 0.35, 0.55, 0.75}) {
        const double ws = static_cast<double>(none->working_set_limit_bytes);
        const auto budget = static_cast<uint64_t>(
            ws + fraction * (static_cast<double>(none->peak_bytes_after) - ws));
        auto device = make_cpu_device({.capacity_bytes = budget, .host_pool_bytes = 256 * kMiB});
        ASSERT_TRUE(device.ok()) << device.status();
        Graph unrefined = model.graph, refined = model.graph;
        auto rep0 = rewrite(unrefined, joint_config(link, 0), **device, ropts);
        auto rep =
            rewrite(refined, joint_config(link, LmsConfig{}.auto_refine_plans), **device, ropts);
        ASSERT_EQ(rep0.ok(), rep.ok()) << (rep0.ok() ? rep.status() : rep0.status());
        if (!rep.ok() || !rep->fits || !rep0->fits) continue;
        SCOPED_TRACE(testing::Message() << "link " << link << " B/s, budget " << budget);
        ++cases;
        EXPECT_LE(rep->step_time_after_s, rep0->step_time_after_s);
        const bool changed = rep->plan_text != rep0->plan_text;
        faster += rep->step_time_after_s < rep0->step_time_after_s;
        std::printf("%s, link %.0e B/s, budget %" PRIu64
                    " bytes: predicted %.5g s unrefined, %.5g s refined%s\n",
                    model.name.c_str(), link, budget, rep0->step_time_after_s,
                    rep->step_time_after_s, changed ? " (plan changed)" : "");
        // One refined plan per model runs: the same bits as without LMS, on
        // the same kernels, at the planned peak.
        if (!changed || ran_model || !rep->least_workspace_nodes.empty()) continue;
        if (!reference) {
          reference = run_steps(plain, **big, model.feeds, names, kSteps);
          ASSERT_TRUE(reference->status.ok()) << reference->status;
        }
        SCOPED_TRACE("plan:\n" + rep->plan_text);
        expect_same_run(run_steps(refined, **device, model.feeds, names, kSteps), *reference, names,
                        rep->peak_bytes_after);
        ran_model = true;
        ++ran;
      }
    }
  }
  std::printf("%d cases, the local search made %d faster; %d refined plans ran\n", cases, faster,
              ran);
  EXPECT_GT(cases, 20);
  EXPECT_GT(faster, 0);
  EXPECT_GT(ran, 0);
}

}  // namespace
}  // namespace lms::user
