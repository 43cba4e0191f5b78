// dropout through include/lms only: the mask, regenerated from (seed, step,
// element index) and never stored, is the same in the forward and the
// backward, keeps about 1 - ratio of the elements, differs between steps
// and between seeds, is the same in two sessions and for any number of
// threads, and a failed step does not advance its step; kept elements are
// x / (1 - ratio); a small model with dropout planned with LMS at a tight
// budget is bit-identical to the step without LMS; bad attributes are
// InvalidArgument naming the node.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <random>

#include "budget_check.h"

namespace lms {
namespace {

using user::kMiB;

constexpr int64_t kElements = 100000;

std::vector<float> random_values(int64_t n, float lo, float hi, std::mt19937_64& gen) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(gen);
  return v;
}

// x (a parameter, never moved: lr 0) -> dropout -> reduce_mean, so
// dy = 1/n everywhere and x/grad = dropout_bwd(1/n).
struct DropoutRun {
  std::vector<std::vector<float>> y, dx;  // by step
};

DropoutRun run_dropout(const std::vector<float>& x, double ratio, int64_t seed, int steps,
                       int threads = 0) {
  DropoutRun out;
  Graph g;
  const TensorId xt = g.parameter("x", {kElements}, Init{});
  const TensorId y = dropout(g, "drop", xt, ratio, seed);
  g.set_loss(reduce_mean(g, "loss", y));
  EXPECT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.0});
  EXPECT_TRUE(train.ok()) << train.status();
  if (!train.ok()) return out;
  auto device = make_cpu_device(
      {.capacity_bytes = 64 * kMiB, .host_pool_bytes = kMiB, .compute_threads = threads});
  EXPECT_TRUE(device.ok()) << device.status();
  auto session = Session::create(*train, **device, {.fetches = {"drop", "x/grad"}});
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return out;
  EXPECT_TRUE((*session)->write("x", x).ok());
  for (int s = 0; s < steps; ++s) {
    StepResult r;
    absl::Status st = (*session)->run({}, &r);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) return out;
    out.y.push_back(r.fetched.at("drop"));
    out.dx.push_back(r.fetched.at("x/grad"));
  }
  return out;
}

int64_t kept(const std::vector<float>& y) {
  int64_t k = 0;
  for (float v : y) k += v != 0.0f;
  return k;
}

TEST(Dropout, MaskIsTheSameInForwardAndBackwardAndKeepsAboutOneMinusRatio) {
  constexpr uint64_t kSeed = 71;
  std::printf("data seed %" PRIu64 ", dropout seed 5\n", kSeed);
  std::mt19937_64 gen(kSeed);
  const std::vector<float> x = random_values(kElements, 0.5f, 1.5f, gen);  // no zeros
  for (double ratio : {0.1, 0.3, 0.5, 0.9}) {
    SCOPED_TRACE(testing::Message() << "ratio " << ratio);
    const DropoutRun r = run_dropout(x, ratio, 5, 1);
    ASSERT_EQ(r.y.size(), 1u);
    const float scale = static_cast<float>(1.0 / (1.0 - ratio));
    const float dy = 1.0f / static_cast<float>(kElements);
    int64_t mismatches = 0;
    double sum_ratio = 0.0;
    for (int64_t i = 0; i < kElements; ++i) {
      const bool keep = r.y[0][i] != 0.0f;
      if (keep) {
        // Kept elements are x * float(1 / (1 - ratio)), within one rounding
        // of x / (1 - ratio).
        mismatches += r.y[0][i] != x[i] * scale;
        EXPECT_NEAR(r.y[0][i], x[i] / (1.0 - ratio), 1e-6 * x[i] / (1.0 - ratio));
      }
      // The backward regenerates the same mask: dx = dy * y / x.
      mismatches += r.dx[0][i] != (keep ? dy * scale : 0.0f);
      sum_ratio += r.y[0][i] / x[i];
    }
    EXPECT_EQ(mismatches, 0);
    const double n = static_cast<double>(kElements);
    const double sigma = std::sqrt(n * ratio * (1.0 - ratio));
    const int64_t k = kept(r.y[0]);
    std::printf("ratio %.1f: kept %" PRId64 " of %" PRId64 " (expected %.0f, sigma %.1f)\n", ratio,
                k, kElements, n * (1.0 - ratio), sigma);
    EXPECT_LE(std::abs(static_cast<double>(k) - n * (1.0 - ratio)), 5.0 * sigma);
    // E[y / x] = 1: the mean of keep / (1 - ratio) within 5 sigma.
    EXPECT_NEAR(sum_ratio / n, 1.0, 5.0 * sigma / n / (1.0 - ratio) + 1e-6);
  }
}

