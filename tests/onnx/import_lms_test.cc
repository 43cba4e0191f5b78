// An imported model trained with LMS: the U-Net fixture rewritten by
// lms::rewrite (Device overload) at 70% of its no-LMS peak gives the same
// bits as without LMS, at the peak the rewrite predicted.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>

#include "lms/config.h"
#include "lms/device.h"
#include "lms/onnx.h"
#include "lms/ops.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/training.h"
#include "reference.h"

namespace lms {
namespace {

constexpr uint64_t kSeed = 2718;
constexpr uint64_t kMiBytes = uint64_t{1} << 20;
const Shape kShape = {4, 1, 32, 32};

absl::StatusOr<Graph> imported_training_graph() {
  auto m = import_onnx(LMS_SOURCE_DIR "/tests/data/onnx/unet_small.onnx",
                       {.input_shapes = {{"input", kShape}}});
  if (!m.ok()) return m.status();
  Graph g = std::move(m->graph);
  TensorId loss = mse_loss(g, "loss", g.find_tensor("output"), g.input("target", kShape));
  if (!g.status().ok()) return g.status();
  return training_graph(g, loss, Sgd{.lr = 0.05, .momentum = 0.9});
}

Feeds random_feeds() {
  std::mt19937_64 gen(kSeed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform;
  std::vector<float> x(4 * 32 * 32), t(x.size());
  for (float& v : x) v = normal(gen);
  for (float& v : t) v = uniform(gen);
  return {{"input", x}, {"target", t}};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// What each step fetches, and so what the rewrite plans to keep.
RewriteOptions fetched() {
  RewriteOptions o;
  o.fetched = {"loss", "output"};
  return o;
}

struct StepsRun {
  std::vector<std::vector<float>> fetched;  // loss and output of each step
  std::vector<std::vector<float>> state;    // every persistent tensor after the last
  uint64_t peak = 0;
};

StepsRun run_steps(const Graph& g, Device& device) {
  StepsRun out;
  SessionOptions o;
  o.fetches = fetched().fetched;
  auto s = Session::create(g, device, o);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return out;
  const Feeds feeds = random_feeds();
  for (int step = 0; step < 2; ++step) {
    StepResult r;
    EXPECT_TRUE((*s)->run(feeds, &r).ok());
    out.fetched.push_back(r.fetched["loss"]);
    out.fetched.push_back(r.fetched["output"]);
    out.peak = std::max(out.peak, r.peak_device_bytes);
  }
  for (const std::string& name : (*s)->persistent_tensors()) {
    auto v = (*s)->read(name);
    EXPECT_TRUE(v.ok()) << name;
    out.state.push_back(v.ok() ? *v : std::vector<float>{});
  }
  return out;
}

TEST(ImportLms, TightBudgetIsBitIdenticalAtThePredictedPeak) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto train = imported_training_graph();
  ASSERT_TRUE(train.ok()) << train.status();
  auto big = make_cpu_device({.capacity_bytes = 256 * kMiBytes, .host_pool_bytes = 256 * kMiBytes});
  ASSERT_TRUE(big.ok()) << big.status();
  LmsConfig off;
  off.enabled = false;
  Graph plain = *train;
  auto none = rewrite(plain, off, **big, fetched());
  ASSERT_TRUE(none.ok()) << none.status();
  const StepsRun reference = run_steps(plain, **big);

  const uint64_t budget = std::max(none->working_set_limit_bytes, none->peak_bytes_after * 7 / 10);
  auto device = make_cpu_device({.capacity_bytes = budget, .host_pool_bytes = 256 * kMiBytes});
  ASSERT_TRUE(device.ok()) << device.status();
  LmsConfig cfg;
  cfg.time_model = TimeModel::kRoofline;
  Graph planned = *train;
  auto rep = rewrite(planned, cfg, **device, fetched());
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_TRUE(rep->fits) << rep->summary();
  std::printf("no-LMS peak %" PRIu64 " bytes; budget %" PRIu64 ": peak %" PRIu64
              ", %zu swapped, %zu recomputed\n",
              none->peak_bytes_after, budget, rep->peak_bytes_after, rep->swapped.size(),
              rep->recomputed.size());
  EXPECT_GT(rep->swapped.size() + rep->recomputed.size(), 0u);
  const StepsRun lms = run_steps(planned, **device);
  EXPECT_EQ(lms.peak, rep->peak_bytes_after);
  ASSERT_EQ(lms.fetched.size(), reference.fetched.size());
  for (size_t k = 0; k < lms.fetched.size(); ++k) {
    EXPECT_TRUE(same_bits(lms.fetched[k], reference.fetched[k])) << "fetch " << k;
  }
  ASSERT_EQ(lms.state.size(), reference.state.size());
  for (size_t k = 0; k < lms.state.size(); ++k) {
    EXPECT_TRUE(same_bits(lms.state[k], reference.state[k])) << "persistent tensor " << k;
  }
}

}  // namespace
}  // namespace lms
