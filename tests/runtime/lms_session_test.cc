// LMS end to end: a training graph that does not fit the device runs after
// lms::rewrite, with losses, gradients and weights bit-identical to an
// un-swapped run on a larger device; measured peak within the budget and
// close to the planner's prediction.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "backend/cpu/cpu_device.h"
#include "lms/config.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/training.h"
#include "models.h"

namespace lms {
namespace {

constexpr uint64_t kMiB = 1 << 20;

std::unique_ptr<cpu::CpuDevice> make_device(uint64_t capacity) {
  auto d = cpu::CpuDevice::create({.capacity_bytes = capacity, .host_pool_bytes = 256 * kMiB});
  EXPECT_TRUE(d.ok()) << d.status();
  return std::move(d).value();
}

std::vector<float> random_values(int64_t n, std::mt19937_64& gen) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

struct Run {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;    // last step's fetched gradients
  std::vector<std::vector<float>> weights;  // after the last step
  uint64_t peak = 0;
  uint64_t swapped_bytes = 0;
};

struct Case {
  Graph train;
  std::vector<std::string> params;  // parameters whose gradient and weight we compare
  Feeds feeds;
};

absl::StatusOr<Run> train_steps(const Case& c, const Graph& graph, Device& device, int steps) {
  SessionOptions opts;
  opts.fetches.push_back(graph.tensor(graph.loss()).name);
  for (const std::string& p : c.params) opts.fetches.push_back(p + "/grad");
  auto session = Session::create(graph, device, opts);
  if (!session.ok()) return session.status();
  Run run;
  for (int i = 0; i < steps; ++i) {
    StepResult r;
    absl::Status s = (*session)->run(c.feeds, &r);
    if (!s.ok()) return s;
    run.losses.push_back(r.fetched.at(opts.fetches[0])[0]);
    run.peak = std::max(run.peak, r.peak_device_bytes);
    run.swapped_bytes += r.bytes_d2h;
    if (i + 1 == steps) {
      for (const std::string& p : c.params) run.grads.push_back(r.fetched.at(p + "/grad"));
    }
  }
  for (const std::string& p : c.params) run.weights.push_back(*(*session)->read(p));
  return run;
}

void expect_identical(const Run& a, const Run& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], b.losses[i]) << "step " << i;
  for (size_t p = 0; p < a.grads.size(); ++p) {
    ASSERT_EQ(a.grads[p].size(), b.grads[p].size());
    EXPECT_EQ(0, std::memcmp(a.grads[p].data(), b.grads[p].data(), a.grads[p].size() * 4))
        << "gradient " << p;
    EXPECT_EQ(0, std::memcmp(a.weights[p].data(), b.weights[p].data(), a.weights[p].size() * 4))
        << "weight " << p;
  }
}

Case vdsr_case(uint64_t seed) {
  Case c;
  Graph g;
  auto m =
      models::build_vdsr(g, {.batch = 4, .height = 24, .width = 24, .depth = 20, .channels = 16});
  c.train = *training_graph(g, m.loss, Adam{.lr = 1e-3, .clip_norm = 1.0});
  c.params = {"conv1/w", "conv10/w", "conv20/b"};
  std::mt19937_64 gen(seed);
  int64_t n = 4 * 24 * 24;
  c.feeds = {{"lr", random_values(n, gen)}, {"hr", random_values(n, gen)}};
  return c;
}

Case unet_case(uint64_t seed) {
  Case c;
  Graph g;
  auto m = models::build_unet(g, {.batch = 2,
                                  .in_channels = 2,
                                  .classes = 3,
                                  .size = 32,
                                  .base_filters = 8,
                                  .levels = 3,
                                  .spatial_dims = 2});
  c.train = *training_graph(g, m.loss, Adam{.lr = 1e-3});
  c.params = {"down0/0/conv/w", "dec0/1/norm/gamma", "head/w"};
  std::mt19937_64 gen(seed);
  std::vector<float> labels(2 * 3 * 32 * 32, 0.0f);
  for (int64_t i = 0; i < 2 * 32 * 32; ++i) {
    int64_t n = i / (32 * 32), pix = i % (32 * 32);
    labels[(n * 3 + gen() % 3) * 32 * 32 + pix] = 1.0f;
  }
  c.feeds = {{"image", random_values(2 * 2 * 32 * 32, gen)}, {"labels", labels}};
  return c;
}

