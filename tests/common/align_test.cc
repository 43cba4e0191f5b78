#include "common/align.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace lms {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

TEST(AlignTest, AlignUpRoundsToTheNextMultiple) {
  EXPECT_EQ(align_up(0, 256), 0u);
  EXPECT_EQ(align_up(1, 256), 256u);
  EXPECT_EQ(align_up(256, 256), 256u);
  EXPECT_EQ(align_up(257, 256), 512u);
  EXPECT_EQ(align_up(17, 16), 32u);
  EXPECT_EQ(align_up(7, 3), 9u);  // any positive alignment, not only powers of two
}

TEST(AlignTest, AlignUpSaturatesInsteadOfOverflowing) {
  EXPECT_EQ(align_up(kMax, 256), kMax / 256 * 256);
  EXPECT_EQ(align_up(kMax - 1, 3), kMax);  // 2^64 - 1 is a multiple of 3
  EXPECT_EQ(align_up(kMax, 1), kMax);
}

TEST(AlignTest, AlignDownRoundsToThePreviousMultiple) {
  EXPECT_EQ(align_down(0, 256), 0u);
  EXPECT_EQ(align_down(255, 256), 0u);
  EXPECT_EQ(align_down(300, 256), 256u);
  EXPECT_EQ(align_down(512, 256), 512u);
}

TEST(AlignTest, RoundedSizeTakesAtLeastOneUnit) {
  EXPECT_EQ(rounded_size(0, 256), 256u);
  EXPECT_EQ(rounded_size(1, 256), 256u);
  EXPECT_EQ(rounded_size(256, 256), 256u);
  EXPECT_EQ(rounded_size(257, 256), 512u);
  EXPECT_EQ(rounded_size(5, 0), 5u);  // an alignment of 0 counts as 1
  EXPECT_EQ(rounded_size(0, 0), 1u);
}

TEST(AlignTest, RoundedSizeMatchesTheDocumentedFormulaOnEveryBoundary) {
  // docs/memory_model.md: max(alignment, ceil(b / alignment) * alignment).
  for (uint64_t a : {1u, 2u, 64u, 256u, 4096u}) {
    for (uint64_t b = 0; b <= 3 * a + 1; ++b) {
      const uint64_t expected = std::max(a, (b + a - 1) / a * a);
      ASSERT_EQ(rounded_size(b, a), expected) << "bytes " << b << ", alignment " << a;
    }
  }
}

}  // namespace
}  // namespace lms
