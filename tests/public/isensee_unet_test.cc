// Isensee et al.'s 3-D U-Net from the example model builders, used as a user
// would (include/lms and models.h only):
//  - the graph builds for several depths, widths and class counts, with and
//    without deep supervision, and predicts [N, classes, D, H, W];
//  - a config that cannot build names its field;
//  - Adam lowers the soft Dice loss of a tiny network on a fixed random batch,
//    and the same steps with LMS forced to swap give the same bits (losses and
//    every persistent tensor) with the measured peak equal to the planned one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "lms/config.h"
#include "lms/rewrite.h"
#include "user_models.h"

namespace lms::user {
namespace {

using models::IsenseeConfig;

constexpr uint64_t kSeed = 1802;
constexpr int kSteps = 5;
constexpr uint64_t kCapacity = 64 * kMiB;

Shape prediction_shape(const Graph& g, const models::ModelTensors& m) {
  return m.output == kNoTensor ? Shape{} : g.tensor(m.output).shape;
}

TEST(IsenseeUnet, PredictsEveryClassAtEveryVoxel) {
  const IsenseeConfig configs[] = {
      IsenseeConfig{},  // the paper's: 128^3, 4 modalities, 16 filters, 5 levels
      tiny_isensee(),
      {.batch = 2, .in_channels = 4, .classes = 4, .size = 16, .base_filters = 2, .levels = 5},
      {.in_channels = 2, .classes = 2, .size = 8, .base_filters = 3, .levels = 2},
      {.in_channels = 1, .classes = 5, .size = 4, .base_filters = 2, .levels = 1},
      {.classes = 3, .size = 16, .base_filters = 2, .levels = 4, .deep_supervision = false},
  };
  for (const IsenseeConfig& c : configs) {
    SCOPED_TRACE(testing::Message() << "levels " << c.levels << ", size " << c.size);
    Graph g;
    const models::ModelTensors m = models::build_isensee_unet(g, c);
    ASSERT_TRUE(g.status().ok()) << g.status();
    EXPECT_EQ(prediction_shape(g, m), (Shape{c.batch, c.classes, c.size, c.size, c.size}));
    EXPECT_EQ(g.tensor(m.loss).shape, Shape{});
    // Deep supervision sums the top min(3, levels - 1) decoder levels.
    const int64_t heads =
        c.deep_supervision ? std::min<int64_t>(3, std::max<int64_t>(1, c.levels - 1)) : 1;
    for (int64_t level = 0; level < 4; ++level) {
      EXPECT_EQ(g.find_tensor("seg" + std::to_string(level) + "/conv") != kNoTensor, level < heads)
          << "level " << level;
    }
    EXPECT_TRUE(training_graph(g, m.loss, Adam{}).ok());
  }
}

TEST(IsenseeUnet, BadConfigNamesTheField) {
  struct Case {
    IsenseeConfig config;
    std::string message;
  };
  IsenseeConfig indivisible = tiny_isensee();
  indivisible.size = 18;  // levels 3: needs a multiple of 4
  IsenseeConfig no_classes = tiny_isensee();
  no_classes.classes = 0;
  IsenseeConfig no_levels = tiny_isensee();
  no_levels.levels = 0;
  for (const Case& k :
       {Case{indivisible, "size = 18 must be divisible by 2^(levels-1) = 2^2"},
        Case{no_classes, "classes = 0 must be >= 1"}, Case{no_levels, "levels = 0 must be >= 1"}}) {
    Graph g;
    const models::ModelTensors m = models::build_isensee_unet(g, k.config);
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
    EXPECT_NE(std::string(g.status().message()).find(k.message), std::string::npos) << g.status();
    EXPECT_EQ(m.loss, kNoTensor);
    EXPECT_EQ(g.num_nodes(), 0);
  }
}

Graph tiny_training_graph() {
  Graph g;
  const models::ModelTensors m = models::build_isensee_unet(g, tiny_isensee());
  EXPECT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, m.loss, Adam{.lr = 5e-3});
  EXPECT_TRUE(train.ok()) << train.status();
  return train.ok() ? *std::move(train) : Graph{};
}

struct Trained {
  RewriteReport report;
  std::vector<float> losses;
  std::vector<uint64_t> peaks;
  std::map<std::string, std::vector<float>> state;
};

// Plans the tiny network for the CPU device (LMS off, or on under `budget`)
// and runs kSteps steps on the fixed batch.
void train(bool lms, uint64_t budget, Trained& out) {
  auto device = make_cpu_device({.capacity_bytes = kCapacity, .host_pool_bytes = 64 * kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  Graph g = tiny_training_graph();
  LmsConfig cfg;
  cfg.enabled = lms;
  cfg.device_memory_limit = budget;
  cfg.time_model = TimeModel::kRoofline;  // nothing profiled: a deterministic plan
  auto rep = rewrite(g, cfg, **device);
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_TRUE(rep->fits) << rep->summary();
  out.report = *rep;
  auto session = Session::create(g, **device);
  ASSERT_TRUE(session.ok()) << session.status();
  const Feeds feeds = isensee_feeds(tiny_isensee(), kSeed);
  for (int i = 0; i < kSteps; ++i) {
    StepResult r;
    ASSERT_TRUE((*session)->run(feeds, &r).ok());
    out.losses.push_back(r.fetched.at("loss")[0]);
    out.peaks.push_back(r.peak_device_bytes);
  }
  out.state = persistent_state(**session);
}

TEST(IsenseeUnet, AdamLowersTheDiceLossWithAndWithoutSwaps) {
  std::printf("seed %llu, Isensee U-Net 16^3, 3 levels, 4 base filters, 3 classes\n",
              static_cast<unsigned long long>(kSeed));
  Trained off;
  train(false, 0, off);
  ASSERT_EQ(off.losses.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) std::printf("step %d loss %.6f\n", i, off.losses[i]);
  for (float loss : off.losses) EXPECT_TRUE(std::isfinite(loss)) << loss;
  EXPECT_LT(off.losses.back(), off.losses.front());

  // A budget between the working-set limit and the unswapped peak: the plan
  // must swap.
  const uint64_t budget = (off.report.working_set_limit_bytes + off.report.peak_bytes_after) / 2;
  std::printf("working-set limit %llu B, unswapped peak %llu B, budget %llu B\n",
              static_cast<unsigned long long>(off.report.working_set_limit_bytes),
              static_cast<unsigned long long>(off.report.peak_bytes_after),
              static_cast<unsigned long long>(budget));
  ASSERT_LT(off.report.working_set_limit_bytes, off.report.peak_bytes_after);
  Trained on;
  train(true, budget, on);
  ASSERT_EQ(on.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_FALSE(on.report.swapped.empty()) << on.report.summary();
  EXPECT_LE(on.report.peak_bytes_after, budget);
  EXPECT_LT(on.report.peak_bytes_after, off.report.peak_bytes_after);

  for (int i = 0; i < kSteps; ++i) {
    EXPECT_EQ(std::memcmp(&on.losses[i], &off.losses[i], sizeof(float)), 0)
        << "step " << i << ": " << on.losses[i] << " vs " << off.losses[i];
  }
  EXPECT_EQ(differing(on.state, off.state), std::vector<std::string>{});
  EXPECT_FALSE(off.state.empty());
  for (const Trained* t : {&off, &on}) {
    for (uint64_t peak : t->peaks) EXPECT_EQ(peak, t->report.peak_bytes_after);
  }
}

}  // namespace
}  // namespace lms::user
