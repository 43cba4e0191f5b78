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

using user::differing;
using user::run_steps;
using user::StepsRun;

// One step fetching the loss: its bits, the persistent state after it and
// the measured peak.
StepsRun one_step(const Graph& graph, Device& device, const Feeds& feeds) {
  return run_steps(graph, device, feeds, {"loss"}, 1);
}

// Whether two runs gave the same bits: the loss and every persistent tensor.
void expect_same_bits(const StepsRun& a, const StepsRun& b) {
  ASSERT_EQ(a.fetched.size(), b.fetched.size());
  for (size_t k = 0; k < a.fetched.size(); ++k)
    EXPECT_TRUE(user::same_bits(a.fetched[k], b.fetched[k]));
  EXPECT_EQ(differing(a.state, b.state), std::vector<std::string>{});
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
  const StepsRun reference = one_step(probe, **big, feeds);
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
    const StepsRun plain_step = one_step(plain, **device, feeds);
    EXPECT_EQ(no_lms->fits, plain_step.status.ok()) << plain_step.status;
    if (!plain_step.status.ok()) {
      EXPECT_EQ(plain_step.status.code(), absl::StatusCode::kResourceExhausted);
    } else {
      EXPECT_EQ(plain_step.peak, no_lms->peak_bytes_after);
      ++off_fits;
    }

    // LMS on (auto, default options): where it says fits, the step runs at
    // the predicted peak and gives the bits of the step without LMS on the
    // default kernels (kernel_choice "default" moves none).
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
    EXPECT_TRUE(lms->least_workspace_nodes.empty()) << lms->summary();
    if (!lms->fits) continue;
    ++lms_fits;
    EXPECT_LE(lms->peak_bytes_after, budget);
    const StepsRun step = one_step(swapped, **device, feeds);
    ASSERT_TRUE(step.status.ok()) << step.status;
    EXPECT_EQ(step.peak, lms->peak_bytes_after);
    expect_same_bits(step, reference);
  }
  std::printf("LMS fits at %d of %d budgets, no LMS at %d\n", lms_fits, kBudgets, off_fits);
  // The sweep means something: LMS fits where the plain step does not, and
  // the top budget (the measured no-LMS peak) fits without LMS.
  EXPECT_GT(lms_fits, off_fits);
  EXPECT_GE(off_fits, 1);
}

// The smallest capacity, in 256-byte allocator units between `lo` (does
// not plan) and `hi` (plans), at which `plans` holds; bisection.
template <typename Plans>
uint64_t smallest_capacity(uint64_t lo, uint64_t hi, const Plans& plans) {
  lo /= 256;
  hi = (hi + 255) / 256;
  while (lo + 1 < hi) {
    const uint64_t mid = (lo + hi) / 2;
    (plans(mid * 256) ? hi : lo) = mid;
  }
  return hi * 256;
}