TEST(Dropout, MaskDiffersBetweenStepsAndSeedsAndNotBetweenSessionsOrThreads) {
  std::mt19937_64 gen(72);
  std::printf("data seed 72, dropout seeds 11 and 12\n");
  const std::vector<float> x = random_values(kElements, 0.5f, 1.5f, gen);
  const DropoutRun a = run_dropout(x, 0.5, 11, 3);
  const DropoutRun b = run_dropout(x, 0.5, 11, 3, 1);  // another session, one thread
  const DropoutRun c = run_dropout(x, 0.5, 12, 1);
  ASSERT_EQ(a.y.size(), 3u);
  ASSERT_EQ(b.y.size(), 3u);
  ASSERT_EQ(c.y.size(), 1u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(a.y[s], b.y[s]) << "step " << s;
    EXPECT_EQ(a.dx[s], b.dx[s]) << "step " << s;
  }
  EXPECT_NE(a.y[0], a.y[1]);
  EXPECT_NE(a.y[1], a.y[2]);
  EXPECT_NE(a.y[0], c.y[0]);
}

TEST(Dropout, RatioZeroIsTheIdentity) {
  std::mt19937_64 gen(73);
  std::printf("data seed 73\n");
  const std::vector<float> x = random_values(kElements, -1.0f, 1.0f, gen);
  const DropoutRun r = run_dropout(x, 0.0, 3, 1);
  ASSERT_EQ(r.y.size(), 1u);
  EXPECT_EQ(r.y[0], x);
}

// A failed step (a feed of the wrong size, found inside the step) does not
// advance the step of the mask: the next step equals a fresh session's first.
TEST(Dropout, AFailedStepDoesNotAdvanceTheStep) {
  std::mt19937_64 gen(74);
  std::printf("data seed 74, dropout seed 9\n");
  const std::vector<float> x = random_values(64, 0.5f, 1.5f, gen);
  const std::vector<float> t = random_values(64, 0.5f, 1.5f, gen);
  Graph g;
  const TensorId xt = g.input("x", {64});
  const TensorId w = g.parameter("w", {64}, Init::constant(1.0f));
  const TensorId y = dropout(g, "drop", mul(g, "xw", xt, w), 0.5, 9);
  g.set_loss(mse_loss(g, "loss", y, g.input("target", {64})));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.0});
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  auto first = [&](bool fail_first) -> std::vector<float> {
    auto session = Session::create(*train, **device, {.fetches = {"drop"}});
    EXPECT_TRUE(session.ok()) << session.status();
    if (!session.ok()) return {};
    StepResult r;
    if (fail_first) {
      absl::Status bad = (*session)->run({{"x", x}, {"target", {1.0f}}}, &r);
      EXPECT_FALSE(bad.ok());
      std::printf("failed step: %s\n", bad.ToString().c_str());
    }
    absl::Status st = (*session)->run({{"x", x}, {"target", t}}, &r);
    EXPECT_TRUE(st.ok()) << st;
    return st.ok() ? r.fetched.at("drop") : std::vector<float>{};
  };
  const std::vector<float> clean = first(false);
  ASSERT_EQ(clean.size(), 64u);
  EXPECT_EQ(first(true), clean);
}

