// The plan is computed once: lms::plan_step returns a StepPlan (graph,
// report, step layout), and Session::create(plan, device) runs it on the
// layout the planner decided `fits` on, with no layout search of its own.
// A graph lms::rewrite planned keeps no layout: its session lays the step
// out again from the graph's plan record and gets the same peak. Used as a
// user would (include/lms and the example models), on VDSR and the 2-D
// U-Net with concat skips.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "lms/config.h"
#include "lms/plan.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "user_models.h"

namespace lms::user {
namespace {

constexpr uint64_t kSeed = 5150;

struct Model {
  std::string name;
  Graph graph;
  Feeds feeds;
};

std::vector<Model> models() {
  std::vector<Model> out;
  auto v = vdsr(4, 24, Adam{.lr = 1e-3f});
  EXPECT_TRUE(v.ok()) << v.status();
  if (v.ok()) out.push_back({"vdsr", *std::move(v), vdsr_feeds(4, 24, kSeed)});
  auto u = user_unet(2, 32, Adam{.lr = 1e-3f});
  EXPECT_TRUE(u.ok()) << u.status();
  if (u.ok()) out.push_back({"user_unet", *std::move(u), user_unet_feeds(2, 32, kSeed)});
  return out;
}

TEST(PlanOnce, SessionRunsTheStepPlansLayoutAndLaysOutAGraphAlike) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  for (Model& m : models()) {
    SCOPED_TRACE(m.name);
    auto big = make_cpu_device({.capacity_bytes = 256 * kMiB, .host_pool_bytes = 256 * kMiB});
    ASSERT_TRUE(big.ok()) << big.status();
    LmsConfig off;
    off.enabled = false;
    auto plain = plan_step(m.graph, off, **big);
    ASSERT_TRUE(plain.ok()) << plain.status();

    // Not planned: the session lays the step out itself.
    {
      auto s = Session::create(m.graph, **big);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_FALSE((*s)->reused_planned_layout());
    }
    // Planned without LMS through the Device overload: the plan's layout.
    {
      auto s = Session::create(*plain, **big);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_TRUE((*s)->reused_planned_layout());
    }
    // Planned with LMS at 70% of the peak: the plan's layout, and the step
    // runs at the planned peak, also after the StepPlan itself is gone (the
    // session shares its graph).
    const uint64_t budget = std::max(plain->report().working_set_limit_bytes,
                                     plain->report().peak_bytes_after * 7 / 10);
    auto device = make_cpu_device({.capacity_bytes = budget, .host_pool_bytes = 256 * kMiB});
    ASSERT_TRUE(device.ok()) << device.status();
    LmsConfig cfg;
    cfg.time_model = TimeModel::kRoofline;
    RewriteReport planned_report;
    Graph planned_graph;
    {
      std::unique_ptr<Session> s;
      {
        auto plan = plan_step(m.graph, cfg, **device);
        ASSERT_TRUE(plan.ok()) << plan.status();
        ASSERT_TRUE(plan->report().fits) << plan->report().summary();
        EXPECT_TRUE(plan->record().planned);
        EXPECT_EQ(plan->record().budget_bytes, plan->report().budget_bytes);
        std::printf("%s at %" PRIu64 " bytes: %zu swapped, %zu recomputed\n", m.name.c_str(),
                    budget, plan->report().swapped.size(), plan->report().recomputed.size());
        planned_report = plan->report();
        planned_graph = plan->graph();
        auto created = Session::create(*plan, **device);
        ASSERT_TRUE(created.ok()) << created.status();
        s = *std::move(created);
      }
      EXPECT_TRUE(s->reused_planned_layout());
      StepResult r;
      ASSERT_TRUE(s->run(m.feeds, &r).ok());
      EXPECT_EQ(r.peak_device_bytes, planned_report.peak_bytes_after);
    }
    // lms::rewrite gives the same graph and report; a session of that graph
    // lays the step out from its plan record and peaks where the plan said.
    {
      Graph rewritten = m.graph;
      auto rep = rewrite(rewritten, cfg, **device);
      ASSERT_TRUE(rep.ok()) << rep.status();
      EXPECT_EQ(to_text(rewritten), to_text(planned_graph));
      EXPECT_EQ(rep->peak_bytes_after, planned_report.peak_bytes_after);
      EXPECT_EQ(rep->arena_bytes, planned_report.arena_bytes);
      auto s = Session::create(rewritten, **device);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_FALSE((*s)->reused_planned_layout());
      StepResult r;
      ASSERT_TRUE((*s)->run(m.feeds, &r).ok());
      EXPECT_EQ(r.peak_device_bytes, planned_report.peak_bytes_after);
    }
    // Changed after planning (a node renamed): the session lays it out from
    // the plan record, and the step still runs at the planned peak.
    {
      Graph renamed = planned_graph;
      NodeId id = 0;
      while (id < renamed.num_nodes() && renamed.node(id).outputs.empty()) ++id;
      ASSERT_LT(id, renamed.num_nodes());
      renamed.mutable_node(id).name += "_renamed";
      auto s = Session::create(renamed, **device);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_FALSE((*s)->reused_planned_layout());
      StepResult r;
      ASSERT_TRUE((*s)->run(m.feeds, &r).ok());
      EXPECT_EQ(r.peak_device_bytes, planned_report.peak_bytes_after);
    }
    // Planned without the kernel workspaces: no layout was decided, so the
    // session lays out.
    {
      auto p = plan_step(m.graph, off, PlanningFacts{.device_capacity_bytes = 256 * kMiB});
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_FALSE(p->report().fit_unknown_reason.empty());
      auto s = Session::create(*p, **big);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_FALSE((*s)->reused_planned_layout());
    }
    // A plan for the small device on the large one: refused, naming the
    // capacity, as for a planned graph.
    {
      auto plan = plan_step(m.graph, cfg, **device);
      ASSERT_TRUE(plan.ok()) << plan.status();
      auto s = Session::create(*plan, **big);
      ASSERT_FALSE(s.ok());
      EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
      EXPECT_NE(s.status().message().find("capacity"), std::string::npos) << s.status();
    }
  }
}

}  // namespace
}  // namespace lms::user
