// Session + executor on the emulated CPU device: training, gradients against
// finite differences, OOM handling, feeds, determinism.
#include "lms/session.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "backend/cpu/cpu_device.h"
#include "lms/ops.h"
#include "lms/training.h"
#include "models.h"

namespace lms {
namespace {

constexpr uint64_t kMiB = 1 << 20;

std::unique_ptr<cpu::CpuDevice> make_device(uint64_t capacity) {
  auto d = cpu::CpuDevice::create({.capacity_bytes = capacity, .host_pool_bytes = 512 * kMiB});
  EXPECT_TRUE(d.ok()) << d.status();
  return std::move(d).value();
}

std::vector<float> random_values(int64_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

// Feeds for a VDSR graph: hr random, lr = hr plus a small deterministic blur-like
// perturbation, so the residual is learnable.
Feeds vdsr_feeds(const Graph& g, uint64_t seed) {
  int64_t n = num_elements(g.tensor(g.find_tensor("hr")).shape);
  std::vector<float> hr = random_values(n, seed);
  std::vector<float> lr(hr);
  for (int64_t i = 1; i < n; ++i) lr[i] = 0.5f * (hr[i] + hr[i - 1]);
  return {{"lr", lr}, {"hr", hr}};
}

TEST(SessionTest, VdsrShapedNetworkTrainsAndLossDecreases) {
  std::printf("seed 7\n");
  Graph g;
  auto m =
      models::build_vdsr(g, {.batch = 4, .height = 24, .width = 24, .depth = 20, .channels = 16});
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, m.loss, Adam{.lr = 1e-3, .clip_norm = 1.0});
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_device(64 * kMiB);
  auto session = Session::create(*train, *device);
  ASSERT_TRUE(session.ok()) << session.status();
  Feeds feeds = vdsr_feeds(*train, 7);
  std::vector<float> losses;
  for (int step = 0; step < 5; ++step) {
    StepResult r;
    absl::Status s = (*session)->run(feeds, &r);
    ASSERT_TRUE(s.ok()) << s;
    losses.push_back(r.fetched.at("loss")[0]);
    EXPECT_GT(r.peak_device_bytes, 0u);
    EXPECT_LE(r.peak_device_bytes, 64 * kMiB);
    std::printf("step %d loss %.6f peak %llu bytes\n", step, losses.back(),
                static_cast<unsigned long long>(r.peak_device_bytes));
  }
  for (float l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(losses.back(), losses.front());
}

TEST(SessionTest, LargerBatchFailsCleanlyWithResourceExhausted) {
  Graph g;
  auto m =
      models::build_vdsr(g, {.batch = 32, .height = 24, .width = 24, .depth = 20, .channels = 16});
  auto train = training_graph(g, m.loss, Adam{.lr = 1e-3});
  ASSERT_TRUE(train.ok());
  auto device = make_device(8 * kMiB);
  // The step's buffers live in one arena laid out at Session::create (Note
  // [Step layout]), so a step that cannot fit is refused there, before any
  // step runs, and the device is left as it was.
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto session = Session::create(*train, *device);
    ASSERT_EQ(session.status().code(), absl::StatusCode::kResourceExhausted) << session.status();
    std::string msg(session.status().message());
    EXPECT_NE(msg.find("arena"), std::string::npos) << msg;
    EXPECT_NE(msg.find("capacity"), std::string::npos) << msg;
    EXPECT_NE(msg.find("lms::rewrite"), std::string::npos) << msg;  // the hint
    EXPECT_EQ(device->memory_stats().bytes_in_use, 0u);
  }
  // A batch that fits still runs on the same device.
  Graph small;
  auto m1 = models::build_vdsr(
      small, {.batch = 2, .height = 24, .width = 24, .depth = 20, .channels = 16});
  auto train1 = training_graph(small, m1.loss, Adam{.lr = 1e-3});
  ASSERT_TRUE(train1.ok());
  auto session = Session::create(*train1, *device);
  ASSERT_TRUE(session.ok()) << session.status();
  StepResult r;
  absl::Status s = (*session)->run(vdsr_feeds(*train1, 3), &r);
  EXPECT_TRUE(s.ok()) << s;
  auto w = (*session)->read("conv1/w");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->size(), 16u * 9u);
}

// Gradients fetched from the training graph match central finite differences
// of the loss computed by a forward-only session with the same weights.
TEST(SessionTest, GradientsMatchFiniteDifferences) {
  std::printf("seed 11\n");
  Graph g;
  TensorId x = g.input("x", {2, 2, 6, 6});
  TensorId t = g.input("t", {2, 1, 6, 6});
  TensorId h = conv2d(g, "c1", x, 3, {3}, {.pad = {1}, .seed = 5});
  h = sigmoid(g, "s1", h);
  h = conv2d(g, "c2", h, 1, {3}, {.pad = {1}, .seed = 6});
  TensorId loss = mse_loss(g, "loss", h, t);
  ASSERT_TRUE(g.status().ok()) << g.status();
  g.set_loss(loss);
  auto train = training_graph(g, loss, Sgd{.lr = 0.0});
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_device(16 * kMiB);
  auto trainer = Session::create(*train, *device, {.fetches = {"loss", "c1/w/grad", "c2/b/grad"}});
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto forward = Session::create(g, *device);
  ASSERT_TRUE(forward.ok()) << forward.status();
  Feeds feeds = {{"x", random_values(2 * 2 * 36, 11)}, {"t", random_values(2 * 36, 12)}};
  StepResult r;
  ASSERT_TRUE((*trainer)->run(feeds, &r).ok());
  for (const char* p : {"c1/w", "c2/b"}) {
    std::vector<float> w = *(*trainer)->read(p);
    ASSERT_TRUE((*forward)->write(p, w).ok());
    const std::vector<float>& grad = r.fetched.at(std::string(p) + "/grad");
    for (size_t i = 0; i < w.size(); i += 7) {
      const float eps = 1e-2f;
      auto loss_at = [&](float v) {
        std::vector<float> wp = w;
        wp[i] = v;
        EXPECT_TRUE((*forward)->write(p, wp).ok());
        StepResult fr;
        EXPECT_TRUE((*forward)->run(feeds, &fr).ok());
        return static_cast<double>(fr.fetched.at("loss")[0]);
      };
      double numeric = (loss_at(w[i] + eps) - loss_at(w[i] - eps)) / (2 * eps);
      EXPECT_NEAR(grad[i], numeric, 2e-3 + 0.05 * std::fabs(numeric)) << p << "[" << i << "]";
    }
    ASSERT_TRUE((*forward)->write(p, w).ok());
  }
}

TEST(SessionTest, BadFeedsAreInvalidArgument) {
  Graph g;
  auto m = models::build_vdsr(g, {.batch = 1, .height = 8, .width = 8, .depth = 3, .channels = 4});
  g.set_loss(m.loss);
  auto device = make_device(16 * kMiB);
  auto session = Session::create(g, *device);
  ASSERT_TRUE(session.ok());
  StepResult r;
  absl::Status missing = (*session)->run({{"lr", std::vector<float>(64)}}, &r);
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(missing.message()).find("hr"), std::string::npos);
  absl::Status size =
      (*session)->run({{"lr", std::vector<float>(63)}, {"hr", std::vector<float>(64)}}, &r);
  EXPECT_EQ(size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      (*session)->run({{"lr", std::vector<float>(64)}, {"hr", std::vector<float>(64)}}, &r).ok());
  EXPECT_EQ(Session::create(g, *device, {.fetches = {"nope"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*session)->read("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(SessionTest, TwoRunsAreBitIdentical) {
  auto run_losses = [] {
    Graph g;
    auto m =
        models::build_vdsr(g, {.batch = 2, .height = 16, .width = 16, .depth = 5, .channels = 8});
    auto train = training_graph(g, m.loss, Adam{.lr = 1e-3});
    auto device = make_device(32 * kMiB);
    auto session = Session::create(*train, *device);
    std::vector<float> losses;
    Feeds feeds = vdsr_feeds(*train, 5);
    for (int i = 0; i < 3; ++i) {
      StepResult r;
      EXPECT_TRUE((*session)->run(feeds, &r).ok());
      losses.push_back(r.fetched.at("loss")[0]);
    }
    losses.push_back((*session)->read("conv3/w")->at(0));
    return losses;
  };
  std::vector<float> a = run_losses(), b = run_losses();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << i;
}

}  // namespace
}  // namespace lms
