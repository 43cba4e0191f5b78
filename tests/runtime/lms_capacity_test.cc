// How much larger a batch LMS trains under a fixed device capacity (the
// bench/README.md targets at test scale): the largest VDSR-shaped batch with
// the auto policy reaches >= 99% of the working-set limit and >= 4x the largest
// batch without LMS (measured: 86 vs 15 at a limit of 86). Fit decisions come
// from the planner's static layout (Note [Honest fits]); the batches at the
// boundaries are then run for real.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <random>

#include "backend/cpu/cpu_device.h"
#include "lms/config.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/training.h"
#include "models.h"

namespace lms {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kCapacity = 6 * kMiB;

Graph vdsr_training(int64_t batch) {
  Graph g;
  auto m = models::build_vdsr(
      g, {.batch = batch, .height = 16, .width = 16, .depth = 20, .channels = 16});
  return *training_graph(g, m.loss, Adam{.lr = 1e-3});
}

// Largest batch in [1, hi] for which `fits` holds (fits is monotone).
int64_t largest(const std::function<bool(int64_t)>& fits, int64_t hi) {
  int64_t lo = 0;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (fits(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

struct Probe {
  cpu::CpuDevice& device;
  absl::StatusOr<RewriteReport> rewrite_at(int64_t batch, Graph& g, bool enabled) {
    g = vdsr_training(batch);
    auto ws = kernel_workspace_bytes(g, device);
    if (!ws.ok()) return ws.status();
    LmsConfig cfg;
    cfg.enabled = enabled;
    cfg.policy = SwapPolicy::kAuto;
    return rewrite(g, cfg, {.device_capacity_bytes = kCapacity, .workspace_bytes = *ws});
  }
};

absl::Status run_one_step(const Graph& g, Device& device, int64_t batch) {
  auto session = Session::create(g, device);
  if (!session.ok()) return session.status();
  std::mt19937_64 gen(static_cast<uint64_t>(batch));
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> lr(batch * 16 * 16), hr(lr.size());
  for (float& x : lr) x = u(gen);
  for (float& x : hr) x = u(gen);
  StepResult r;
  return (*session)->run({{"lr", lr}, {"hr", hr}}, &r);
}

TEST(LmsCapacityTest, AutoReachesTheWorkingSetLimitAndFourTimesTheBatch) {
  auto device =
      cpu::CpuDevice::create({.capacity_bytes = kCapacity, .host_pool_bytes = 512 * kMiB});
  ASSERT_TRUE(device.ok());
  Probe probe{**device};
  auto ws = kernel_workspace_bytes(vdsr_training(1), **device);
  auto fits_without = [&](int64_t b) {
    Graph g;
    auto rep = probe.rewrite_at(b, g, false);
    return rep.ok() && rep->fits;
  };
  auto fits_with = [&](int64_t b) {
    Graph g;
    auto rep = probe.rewrite_at(b, g, true);
    return rep.ok() && rep->fits;
  };
  auto within_working_set = [&](int64_t b) {
    Graph g;
    auto rep = probe.rewrite_at(b, g, false);
    return rep.ok() && rep->working_set_limit_bytes <= kCapacity;
  };
  const int64_t kMaxBatch = 256;
  int64_t without = largest(fits_without, kMaxBatch);
  int64_t with = largest(fits_with, kMaxBatch);
  int64_t limit = largest(within_working_set, kMaxBatch);
  std::printf(
      "capacity %llu MiB: largest batch without LMS %lld, with LMS %lld (%.1fx), "
      "working-set limit %lld (%.0f%%)\n",
      (unsigned long long)(kCapacity / kMiB), (long long)without, (long long)with,
      static_cast<double>(with) / without, (long long)limit, 100.0 * with / limit);
  ASSERT_GT(without, 0);
  ASSERT_LT(limit, kMaxBatch);
  EXPECT_GE(with, 4 * without);
  EXPECT_GE(static_cast<double>(with), 0.99 * static_cast<double>(limit));

  // The boundaries hold for real on the emulated device: the graph the
  // rewrite laid out for `without` runs in its layout.
  Graph at_limit;
  ASSERT_TRUE(probe.rewrite_at(without, at_limit, false).ok());
  absl::Status at = run_one_step(at_limit, **device, without);
  EXPECT_TRUE(at.ok()) << at;
  absl::Status over = run_one_step(vdsr_training(without + 1), **device, without + 1);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  Graph g;
  ASSERT_TRUE(probe.rewrite_at(with, g, true).ok());
  absl::Status lms_run = run_one_step(g, **device, with);
  EXPECT_TRUE(lms_run.ok()) << lms_run;
}

}  // namespace
}  // namespace lms
