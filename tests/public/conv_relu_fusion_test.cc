// Conv + ReLU fusion, used as a user would (include/lms and the example
// model builders only), on VDSR and a 2-D U-Net with concat skips whose
// `stem` is read by three far-apart consumers:
//  - lms::rewrite with the CPU device fuses every relu that is the only
//    reader of a conv output, and only those; the fused node keeps the
//    relu's name, so fetches and swap plans that name it still work;
//  - the fused graph, with LMS off and with swaps and recomputation at a
//    tight budget, gives the same bits as the graph without any rewrite:
//    losses, gradients, weights and optimizer state; a fetched relu output
//    the same values (its zeros may be +0.0 where the separate relu writes
//    -0.0);
//  - a conv built with activation = "relu" by model code trains to the same
//    bits as conv followed by relu;
//  - fusion never raises the planned peak;
//  - a graph already fused and planned can be rewritten again and gives
//    the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "lms/config.h"
#include "lms/rewrite.h"
#include "lms/types.h"
#include "user_models.h"

namespace lms::user {
namespace {

constexpr uint64_t kSeed = 9127;
constexpr int kSteps = 2;

// Fetch `value_only` (the fetched relu output; -1: none) is compared by
// value: where the separate relu writes -0.0 (oneDNN computes x * 0 for
// x < 0) the fused conv's post-op writes +0.0. Every non-zero element, and
// every other fetch and persistent tensor, must have the same bits.
void expect_same_bits(const StepsRun& a, const StepsRun& b, const std::string& what,
                      int value_only = -1, size_t fetches_per_step = 0) {
  ASSERT_TRUE(a.status.ok()) << what << ": " << a.status;
  ASSERT_TRUE(b.status.ok()) << what << ": " << b.status;
  ASSERT_EQ(a.fetched.size(), b.fetched.size()) << what;
  for (size_t i = 0; i < a.fetched.size(); ++i) {
    ASSERT_EQ(a.fetched[i].size(), b.fetched[i].size()) << what;
    if (value_only >= 0 && i % fetches_per_step == static_cast<size_t>(value_only)) {
      size_t zeros = 0, mismatches = 0;
      for (size_t k = 0; k < a.fetched[i].size(); ++k) {
        const float x = a.fetched[i][k], y = b.fetched[i][k];
        zeros += x == 0.0f;
        mismatches += x != y || (x != 0.0f && std::memcmp(&x, &y, sizeof(float)) != 0);
      }
      EXPECT_EQ(mismatches, 0u) << what << ": fetch " << i << " differs in value";
      EXPECT_GT(zeros, 0u) << what << ": fetch " << i << " is no relu output";
      continue;
    }
    EXPECT_EQ(0, std::memcmp(a.fetched[i].data(), b.fetched[i].data(), a.fetched[i].size() * 4))
        << what << ": fetch " << i << " differs";
  }
  EXPECT_TRUE(differing(a.state, b.state).empty())
      << what << ": " << differing(a.state, b.state).size() << " persistent tensors differ";
}

// The relus that read a conv output no other node reads.
std::vector<std::string> fusable_relus(const Graph& g) {
  std::vector<std::string> out;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.op != OpKind::kRelu) continue;
    const Tensor& v = g.tensor(n.inputs[0]);
    if (v.producer != kNoNode && g.node(v.producer).op == OpKind::kConv &&
        v.consumers.size() == 1) {
      out.push_back(n.name);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Model {
  std::string name;
  Graph graph;
  Feeds feeds;
  std::vector<std::string> fetches;  // the loss, a relu output (index 1), two gradients
};

std::vector<Model> models_under_test() {
  std::vector<Model> out;
  auto v = vdsr(2, 24, Adam{.lr = 1e-3});
  EXPECT_TRUE(v.ok()) << v.status();
  if (v.ok()) {
    out.push_back({"vdsr",
                   *std::move(v),
                   vdsr_feeds(2, 24, kSeed),
                   {"loss", "relu3", "conv2/w/grad", "conv8/b/grad"}});
  }
  auto u = user_unet(2, 32, Adam{.lr = 1e-3});
  EXPECT_TRUE(u.ok()) << u.status();
  if (u.ok()) {
    out.push_back({"user_unet",
                   *std::move(u),
                   user_unet_feeds(2, 32, kSeed),
                   {"loss", "stem", "stem/conv/w/grad", "head/b/grad"}});
  }
  return out;
}

TEST(ConvReluFusion, FusedGraphsTrainToTheSameBits) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  for (Model& m : models_under_test()) {
    SCOPED_TRACE(m.name);
    for (const std::string& f : m.fetches) ASSERT_NE(m.graph.find_tensor(f), kNoTensor) << f;
    auto big = make_cpu_device({.capacity_bytes = 512 * kMiB, .host_pool_bytes = 256 * kMiB});
    ASSERT_TRUE(big.ok()) << big.status();
    const StepsRun plain = run_steps(m.graph, **big, m.feeds, m.fetches, kSteps);
    ASSERT_TRUE(plain.status.ok()) << plain.status;

    LmsConfig off;
    off.enabled = false;
    RewriteOptions ropts{.fetched = m.fetches};
    Graph fused = m.graph;
    auto rep = rewrite(fused, off, **big, ropts);
    ASSERT_TRUE(rep.ok()) << rep.status();
    std::vector<std::string> got = rep->fused;
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, fusable_relus(m.graph));
    EXPECT_FALSE(got.empty());
    EXPECT_NE(rep->summary().find("conv + relu pairs"), std::string::npos) << rep->summary();
    for (const std::string& name : got) {
      const NodeId id = fused.find_node(name);
      ASSERT_NE(id, kNoNode) << name;
      EXPECT_EQ(fused.node(id).op, OpKind::kConv) << name;
      EXPECT_EQ(fused.num_nodes(), m.graph.num_nodes() - static_cast<int>(got.size()));
    }
    expect_same_bits(run_steps(fused, **big, m.feeds, m.fetches, kSteps), plain, "fused, LMS off",
                     1, m.fetches.size());

    RewriteOptions unfused_opts = ropts;
    unfused_opts.fuse_conv_relu = false;
    Graph unfused = m.graph;
    auto unfused_rep = rewrite(unfused, off, **big, unfused_opts);
    ASSERT_TRUE(unfused_rep.ok()) << unfused_rep.status();
    EXPECT_TRUE(unfused_rep->fused.empty());
    EXPECT_EQ(unfused.num_nodes(), m.graph.num_nodes());
    std::printf("%s: %zu pairs fused; profile peak %" PRIu64 " bytes fused, %" PRIu64
                " unfused; laid out %" PRIu64 " and %" PRIu64 "\n",
                m.name.c_str(), got.size(), rep->peak_bytes_before, unfused_rep->peak_bytes_before,
                rep->peak_bytes_after, unfused_rep->peak_bytes_after);
    // Fusion drops the conv output, so the profile (the bytes live at each
    // node) never peaks higher. The laid-out arena may: the placement is a
    // heuristic, and with some workspaces (LMS_CPU_WORKSPACE_SCALE=0.5 on
    // an AVX-512 machine) it packed the fused U-Net 64 KiB larger.
    EXPECT_LE(rep->peak_bytes_before, unfused_rep->peak_bytes_before);

    // With LMS halfway between the working-set limit and the fused graph's
    // peak: swaps and recomputation of fused nodes' outputs, the same bits.
    for (AutoActions actions : {AutoActions::kSwap, AutoActions::kRecompute}) {
      SCOPED_TRACE(auto_actions_name(actions));
      const uint64_t budget = (rep->working_set_limit_bytes + rep->peak_bytes_after) / 2;
      auto small = make_cpu_device({.capacity_bytes = budget, .host_pool_bytes = 256 * kMiB});
      ASSERT_TRUE(small.ok()) << small.status();
      LmsConfig cfg;
      cfg.auto_actions = actions;
      cfg.time_model = TimeModel::kRoofline;
      // Recompute-only plans may need least-workspace kernels at this budget.
      cfg.kernel_choice = KernelChoice::kLeastToFit;
      Graph g = m.graph;
      auto lms = rewrite(g, cfg, **small, ropts);
      ASSERT_TRUE(lms.ok()) << lms.status();
      ASSERT_TRUE(lms->fits) << lms->summary();
      EXPECT_EQ(lms->fused, rep->fused);
      // It swaps or recomputes, or the least-workspace kernels freed enough.
      EXPECT_TRUE(!lms->decisions.empty() || !lms->least_workspace_nodes.empty());
      std::printf("%s %s at %" PRIu64 " bytes: %zu swapped, %zu recomputed, %zu least-workspace\n",
                  m.name.c_str(), auto_actions_name(actions), budget, lms->swapped.size(),
                  lms->recomputed.size(), lms->least_workspace_nodes.size());
      StepsRun expected = plain;
      if (!lms->least_workspace_nodes.empty()) {
        Graph lean = m.graph;
        ASSERT_TRUE(use_least_workspace_kernels(lean, lms->least_workspace_nodes).ok());
        expected = run_steps(lean, **big, m.feeds, m.fetches, kSteps);
      }
      expect_same_bits(run_steps(g, **small, m.feeds, m.fetches, kSteps), expected,
                       "fused with LMS", 1, m.fetches.size());
    }
  }
}

// Model code may build the fused conv itself: its gradient (relu_bwd on the
// node's output, then the conv's backward ops) gives the same bits as conv
// then relu, without any rewrite (the output the same values).
TEST(ConvReluFusion, ConvWithReluActivationEqualsConvThenRelu) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto build = [](bool fused) -> absl::StatusOr<Graph> {
    Graph g;
    const TensorId x = g.input("x", {2, 3, 12, 12});
    const TensorId target = g.input("target", {2, 1, 12, 12});
    const TensorId w = g.parameter("w", {16, 3, 3, 3}, Init::he_normal(11, 27));
    const TensorId b = g.parameter("b", {16}, Init::constant(0.01));
    Attrs a = {{"stride", std::vector<int64_t>{1, 1}},
               {"pad", std::vector<int64_t>{1, 1}},
               {"dilation", std::vector<int64_t>{1, 1}}};
    TensorId h;
    if (fused) {
      a[std::string(kActivationAttr)] = std::string(kActivationRelu);
      LMS_ASSIGN_OR_RETURN(std::vector<TensorId> out, g.add_node(OpKind::kConv, "h", {x, w, b}, a));
      h = out[0];
    } else {
      LMS_ASSIGN_OR_RETURN(std::vector<TensorId> out, g.add_node(OpKind::kConv, "v", {x, w, b}, a));
      h = relu(g, "h", out[0]);
    }
    const TensorId y = conv2d(g, "head", h, 1, {3}, {.pad = {1}, .seed = 12});
    LMS_RETURN_IF_ERROR(g.status());
    return training_graph(g, mse_loss(g, "loss", y, target), Adam{.lr = 1e-2});
  };
  auto fused = build(true);
  auto separate = build(false);
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(separate.ok()) << separate.status();
  std::mt19937_64 gen(kSeed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(2 * 3 * 12 * 12), t(2 * 12 * 12);
  for (float& v : x) v = n(gen);
  for (float& v : t) v = n(gen);
  const Feeds feeds = {{"x", x}, {"target", t}};
  const std::vector<std::string> names = {"loss", "h", "w/grad", "b/grad"};
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 64 * kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  const StepsRun a = run_steps(*fused, **device, feeds, names, kSteps);
  const StepsRun b = run_steps(*separate, **device, feeds, names, kSteps);
  expect_same_bits(a, b, "activation attribute", 1, names.size());
  // About half of h is zero: the relu really ran.
  ASSERT_FALSE(a.fetched.empty());
  const std::vector<float>& h = a.fetched[1];
  const auto zeros = std::count(h.begin(), h.end(), 0.0f);
  EXPECT_GT(zeros, static_cast<long>(h.size() / 4));
  EXPECT_LT(zeros, static_cast<long>(h.size() * 3 / 4));
}

// A graph lms::rewrite already fused and planned can be rewritten again, as
// a user re-planning it for another device would: nothing fuses twice, the
// swap and recompute nodes stay ordinary nodes of the graph, and the step
// gives the same bits. (A rewritten graph creates its swap-ins after the
// nodes that read them, so it cannot be rebuilt in creation order.)
TEST(ConvReluFusion, ARewrittenGraphCanBeRewrittenAgain) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  for (Model& m : models_under_test()) {
    SCOPED_TRACE(m.name);
    auto big = make_cpu_device({.capacity_bytes = 512 * kMiB, .host_pool_bytes = 256 * kMiB});
    ASSERT_TRUE(big.ok()) << big.status();
    const StepsRun plain = run_steps(m.graph, **big, m.feeds, m.fetches, kSteps);
    ASSERT_TRUE(plain.status.ok()) << plain.status;
    LmsConfig off;
    off.enabled = false;
    const RewriteOptions ropts{.fetched = m.fetches};
    Graph laid_out = m.graph;
    auto first_off = rewrite(laid_out, off, **big, ropts);
    ASSERT_TRUE(first_off.ok()) << first_off.status();

    // Halfway between the working-set limit and the peak: swaps or recomputes.
    const uint64_t budget = (first_off->working_set_limit_bytes + first_off->peak_bytes_after) / 2;
    auto small = make_cpu_device({.capacity_bytes = budget, .host_pool_bytes = 256 * kMiB});
    ASSERT_TRUE(small.ok()) << small.status();
    LmsConfig cfg;
    cfg.time_model = TimeModel::kRoofline;
    Graph g = m.graph;
    auto planned = rewrite(g, cfg, **small, ropts);
    ASSERT_TRUE(planned.ok()) << planned.status();
    ASSERT_TRUE(planned->fits) << planned->summary();
    ASSERT_FALSE(planned->decisions.empty()) << planned->summary();
    ASSERT_TRUE(planned->least_workspace_nodes.empty()) << planned->summary();
    const int nodes = g.num_nodes();
    const std::string planned_text = to_text(g);

    // Again without LMS on the large device, then again with LMS on the
    // small one: each keeps every node, fuses nothing and fits; the fully
    // planned graph is left unchanged, text included (lms/rewrite.h).
    for (int pass = 0; pass < 2; ++pass) {
      SCOPED_TRACE(pass == 0 ? "LMS off on the large device" : "LMS on the small device");
      auto again = pass == 0 ? rewrite(g, off, **big, ropts) : rewrite(g, cfg, **small, ropts);
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_TRUE(again->fits) << again->summary();
      EXPECT_TRUE(again->fused.empty());
      EXPECT_EQ(g.num_nodes(), nodes);
      EXPECT_TRUE(again->decisions.empty()) << again->summary();
      EXPECT_EQ(to_text(g), planned_text);
      for (const std::string& t : planned->swapped) {
        EXPECT_NE(g.find_node("swap_out/" + t), kNoNode) << t;
      }
      std::printf("%s pass %d: %zu decisions kept, %zu new; peak %" PRIu64 " bytes\n",
                  m.name.c_str(), pass, planned->decisions.size(), again->decisions.size(),
                  again->peak_bytes_after);
      Device& d = pass == 0 ? **big : **small;
      expect_same_bits(run_steps(g, d, m.feeds, m.fetches, kSteps), plain, "rewritten again", 1,
                       m.fetches.size());
    }
  }
}

}  // namespace
}  // namespace lms::user
