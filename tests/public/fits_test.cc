// RewriteReport::fits, checked against real steps: a user's U-Net-like graph
// (concat skips, a tensor read by three far-apart consumers) is planned
// through the Device overload of lms::rewrite at 20 budgets from its
// working-set limit to its no-LMS peak. Wherever the report says the step
// fits, the step runs and its measured peak is the predicted peak; with LMS
// off, `fits` is exactly "the step runs".
#include <gtest/gtest.h>

#include <cinttypes>

#include "lms/config.h"
#include "lms/rewrite.h"
#include "user_models.h"

namespace lms {
namespace {

using user::kMiB;

constexpr int64_t kBatch = 4;
constexpr int64_t kSize = 32;
constexpr uint64_t kSeed = 8101;

struct StepOutcome {
  absl::Status status;
  uint64_t peak = 0;
  float loss = 0;
};

StepOutcome one_step(const Graph& graph, Device& device, const Feeds& feeds) {
  StepOutcome out;
  auto session = Session::create(graph, device);
  if (!session.ok()) {
    out.status = session.status();
    return out;
  }
  StepResult r;
  out.status = (*session)->run(feeds, &r);
  if (out.status.ok()) {
    out.peak = r.peak_device_bytes;
    out.loss = r.fetched.at("loss")[0];
  }
  return out;
}

TEST(Fits, HonestAtEveryBudgetFromTheWorkingSetToThePeak) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto train = user::user_unet(kBatch, kSize, Adam{.lr = 1e-3, .clip_norm = 1.0});
  ASSERT_TRUE(train.ok()) << train.status();
  const Feeds feeds = user::user_unet_feeds(kBatch, kSize, kSeed);

  // Limits and the reference loss on a device with room to spare.
  auto big = make_cpu_device({.capacity_bytes = 256 * kMiB, .host_pool_bytes = 256 * kMiB});
  ASSERT_TRUE(big.ok()) << big.status();
  LmsConfig off;
  off.enabled = false;
  Graph probe = *train;
  auto limits = rewrite(probe, off, **big);
  ASSERT_TRUE(limits.ok()) << limits.status();
  ASSERT_TRUE(limits->fits) << limits->summary();
  const StepOutcome reference = one_step(probe, **big, feeds);
  ASSERT_TRUE(reference.status.ok()) << reference.status;
  EXPECT_EQ(reference.peak, limits->peak_bytes_after);
  // The no-LMS peak as a device size: the smallest capacity (in 256-byte
  // units, the allocator's alignment) on which the unchanged step fits. A
  // tight device fragments differently from a roomy one, so this is at or
  // above the peak measured on `big`.
  auto fits_without_lms = [&](uint64_t capacity) -> bool {
    auto d = make_cpu_device({.capacity_bytes = capacity, .host_pool_bytes = kMiB});
    EXPECT_TRUE(d.ok()) << d.status();
    Graph g = *train;
    auto r = rewrite(g, off, **d);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && r->fits;
  };
  uint64_t lo = reference.peak / 256, hi = 2 * reference.peak / 256;
  ASSERT_TRUE(fits_without_lms(hi * 256));
  while (lo + 1 < hi) {  // fits at hi, not at lo (or lo is the measured peak)
    const uint64_t mid = (lo + hi) / 2;
    (fits_without_lms(mid * 256) ? hi : lo) = mid;
  }
  const uint64_t low = limits->working_set_limit_bytes, high = hi * 256;
  std::printf("working-set limit %" PRIu64 " bytes, no-LMS peak %" PRIu64
              " bytes (measured on a roomy device), smallest device without LMS %" PRIu64
              " bytes\n",
              low, reference.peak, high);
  ASSERT_LT(low, high);

  constexpr int kBudgets = 20;
  int lms_fits = 0, off_fits = 0;
  for (int i = 0; i < kBudgets; ++i) {
    const uint64_t budget = low + (high - low) * i / (kBudgets - 1);
    SCOPED_TRACE(testing::Message() << "budget " << budget);
    auto device = make_cpu_device({.capacity_bytes = budget, .host_pool_bytes = 256 * kMiB});
    ASSERT_TRUE(device.ok()) << device.status();

    // LMS off: fits is exactly whether the unchanged step runs.
    Graph plain = *train;
    auto no_lms = rewrite(plain, off, **device);
    ASSERT_TRUE(no_lms.ok()) << no_lms.status();
    EXPECT_TRUE(no_lms->fit_unknown_reason.empty()) << no_lms->fit_unknown_reason;
    const StepOutcome plain_step = one_step(plain, **device, feeds);
    EXPECT_EQ(no_lms->fits, plain_step.status.ok()) << plain_step.status;
    if (!plain_step.status.ok()) {
      EXPECT_EQ(plain_step.status.code(), absl::StatusCode::kResourceExhausted);
    } else {
      EXPECT_EQ(plain_step.peak, no_lms->peak_bytes_after);
      ++off_fits;
    }

    // LMS on (auto): where it says fits, the step runs at the predicted peak.
    Graph swapped = *train;
    auto lms = rewrite(swapped, LmsConfig{}, **device);
    if (!lms.ok()) {
      EXPECT_EQ(lms.status().code(), absl::StatusCode::kResourceExhausted) << lms.status();
      std::printf("budget %" PRIu64 ": no plan (%s)\n", budget,
                  std::string(lms.status().message()).c_str());
      continue;
    }
    std::printf("budget %" PRIu64 ": fits %d, %zu swapped, predicted peak %" PRIu64 "\n", budget,
                lms->fits, lms->swapped.size(), lms->peak_bytes_after);
    if (!lms->fits) continue;
    ++lms_fits;
    EXPECT_LE(lms->peak_bytes_after, budget);
    const StepOutcome step = one_step(swapped, **device, feeds);
    ASSERT_TRUE(step.status.ok()) << step.status;
    EXPECT_EQ(step.peak, lms->peak_bytes_after);
    EXPECT_EQ(std::memcmp(&step.loss, &reference.loss, sizeof(float)), 0)
        << step.loss << " vs " << reference.loss;
  }
  std::printf("LMS fits at %d of %d budgets, no LMS at %d\n", lms_fits, kBudgets, off_fits);
  // The sweep means something: LMS fits where the plain step does not, and
  // the top budget (the measured no-LMS peak) fits without LMS.
  EXPECT_GT(lms_fits, off_fits);
  EXPECT_GE(off_fits, 1);
}

}  // namespace
}  // namespace lms
