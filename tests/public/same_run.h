// Bit-identity checks shared by the tests written as a user's program.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "user_models.h"

namespace lms::user {

// `run` ran without error at `planned_peak` device bytes and gave the same
// bits as `reference`: every fetched value of every step (`names` in fetch
// order) and every persistent tensor after the last step.
inline void expect_same_run(const StepsRun& run, const StepsRun& reference,
                            const std::vector<std::string>& names, uint64_t planned_peak) {
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.peak, planned_peak);
  ASSERT_EQ(run.fetched.size(), reference.fetched.size());
  for (size_t k = 0; k < run.fetched.size(); ++k) {
    EXPECT_TRUE(same_bits(run.fetched[k], reference.fetched[k]))
        << "step " << k / names.size() << ", " << names[k % names.size()];
  }
  EXPECT_EQ(differing(run.state, reference.state), std::vector<std::string>{});
}

}  // namespace lms::user
