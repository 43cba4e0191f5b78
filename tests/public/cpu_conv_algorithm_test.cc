// CpuDeviceOptions::conv_algorithm, used as a user would (include/lms and
// the example model builders only), on a 2-D U-Net with concat skips whose
// `stem` is read by three far-apart consumers:
//  - kWinograd runs lms's Winograd F(4x4, 3x3) on the 3x3 layers it applies
//    to even on AVX-512 CPUs: the losses match kDirect's closely, but not
//    bit for bit (the rounding differs, so it really ran);
//  - under kWinograd the graph trains to the same bits with LMS (swaps, or
//    recomputation, at a tight budget) as without;
//  - a conv_algorithm outside the enumerators is InvalidArgument.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "lms/config.h"
#include "lms/device.h"
#include "lms/rewrite.h"
#include "user_models.h"

namespace lms::user {
namespace {

constexpr uint64_t kSeed = 6151;
constexpr int kSteps = 2;
constexpr int64_t kBatch = 2, kSize = 32;

std::unique_ptr<Device> cpu(uint64_t capacity, CpuConvAlgorithm algorithm) {
  auto d = make_cpu_device(
      {.capacity_bytes = capacity, .host_pool_bytes = 256 * kMiB, .conv_algorithm = algorithm});
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

void expect_same_bits(const StepsRun& a, const StepsRun& b, const std::string& what) {
  ASSERT_TRUE(a.status.ok()) << what << ": " << a.status;
  ASSERT_TRUE(b.status.ok()) << what << ": " << b.status;
  ASSERT_EQ(a.fetched.size(), b.fetched.size()) << what;
  for (size_t i = 0; i < a.fetched.size(); ++i) {
    ASSERT_EQ(a.fetched[i].size(), b.fetched[i].size()) << what;
    EXPECT_EQ(0, std::memcmp(a.fetched[i].data(), b.fetched[i].data(), a.fetched[i].size() * 4))
        << what << ": fetch " << i << " differs";
  }
  EXPECT_TRUE(differing(a.state, b.state).empty())
      << what << ": " << differing(a.state, b.state).size() << " persistent tensors differ";
}

const std::vector<std::string> kFetches = {"loss", "mid/conv/w/grad", "d1/conv/w/grad",
                                           "stem/conv/w/grad"};

TEST(CpuConvAlgorithm, WinogradTrainsToTheSameBitsWithAndWithoutLms) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto built = user_unet(kBatch, kSize, Adam{.lr = 1e-3});
  ASSERT_TRUE(built.ok()) << built.status();
  const Graph graph = *std::move(built);
  const Feeds feeds = user_unet_feeds(kBatch, kSize, kSeed);
  for (const std::string& f : kFetches) ASSERT_NE(graph.find_tensor(f), kNoTensor) << f;

  auto direct_dev = cpu(512 * kMiB, CpuConvAlgorithm::kDirect);
  auto wino_dev = cpu(512 * kMiB, CpuConvAlgorithm::kWinograd);
  ASSERT_TRUE(direct_dev && wino_dev);
  const StepsRun direct = run_steps(graph, *direct_dev, feeds, kFetches, kSteps);
  const StepsRun wino = run_steps(graph, *wino_dev, feeds, kFetches, kSteps);
  ASSERT_TRUE(direct.status.ok()) << direct.status;
  ASSERT_TRUE(wino.status.ok()) << wino.status;

  // The same training, other rounding: the loss of each step agrees to
  // 1e-4 relative, and the gradients of the layers Winograd applies to
  // (mid, d1: 16 and 32 input channels) differ in bits.
  for (int step = 0; step < kSteps; ++step) {
    const float a = direct.fetched[step * kFetches.size()][0];
    const float b = wino.fetched[step * kFetches.size()][0];
    std::printf("step %d loss: direct %.9g, winograd %.9g\n", step, a, b);
    EXPECT_NEAR(a, b, 1e-4 * std::fabs(a)) << "step " << step;
  }
  bool any_differs = false;
  for (size_t i = 0; i < direct.fetched.size(); ++i) {
    any_differs |= std::memcmp(direct.fetched[i].data(), wino.fetched[i].data(),
                               direct.fetched[i].size() * 4) != 0;
  }
  EXPECT_TRUE(any_differs) << "kWinograd gave kDirect's bits: it did not run";

  // LMS halfway between the working-set limit and the peak.
  LmsConfig off;
  off.enabled = false;
  RewriteOptions ropts{.fetched = kFetches};
  Graph probe = graph;
  auto full = rewrite(probe, off, *wino_dev, ropts);
  ASSERT_TRUE(full.ok()) << full.status();
  const uint64_t budget = (full->working_set_limit_bytes + full->peak_bytes_after) / 2;
  for (AutoActions actions : {AutoActions::kSwap, AutoActions::kRecompute}) {
    SCOPED_TRACE(auto_actions_name(actions));
    auto small = cpu(budget, CpuConvAlgorithm::kWinograd);
    ASSERT_TRUE(small);
    LmsConfig cfg;
    cfg.auto_actions = actions;
    cfg.time_model = TimeModel::kRoofline;
    Graph g = graph;
    auto lms = rewrite(g, cfg, *small, ropts);
    ASSERT_TRUE(lms.ok()) << lms.status();
    ASSERT_TRUE(lms->fits) << lms->summary();
    EXPECT_TRUE(!lms->decisions.empty() || !lms->least_workspace_nodes.empty());
    std::printf("%s at %" PRIu64 " bytes: %zu swapped, %zu recomputed, %zu least-workspace\n",
                auto_actions_name(actions), budget, lms->swapped.size(), lms->recomputed.size(),
                lms->least_workspace_nodes.size());
    // Least-workspace kernels are direct ones: compare with the graph that
    // uses them without LMS.
    StepsRun expected = wino;
    if (!lms->least_workspace_nodes.empty()) {
      Graph lean = graph;
      ASSERT_TRUE(use_least_workspace_kernels(lean, lms->least_workspace_nodes).ok());
      expected = run_steps(lean, *wino_dev, feeds, kFetches, kSteps);
    }
    expect_same_bits(run_steps(g, *small, feeds, kFetches, kSteps), expected, "with LMS");
  }
}

TEST(CpuConvAlgorithm, UnknownAlgorithmIsInvalidArgument) {
  auto d = make_cpu_device({.capacity_bytes = 64 * kMiB,
                            .host_pool_bytes = 64 * kMiB,
                            .conv_algorithm = static_cast<CpuConvAlgorithm>(7)});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(d.status().message()).find("conv_algorithm"), std::string::npos)
      << d.status();
}

}  // namespace
}  // namespace lms::user
