// The LMS check every op test of tests/public runs on a small model that
// uses its op: the training graph planned with LMS through the Device
// overload of lms::rewrite, at the first budget between the working-set
// limit and the no-LMS peak at which the plan swaps or recomputes a tensor
// and fits, trains `steps` steps bit-identically to the step without LMS
// (losses and persistent state) with the measured peak equal to the
// predicted one. Int64 inputs (token ids, class labels) come in
// `int64_feeds`.
//
//   expect_lms_steps_bit_identical(*train, feeds, 3);
#pragma once

#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "lms/config.h"
#include "lms/rewrite.h"
#include "user_models.h"

namespace lms::user {

inline void expect_lms_steps_bit_identical(const Graph& train, const Feeds& feeds, int steps,
                                           const Int64Feeds& int64_feeds = {}) {
  auto big = make_cpu_device({.capacity_bytes = 256 * kMiB, .host_pool_bytes = 64 * kMiB});
  ASSERT_TRUE(big.ok()) << big.status();
  LmsConfig off;
  off.enabled = false;
  Graph plain = train;
  auto limits = rewrite(plain, off, **big);
  ASSERT_TRUE(limits.ok()) << limits.status();
  const StepsRun reference = run_steps(plain, **big, feeds, {"loss"}, steps, int64_feeds);
  ASSERT_TRUE(reference.status.ok()) << reference.status;
  EXPECT_EQ(reference.peak, limits->peak_bytes_after);
  ASSERT_EQ(reference.fetched.size(), static_cast<size_t>(steps));
  // Training moves the loss: the gradients reach the parameters.
  EXPECT_NE(reference.fetched.front()[0], reference.fetched.back()[0]);

  const uint64_t low = limits->working_set_limit_bytes, high = limits->peak_bytes_after;
  std::printf("working-set limit %" PRIu64 " bytes, no-LMS peak %" PRIu64 " bytes\n", low, high);
  ASSERT_LT(low, high);
  bool checked = false;
  for (int i = 0; i < 16 && !checked; ++i) {
    const uint64_t budget = low + (high - low) * i / 16;
    auto device = make_cpu_device({.capacity_bytes = budget, .host_pool_bytes = 64 * kMiB});
    ASSERT_TRUE(device.ok()) << device.status();
    Graph g = train;
    auto lms = rewrite(g, LmsConfig{}, **device);
    if (!lms.ok() || !lms->fits || (lms->swapped.empty() && lms->recomputed.empty())) continue;
    SCOPED_TRACE(::testing::Message() << "budget " << budget);
    std::printf("budget %" PRIu64 ": %zu swapped, %zu recomputed, predicted peak %" PRIu64 "\n",
                budget, lms->swapped.size(), lms->recomputed.size(), lms->peak_bytes_after);
    EXPECT_LE(lms->peak_bytes_after, budget);
    const StepsRun step = run_steps(g, **device, feeds, {"loss"}, steps, int64_feeds);
    ASSERT_TRUE(step.status.ok()) << step.status;
    EXPECT_EQ(step.peak, lms->peak_bytes_after);
    ASSERT_EQ(step.fetched.size(), reference.fetched.size());
    for (size_t s = 0; s < step.fetched.size(); ++s) {
      EXPECT_TRUE(same_bits(step.fetched[s], reference.fetched[s])) << "step " << s;
    }
    EXPECT_EQ(differing(step.state, reference.state), std::vector<std::string>{});
    checked = true;
  }
  EXPECT_TRUE(checked) << "no budget in [" << low << ", " << high
                       << ") planned to fit with a tensor swapped or recomputed";
}

}  // namespace lms::user
