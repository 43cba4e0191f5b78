// How large a batch LMS trains under a fixed device capacity on a user's
// 2-D U-Net with concat skips (a tensor read by three far-apart consumers),
// through include/lms alone: the largest batch the auto policy plans reaches
// >= 99% of the working-set limit (the batch whose busiest node alone fills
// the device, each convolution with its smaller-workspace kernel: the LMS
// runs opt in to such kernels with kernel_choice "least_workspace_to_fit"),
// and the batches at the boundaries run for real.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>

#include "lms/config.h"
#include "lms/rewrite.h"
#include "user_models.h"

namespace lms::user {
namespace {

constexpr uint64_t kCapacity = 8 * kMiB;
constexpr int64_t kSize = 32;
constexpr uint64_t kSeed = 5;

// Largest batch in [0, hi] for which `fits` holds (fits is monotone).
int64_t largest(const std::function<bool(int64_t)>& fits, int64_t hi) {
  int64_t lo = 0;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (fits(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

class Capacity : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = make_cpu_device({.capacity_bytes = kCapacity, .host_pool_bytes = 512 * kMiB});
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = std::move(*d);
  }

  // lms::rewrite on the device (roofline time model: nothing profiled, so
  // plans are deterministic); false when it has no plan or does not fit.
  bool fits(int64_t batch, bool lms, Graph* out = nullptr) {
    auto g = user_unet(batch, kSize, Adam{.lr = 1e-3f});
    if (!g.ok()) return false;
    LmsConfig cfg;
    cfg.enabled = lms;
    cfg.time_model = TimeModel::kRoofline;
    cfg.kernel_choice = KernelChoice::kLeastToFit;
    auto rep = rewrite(*g, cfg, *device_);
    if (!rep.ok() || !rep->fits) return false;
    if (out != nullptr) *out = std::move(*g);
    return true;
  }

  bool within_working_set(int64_t batch) {
    auto g = user_unet(batch, kSize, Adam{.lr = 1e-3f});
    if (!g.ok()) return false;
    auto fast = kernel_workspace_bytes(*g, *device_);
    auto least = least_kernel_workspace_bytes(*g, *device_);
    if (!fast.ok() || !least.ok()) return false;
    for (size_t i = 0; i < least->size(); ++i) (*fast)[i] = std::min((*fast)[i], (*least)[i]);
    LmsConfig off;
    off.enabled = false;
    auto rep = rewrite(*g, off, {.device_capacity_bytes = kCapacity, .workspace_bytes = *fast});
    return rep.ok() && rep->working_set_limit_bytes <= kCapacity;
  }

  absl::Status run_one_step(int64_t batch, bool lms) {
    Graph g;
    if (!fits(batch, lms, &g)) return absl::ResourceExhaustedError("no plan fits");
    auto session = Session::create(g, *device_);
    if (!session.ok()) return session.status();
    StepResult r;
    return (*session)->run(user_unet_feeds(batch, kSize, kSeed), &r);
  }

  std::unique_ptr<Device> device_;
};

TEST_F(Capacity, AutoReachesTheWorkingSetLimitOnAUnet) {
  std::printf("seed %llu, U-Net %lldx%lld, capacity %llu MiB\n",
              static_cast<unsigned long long>(kSeed), static_cast<long long>(kSize),
              static_cast<long long>(kSize), static_cast<unsigned long long>(kCapacity / kMiB));
  constexpr int64_t kMaxBatch = 512;
  const int64_t without = largest([&](int64_t b) { return b == 0 || fits(b, false); }, kMaxBatch);
  const int64_t with = largest([&](int64_t b) { return b == 0 || fits(b, true); }, kMaxBatch);
  const int64_t limit =
      largest([&](int64_t b) { return b == 0 || within_working_set(b); }, kMaxBatch);
  std::printf(
      "largest batch without LMS %lld, with LMS %lld (%.1fx), working-set limit %lld (%.1f%%)\n",
      static_cast<long long>(without), static_cast<long long>(with),
      static_cast<double>(with) / static_cast<double>(std::max<int64_t>(without, 1)),
      static_cast<long long>(limit),
      100.0 * static_cast<double>(with) / static_cast<double>(limit));
  ASSERT_GT(without, 0);
  ASSERT_LT(limit, kMaxBatch);
  EXPECT_GT(with, without);
  EXPECT_LE(with, limit);
  EXPECT_GE(static_cast<double>(with), 0.99 * static_cast<double>(limit));

  // The boundaries hold for real.
  EXPECT_TRUE(run_one_step(without, false).ok());
  EXPECT_TRUE(run_one_step(with, true).ok());
}

}  // namespace
}  // namespace lms::user