// kernel_choice: by default the rewrite never moves a convolution to another
// kernel; "least_workspace_to_fit" may, and then reaches the same or a
// smaller capacity. At the smallest capacity that plans with it, the step
// runs at the predicted peak and gives the bits of the graph without LMS on
// the kernels the report lists.
TEST(Fits, KernelChoiceIsExplicitAndBitIdenticalOnTheKernelsItLists) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto train = user::user_unet(kBatch, kSize, Adam{.lr = 1e-3});
  ASSERT_TRUE(train.ok()) << train.status();
  const Feeds feeds = user::user_unet_feeds(kBatch, kSize, kSeed);
  auto big = make_cpu_device({.capacity_bytes = 256 * kMiB, .host_pool_bytes = 256 * kMiB});
  ASSERT_TRUE(big.ok()) << big.status();
  LmsConfig off;
  off.enabled = false;
  Graph probe = *train;
  auto limits = rewrite(probe, off, **big);
  ASSERT_TRUE(limits.ok()) << limits.status();
  LmsConfig fast, lean;
  fast.time_model = lean.time_model = TimeModel::kRoofline;
  lean.kernel_choice = KernelChoice::kLeastToFit;
  auto plans = [&](const LmsConfig& cfg, uint64_t capacity, Graph* out) -> bool {
    auto d = make_cpu_device({.capacity_bytes = capacity, .host_pool_bytes = 256 * kMiB});
    if (!d.ok()) return false;
    Graph g = *train;
    auto r = rewrite(g, cfg, **d);
    if (!r.ok() || !r->fits) return false;
    if (cfg.kernel_choice == KernelChoice::kDefault) {
      EXPECT_TRUE(r->least_workspace_nodes.empty());
    }
    if (out != nullptr) *out = std::move(g);
    return true;
  };
  const uint64_t hi = limits->peak_bytes_after + 64 * 1024;
  ASSERT_TRUE(plans(fast, hi, nullptr));
  const uint64_t lo = 256;
  const uint64_t fast_min =
      smallest_capacity(lo, hi, [&](uint64_t c) { return plans(fast, c, nullptr); });
  const uint64_t lean_min =
      smallest_capacity(lo, hi, [&](uint64_t c) { return plans(lean, c, nullptr); });
  std::printf("smallest capacity that plans: %" PRIu64 " bytes with the default kernels, %" PRIu64
              " with kernel_choice = least_workspace_to_fit (no-LMS peak %" PRIu64 ")\n",
              fast_min, lean_min, limits->peak_bytes_after);
  EXPECT_LE(lean_min, fast_min);

  auto device = make_cpu_device({.capacity_bytes = lean_min, .host_pool_bytes = 256 * kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  Graph planned = *train;
  auto rep = rewrite(planned, lean, **device);
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_TRUE(rep->fits) << rep->summary();
  std::printf("%zu convolutions on least-workspace kernels\n%s", rep->least_workspace_nodes.size(),
              rep->summary().c_str());
  const StepsRun step = one_step(planned, **device, feeds);
  ASSERT_TRUE(step.status.ok()) << step.status;
  EXPECT_EQ(step.peak, rep->peak_bytes_after);
  Graph same_kernels = *train;
  ASSERT_TRUE(use_least_workspace_kernels(same_kernels, rep->least_workspace_nodes).ok());
  ASSERT_TRUE(rewrite(same_kernels, off, **big).ok());
  const StepsRun expected = one_step(same_kernels, **big, feeds);
  ASSERT_TRUE(expected.status.ok()) << expected.status;
  expect_same_bits(step, expected);
}

// Per Note [Capacity units], a capacity that is no multiple of the allocator's
// 256-byte alignment, given both to the device and to
// PlanningFacts::device_capacity_bytes, gives a plan whose `fits` agrees
// with Session::create and the first step, with LMS off and on.
TEST(Fits, UnalignedCapacityAgreesWithTheSessionAndTheStep) {
  auto train = user::user_unet(kBatch, kSize, Adam{.lr = 1e-3});
  ASSERT_TRUE(train.ok()) << train.status();
  const Feeds feeds = user::user_unet_feeds(kBatch, kSize, kSeed);
  LmsConfig off;
  off.enabled = false;
  auto big = make_cpu_device({.capacity_bytes = 256 * kMiB, .host_pool_bytes = 256 * kMiB});
  ASSERT_TRUE(big.ok()) << big.status();
  auto workspaces = kernel_workspace_bytes(*train, **big);
  ASSERT_TRUE(workspaces.ok()) << workspaces.status();
  Graph probe = *train;
  auto limits =
      rewrite(probe, off, {.device_capacity_bytes = 256 * kMiB, .workspace_bytes = *workspaces});
  ASSERT_TRUE(limits.ok() && limits->fits) << limits.status();
  const uint64_t peak = limits->peak_bytes_after;
  int agreed_fits = 0, agreed_refusals = 0;
  // Aligned capacities around the no-LMS peak and the 60% budget, each
  // plus 100 bytes: one more than a multiple of 256 would already round.
  for (uint64_t aligned : {peak / 256 * 256, peak / 256 * 256 - 256, peak * 6 / 10 / 256 * 256}) {
    const uint64_t capacity = aligned + 100;
    SCOPED_TRACE(testing::Message() << "capacity " << capacity);
    for (bool enabled : {false, true}) {
      auto device = make_cpu_device({.capacity_bytes = capacity, .host_pool_bytes = 256 * kMiB});
      ASSERT_TRUE(device.ok()) << device.status();
      ASSERT_EQ(device.value()->memory_stats().capacity_bytes, aligned);
      LmsConfig cfg = enabled ? LmsConfig{} : off;
      cfg.time_model = TimeModel::kRoofline;
      Graph g = *train;
      auto rep =
          rewrite(g, cfg, {.device_capacity_bytes = capacity, .workspace_bytes = *workspaces});
      const bool fits = rep.ok() && rep->fits;
      if (rep.ok()) {
        EXPECT_EQ(rep->budget_bytes, aligned) << "budget in allocator units";
      }
      const StepsRun step = one_step(g, **device, feeds);
      std::printf("capacity %" PRIu64 ", LMS %s: fits %d, step %s\n", capacity,
                  enabled ? "on" : "off", fits, step.status.ok() ? "ran" : "failed");
      if (!rep.ok()) continue;  // no plan: nothing to agree with
      EXPECT_EQ(fits, step.status.ok()) << step.status << "\n" << rep->summary();
      if (step.status.ok()) {
        EXPECT_EQ(step.peak, rep->peak_bytes_after);
      }
      (fits ? agreed_fits : agreed_refusals) += fits == step.status.ok();
    }
  }
  // Both outcomes were seen: some plans fit and ran, some did not fit and
  // were refused.
  EXPECT_GT(agreed_fits, 0);
  EXPECT_GT(agreed_refusals, 0);
}

// The pinned host pool bounds the plan: the Device overload plans for at
// most the device's host pool (LmsConfig::host_memory_limit doc), so a plan
// it returns holds no more pinned host memory than the pool and its step
// runs; one that cannot keep within it is ResourceExhausted, never a step
// that runs out of pinned memory midway (seen on an H100 with VDSR).
TEST(Fits, PinnedHostPoolBoundsThePlanOfTheDeviceOverload) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto train = user::user_unet(kBatch, kSize, Adam{.lr = 1e-3});
  ASSERT_TRUE(train.ok()) << train.status();
  const Feeds feeds = user::user_unet_feeds(kBatch, kSize, kSeed);
  LmsConfig off;
  off.enabled = false;
  auto big = make_cpu_device({.capacity_bytes = 256 * kMiB, .host_pool_bytes = 256 * kMiB});
  ASSERT_TRUE(big.ok()) << big.status();
  Graph probe = *train;
  auto limits = rewrite(probe, off, **big);
  ASSERT_TRUE(limits.ok()) << limits.status();
  const StepsRun reference = one_step(probe, **big, feeds);
  ASSERT_TRUE(reference.status.ok()) << reference.status;
  // A budget a third of the way from the working-set limit to the peak:
  // many tensors must leave the device.
  const uint64_t budget = limits->working_set_limit_bytes +
                          (limits->peak_bytes_after - limits->working_set_limit_bytes) / 3;
  LmsConfig cfg;
  cfg.time_model = TimeModel::kRoofline;
  auto roomy = make_cpu_device({.capacity_bytes = budget, .host_pool_bytes = 256 * kMiB});
  ASSERT_TRUE(roomy.ok()) << roomy.status();
  Graph unbounded = *train;
  auto free_plan = rewrite(unbounded, cfg, **roomy);
  ASSERT_TRUE(free_plan.ok()) << free_plan.status();
  ASSERT_TRUE(free_plan->fits) << free_plan->summary();
  const uint64_t host = free_plan->host_bytes;
  std::printf("budget %" PRIu64 " bytes: %zu swapped, %" PRIu64
              " pinned host bytes with a 256 MiB pool\n",
              budget, free_plan->swapped.size(), host);
  ASSERT_GT(host, 64 * 1024u) << "the budget must make the plan swap";

  int ran = 0;
  for (uint64_t pool : {host * 3 / 4, host / 2, host / 4}) {
    pool = pool / 4096 * 4096;
    SCOPED_TRACE(testing::Message() << "host pool " << pool);
    auto device = make_cpu_device({.capacity_bytes = budget, .host_pool_bytes = pool});
    ASSERT_TRUE(device.ok()) << device.status();
    ASSERT_LE(device.value()->host_stats().capacity_bytes, pool);
    Graph g = *train;
    auto rep = rewrite(g, cfg, **device);
    if (!rep.ok()) {
      EXPECT_EQ(rep.status().code(), absl::StatusCode::kResourceExhausted) << rep.status();
      std::printf("host pool %" PRIu64 ": no plan (%s)\n", pool,
                  std::string(rep.status().message()).c_str());
      continue;
    }
    std::printf("host pool %" PRIu64 ": fits %d, %zu swapped, %zu recomputed, %" PRIu64
                " pinned host bytes\n",
                pool, rep->fits, rep->swapped.size(), rep->recomputed.size(), rep->host_bytes);
    EXPECT_LE(rep->host_bytes, device.value()->host_stats().capacity_bytes);
    if (!rep->fits) continue;
    const StepsRun step = one_step(g, **device, feeds);
    ASSERT_TRUE(step.status.ok()) << step.status;
    EXPECT_EQ(step.peak, rep->peak_bytes_after);
    expect_same_bits(step, reference);
    ++ran;
  }
  EXPECT_GE(ran, 1) << "no smaller pool gave a plan that runs";
}

}  // namespace
}  // namespace lms