// conv -> relu -> dropout -> conv -> mse, planned with LMS at a tight
// budget: the dropout's input or output is swapped or recomputed, and the
// regenerated masks keep the steps bit-identical.
TEST(Dropout, SmallModelWithLmsIsBitIdenticalAtThePredictedPeak) {
  constexpr uint64_t kSeed = 75;
  constexpr int64_t kN = 4, kSize = 32;
  std::printf("data seed %" PRIu64 ", dropout seed 21\n", kSeed);
  Graph g;
  const TensorId x = g.input("x", {kN, 3, kSize, kSize});
  TensorId h = relu(g, "relu1", conv2d(g, "conv1", x, 16, {3}, {.pad = {1}, .seed = 1}));
  h = dropout(g, "drop", h, 0.2, 21);
  h = conv2d(g, "conv2", h, 8, {3}, {.pad = {1}, .seed = 2});
  g.set_loss(mse_loss(g, "loss", h, g.input("target", {kN, 8, kSize, kSize})));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.05, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(kN * 3 * kSize * kSize, -2.0f, 2.0f, gen)},
                       {"target", random_values(kN * 8 * kSize * kSize, -1.0f, 1.0f, gen)}};
  user::expect_lms_steps_bit_identical(*train, feeds, 3);

  // The plans of that search that fit move the dropout's input or output.
  auto big = make_cpu_device({.capacity_bytes = 256 * kMiB, .host_pool_bytes = 64 * kMiB});
  ASSERT_TRUE(big.ok()) << big.status();
  Graph plain = *train;
  LmsConfig off;
  off.enabled = false;
  auto limits = rewrite(plain, off, **big);
  ASSERT_TRUE(limits.ok()) << limits.status();
  const uint64_t low = limits->working_set_limit_bytes, high = limits->peak_bytes_after;
  bool moved = false;
  for (int i = 0; i < 16 && !moved; ++i) {
    const uint64_t budget = low + (high - low) * i / 16;
    auto device = make_cpu_device({.capacity_bytes = budget, .host_pool_bytes = 64 * kMiB});
    ASSERT_TRUE(device.ok()) << device.status();
    Graph planned = *train;
    auto lms = rewrite(planned, LmsConfig{}, **device);
    if (!lms.ok() || !lms->fits) continue;
    for (const auto* names : {&lms->swapped, &lms->recomputed}) {
      for (const std::string& t : *names) {
        std::printf("budget %" PRIu64 ": %s %s\n", budget,
                    names == &lms->swapped ? "swapped" : "recomputed", t.c_str());
        moved = moved || t == "relu1" || t == "drop";
      }
    }
  }
  EXPECT_TRUE(moved) << "no plan swapped or recomputed relu1 or drop";
}

TEST(Dropout, BadAttributesAreInvalidArgumentNamingTheNode) {
  for (double ratio : {-0.1, 1.0, 1.5, std::nan("")}) {
    Graph g;
    dropout(g, "my_drop", g.input("x", {4}), ratio, 1);
    EXPECT_TRUE(absl::IsInvalidArgument(g.status())) << g.status();
    EXPECT_NE(g.status().message().find("my_drop"), std::string::npos) << g.status();
    EXPECT_NE(g.status().message().find("ratio"), std::string::npos) << g.status();
    std::printf("ratio %g: %s\n", ratio, g.status().ToString().c_str());
  }
  Graph g;
  const TensorId x = g.input("x", {4});
  auto wrong_ratio =
      g.add_node(OpKind::kDropout, "int_ratio", {x}, {{"ratio", int64_t{0}}, {"seed", int64_t{1}}});
  EXPECT_TRUE(absl::IsInvalidArgument(wrong_ratio.status())) << wrong_ratio.status();
  EXPECT_NE(wrong_ratio.status().message().find("int_ratio"), std::string::npos);
  auto wrong_seed = g.add_node(OpKind::kDropout, "real_seed", {x}, {{"ratio", 0.5}, {"seed", 1.0}});
  EXPECT_TRUE(absl::IsInvalidArgument(wrong_seed.status())) << wrong_seed.status();
  EXPECT_NE(wrong_seed.status().message().find("real_seed"), std::string::npos);
  std::printf("%s\n%s\n", wrong_ratio.status().ToString().c_str(),
              wrong_seed.status().ToString().c_str());
}

}  // namespace
}  // namespace lms