// The budget: between the working-set limit and the un-swapped peak, so that
// the graph cannot run without LMS and the planner has to swap.
void check_lms_case(Case c, const char* name) {
  std::printf("%s: feeds seeded, 5 steps\n", name);
  auto big = make_device(512 * kMiB);
  auto baseline = train_steps(c, c.train, *big, 5);
  ASSERT_TRUE(baseline.ok()) << baseline.status();

  auto ws = kernel_workspace_bytes(c.train, *big);
  ASSERT_TRUE(ws.ok()) << ws.status();
  const PlanningFacts facts{.workspace_bytes = *ws};
  RewriteOptions options;
  for (const std::string& p : c.params) options.fetched.push_back(p + "/grad");
  options.fetched.push_back(c.train.tensor(c.train.loss()).name);
  LmsConfig probe;
  probe.enabled = false;
  Graph dry = c.train;
  LmsConfig cfg;
  cfg.policy = SwapPolicy::kAuto;
  cfg.device_memory_limit = baseline->peak;  // only to learn the limits
  auto info = rewrite(dry, cfg, facts, options);
  ASSERT_TRUE(info.ok()) << info.status();
  uint64_t budget = (info->working_set_limit_bytes + baseline->peak) / 2;
  std::printf("%s: unswapped peak %llu, working-set limit %llu, budget %llu\n", name,
              (unsigned long long)baseline->peak, (unsigned long long)info->working_set_limit_bytes,
              (unsigned long long)budget);
  ASSERT_LT(budget, baseline->peak);

  auto small = make_device(budget);
  auto without = train_steps(c, c.train, *small, 1);
  ASSERT_EQ(without.status().code(), absl::StatusCode::kResourceExhausted) << without.status();

  Graph swapped = c.train;
  cfg.device_memory_limit = budget;
  auto report = rewrite(swapped, cfg, facts, options);
  ASSERT_TRUE(report.ok()) << report.status();
  std::printf("%s", report->summary().c_str());
  EXPECT_FALSE(report->swapped.empty());
  auto with = train_steps(c, swapped, *small, 5);
  ASSERT_TRUE(with.ok()) << with.status();
  expect_identical(*baseline, *with);
  EXPECT_LE(with->peak, budget);
  EXPECT_GT(with->swapped_bytes, 0u);
  std::printf("%s: measured peak %llu, predicted %llu\n", name, (unsigned long long)with->peak,
              (unsigned long long)report->peak_bytes_after);
  // The prediction is an exact replay of the step's allocations on the same
  // allocator (Note [Honest fits]): equal to the byte.
  EXPECT_EQ(with->peak, report->peak_bytes_after);
}

TEST(LmsSessionTest, VdsrFitsOnlyWithLmsAndIsBitIdentical) {
  check_lms_case(vdsr_case(21), "vdsr");
}

TEST(LmsSessionTest, UnetWithSkipsFitsOnlyWithLmsAndIsBitIdentical) {
  check_lms_case(unet_case(22), "unet");
}

// Every policy gives the same numbers as no swapping at all.
TEST(LmsSessionTest, EveryPolicyIsBitIdentical) {
  Case c = vdsr_case(23);
  auto device = make_device(256 * kMiB);
  auto baseline = train_steps(c, c.train, *device, 3);
  ASSERT_TRUE(baseline.ok()) << baseline.status();
  struct Variant {
    SwapPolicy policy;
    int sync_mode;
  };
  for (Variant v : {Variant{SwapPolicy::kTflms, 0}, Variant{SwapPolicy::kTflms, 3},
                    Variant{SwapPolicy::kVdnn, 0}, Variant{SwapPolicy::kManual, 0}}) {
    SwapPolicy policy = v.policy;
    Graph swapped = c.train;
    LmsConfig cfg;
    cfg.policy = policy;
    cfg.sync_mode = v.sync_mode;
    cfg.swapout_threshold = 3;
    cfg.tensors = {"relu3", "relu7", "relu12"};
    const PlanningFacts facts{.device_capacity_bytes = 256 * kMiB};
    RewriteOptions options;
    options.fetched.push_back(c.train.tensor(c.train.loss()).name);
    for (const std::string& p : c.params) options.fetched.push_back(p + "/grad");
    auto report = rewrite(swapped, cfg, facts, options);
    ASSERT_TRUE(report.ok()) << policy_name(policy) << ": " << report.status();
    EXPECT_FALSE(report->swapped.empty()) << policy_name(policy);
    auto run = train_steps(c, swapped, *device, 3);
    ASSERT_TRUE(run.ok()) << policy_name(policy) << ": " << run.status();
    EXPECT_GT(run->swapped_bytes, 0u);
    expect_identical(*baseline, *run);
  }
}

}  // namespace
}  // namespace lms
