// Weight gradients first (Note [Weight gradients first]), used as a user
// would (include/lms and the example model builders only): the auto rewrite
// runs a convolution's conv_bwd_weights before its conv_bwd_data where the
// weights node is the last reader of the convolution's input, so that input
// is freed before the input gradient is written. On a 2-D U-Net with concat
// skips and Isensee's 3-D U-Net (their activations' backward reads the
// activation's input, so a convolution's input is last read by its weights
// gradient) and on VDSR (relu_bwd reads each convolution's input later, so
// nothing moves):
//  - which pairs run weights first, read from the rewritten schedule;
//  - the reordered steps give the same bits as without LMS;
//  - the planned peak never rises, and falls on Isensee's U-Net;
//  - on a device with the reordered graph's peak as its capacity, the
//    rewrite fits without a single swap or recompute where the original order
//    would need them, and trains with the same bits as without LMS.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "lms/config.h"
#include "lms/rewrite.h"
#include "lms/types.h"
#include "same_run.h"
#include "user_models.h"

namespace lms::user {
namespace {

constexpr uint64_t kSeed = 5501;
constexpr int kSteps = 2;

// conv_bwd_weights nodes that run before the conv_bwd_data of the same dy in
// schedule(g), and those that run after it.
struct PairOrder {
  int weights_first = 0;
  int data_first = 0;
};

PairOrder pair_order(const Graph& g) {
  PairOrder out;
  auto order = schedule(g);
  EXPECT_TRUE(order.ok()) << order.status();
  if (!order.ok()) return out;
  std::vector<size_t> position(g.num_nodes());
  for (size_t p = 0; p < order->size(); ++p) position[(*order)[p]] = p;
  for (NodeId w = 0; w < g.num_nodes(); ++w) {
    if (g.node(w).op != OpKind::kConvBwdWeights) continue;
    const TensorId dy = g.node(w).inputs[1];
    for (NodeId d : g.tensor(dy).consumers) {
      if (g.node(d).op != OpKind::kConvBwdData || g.node(d).inputs[0] != dy) continue;
      (position[w] < position[d] ? out.weights_first : out.data_first)++;
    }
  }
  return out;
}

TEST(WeightGradientsFirst, FreesConvInputsEarlierAndKeepsTheBits) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  int lowered = 0;    // models whose planned peak the reorder lowers
  int reordered = 0;  // models with weight gradients moved first
  auto models = planner_test_models(kSeed);
  ASSERT_TRUE(models.ok()) << models.status();
  for (NamedModel& model : *models) {
    SCOPED_TRACE(model.name);
    const std::vector<std::string> names = loss_and_edge_gradients(model.graph);
    auto big = make_cpu_device({.capacity_bytes = 512 * kMiB, .host_pool_bytes = 256 * kMiB});
    ASSERT_TRUE(big.ok()) << big.status();
    RewriteOptions ropts;
    ropts.fetched = names;
    LmsConfig off;
    off.enabled = false;
    Graph plain = model.graph;
    auto none = rewrite(plain, off, **big, ropts);
    ASSERT_TRUE(none.ok()) << none.status();
    const PairOrder before = pair_order(plain);
    EXPECT_EQ(before.weights_first, 0) << "autodiff emits the data gradient first";

    // LMS on with room to spare: nothing to swap or recompute, only the
    // reorder.
    LmsConfig cfg;
    cfg.time_model = TimeModel::kRoofline;
    Graph roomy = model.graph;
    auto spare = rewrite(roomy, cfg, **big, ropts);
    ASSERT_TRUE(spare.ok()) << spare.status();
    EXPECT_TRUE(spare->decisions.empty());
    const PairOrder after = pair_order(roomy);
    std::printf("%s: %d of %d weight gradients first; planned peak %" PRIu64 " -> %" PRIu64
                " bytes\n",
                model.name.c_str(), after.weights_first, after.weights_first + after.data_first,
                none->peak_bytes_after, spare->peak_bytes_after);
    EXPECT_EQ(after.weights_first + after.data_first, before.data_first);
    EXPECT_LE(spare->peak_bytes_after, none->peak_bytes_after);
    // VDSR's convolution inputs are freed by the data gradient anyway; the
    // U-Nets' concat skips keep some alive, and the rewrite moves their
    // weight gradients first unless that makes the step's layout larger
    // (which depends on the kernels' workspaces, so on the CPU).
    if (model.name == "vdsr") {
      EXPECT_EQ(after.weights_first, 0);
    }
    reordered += after.weights_first > 0;
    // The report names exactly the moved nodes.
    EXPECT_EQ(static_cast<int>(spare->weight_gradients_first.size()), after.weights_first);
    for (const std::string& name : spare->weight_gradients_first) {
      const NodeId id = roomy.find_node(name);
      ASSERT_NE(id, kNoNode) << name;
      EXPECT_EQ(roomy.node(id).op, OpKind::kConvBwdWeights) << name;
    }
    EXPECT_EQ(spare->summary().find("weights first") != std::string::npos, after.weights_first > 0)
        << spare->summary();

    // The reordered steps give the same bits as the graph without LMS.
    const StepsRun reference = run_steps(plain, **big, model.feeds, names, kSteps);
    ASSERT_TRUE(reference.status.ok()) << reference.status;
    expect_same_run(run_steps(roomy, **big, model.feeds, names, kSteps), reference, names,
                    spare->peak_bytes_after);
    if (spare->peak_bytes_after == none->peak_bytes_after) continue;
    ++lowered;

    // A device with exactly the reordered peak: the original order does not
    // fit it, the rewrite fits it with no swap and no recompute, and the
    // steps give the same bits as the graph without LMS.
    auto tight =
        make_cpu_device({.capacity_bytes = spare->peak_bytes_after, .host_pool_bytes = 256 * kMiB});
    ASSERT_TRUE(tight.ok()) << tight.status();
    Graph unchanged = model.graph;
    auto off_tight = rewrite(unchanged, off, **tight, ropts);
    ASSERT_TRUE(off_tight.ok()) << off_tight.status();
    EXPECT_FALSE(off_tight->fits);
    Graph g = model.graph;
    auto rep = rewrite(g, cfg, **tight, ropts);
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_TRUE(rep->fits);
    EXPECT_TRUE(rep->decisions.empty()) << rep->plan_text;
    expect_same_run(run_steps(g, **tight, model.feeds, names, kSteps), reference, names,
                    rep->peak_bytes_after);
  }
  EXPECT_GT(reordered, 0);
  EXPECT_GT(lowered, 0);
}

}  // namespace
}  // namespace lms::user
