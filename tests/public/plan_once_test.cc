// The plan is computed once: Session::create runs a graph lms::rewrite
// planned on the step layout the rewrite decided `fits` on
// (PlanRecord::layout), with no layout search of its own, and lays out
// itself only a graph the rewrite did not plan with every fact, or one
// changed since. Used as a user would (include/lms and the example models),
// on VDSR and the 2-D U-Net with concat skips.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "lms/config.h"
#include "lms/rewrite.h"
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

TEST(PlanOnce, SessionUsesTheRewritesLayoutAndLaysOutOnlyWhatItDidNotPlan) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  for (Model& m : models()) {
    SCOPED_TRACE(m.name);
    auto big = make_cpu_device({.capacity_bytes = 256 * kMiB, .host_pool_bytes = 256 * kMiB});
    ASSERT_TRUE(big.ok()) << big.status();
    LmsConfig off;
    off.enabled = false;
    Graph plain = m.graph;
    auto none = rewrite(plain, off, **big);
    ASSERT_TRUE(none.ok()) << none.status();

    // Not planned: the session lays the step out itself.
    {
      auto s = Session::create(m.graph, **big);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_FALSE((*s)->reused_planned_layout());
    }
    // Planned without LMS through the Device overload: the rewrite's layout.
    {
      auto s = Session::create(plain, **big);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_TRUE((*s)->reused_planned_layout());
    }
    // Planned with LMS at 70% of the peak: the rewrite's layout, and the
    // step runs at the planned peak.
    const uint64_t budget =
        std::max(none->working_set_limit_bytes, none->peak_bytes_after * 7 / 10);
    auto device = make_cpu_device({.capacity_bytes = budget, .host_pool_bytes = 256 * kMiB});
    ASSERT_TRUE(device.ok()) << device.status();
    LmsConfig cfg;
    cfg.time_model = TimeModel::kRoofline;
    Graph planned = m.graph;
    auto rep = rewrite(planned, cfg, **device);
    ASSERT_TRUE(rep.ok()) << rep.status();
    ASSERT_TRUE(rep->fits) << rep->summary();
    std::printf("%s at %" PRIu64 " bytes: %zu swapped, %zu recomputed\n", m.name.c_str(), budget,
                rep->swapped.size(), rep->recomputed.size());
    {
      auto s = Session::create(planned, **device);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_TRUE((*s)->reused_planned_layout());
      StepResult r;
      ASSERT_TRUE((*s)->run(m.feeds, &r).ok());
      EXPECT_EQ(r.peak_device_bytes, rep->peak_bytes_after);
    }
    // Changed after planning (a node renamed): no longer the graph planned,
    // so the session lays it out again, and the step still runs.
    {
      Graph renamed = planned;
      NodeId id = 0;
      while (id < renamed.num_nodes() && renamed.node(id).outputs.empty()) ++id;
      ASSERT_LT(id, renamed.num_nodes());
      renamed.mutable_node(id).name += "_renamed";
      auto s = Session::create(renamed, **device);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_FALSE((*s)->reused_planned_layout());
      StepResult r;
      ASSERT_TRUE((*s)->run(m.feeds, &r).ok());
      EXPECT_EQ(r.peak_device_bytes, rep->peak_bytes_after);
    }
    // Planned without the kernel workspaces: its layout cannot be the
    // session's, so the session lays out.
    {
      Graph g = m.graph;
      auto r = rewrite(g, off, PlanningFacts{.device_capacity_bytes = 256 * kMiB});
      ASSERT_TRUE(r.ok()) << r.status();
      auto s = Session::create(g, **big);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_FALSE((*s)->reused_planned_layout());
    }
  }
}

}  // namespace
}  // namespace lms::user
