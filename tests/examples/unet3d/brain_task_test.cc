// The MRI segmentation task of examples/unet3d: AAL regions to 13 classes
// (on lines copied from mricron-data's aal.nii.txt, CRLF as shipped, and on
// the whole file when scripts/fetch_data.sh has fetched it), the mirror map
// for flips, bad tables, and Dice on hand-made volumes with known overlap.
#include "brain_task.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace lms::unet3d {
namespace {

TEST(AalClasses, RegionCodesGiveLobesPerHemisphere) {
  const std::string text =
      "1 Precentral_L 2001\r\n2 Precentral_R 2002\r\n30 Insula_R 3002\r\n31 Cingulum_Ant_L 4001\r\n"
      "44 Calcarine_R 5002\r\n57 Postcentral_L 6001\r\n72 Caudate_R 7002\r\n79 Heschl_L 8101\r\n"
      "92 Cerebelum_Crus1_R 9002\r\n109 Vermis_1_2 9100\r\n\r\n";
  auto c = aal_classes(text, "aal.nii.txt");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 110u);
  const auto& name = brain_class_names();
  EXPECT_EQ(name[(*c)[1]], "frontal L");
  EXPECT_EQ(name[(*c)[2]], "frontal R");
  EXPECT_EQ(name[(*c)[30]], "limbic+insula R");
  EXPECT_EQ(name[(*c)[31]], "limbic+insula L");
  EXPECT_EQ(name[(*c)[44]], "occipital R");
  EXPECT_EQ(name[(*c)[57]], "parietal L");
  EXPECT_EQ(name[(*c)[72]], "subcortical");
  EXPECT_EQ(name[(*c)[79]], "temporal L");
  EXPECT_EQ(name[(*c)[92]], "cerebellum");
  EXPECT_EQ(name[(*c)[109]], "cerebellum");
  EXPECT_EQ((*c)[0], 0);
  EXPECT_EQ((*c)[3], 0);  // not listed: background
}

TEST(AalClasses, TheShippedTableCoversEveryClass) {
  const std::filesystem::path path = std::filesystem::path(LMS_SOURCE_DIR) / "data/mri/aal.nii.txt";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path
                 << " not fetched (scripts/fetch_data.sh); the copied lines are tested above";
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  auto c = aal_classes(text.str(), path.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->size(), 117u);  // indices 1..116
  std::set<int> seen(c->begin() + 1, c->end());
  EXPECT_EQ(seen.size(), static_cast<size_t>(kBrainClasses - 1));  // all but background
}

TEST(AalClasses, BadTablesNameTheFileLineAndProblem) {
  struct Case {
    std::string text, want;
  };
  const Case cases[] = {
      {"1 Precentral_L\n", "aal.txt:1: 2 fields"},
      {"1 Precentral_L 2001\nx Foo 2001\n", "aal.txt:2: index is not an integer"},
      {"1 Precentral_L 2001x\n", "aal.txt:1: code is not a positive integer"},
      {"1 Foo 1001\n", "code 1001 has lobe digit 1, not 2..9"},
      {"1 Foo 2005\n", "code 2005 has hemisphere digit 5, not 0..2"},
      {"1 Precentral_L 2001\n1 Precentral_R 2002\n", "aal.txt:2: index 1 listed twice"},
      {"\r\n\n", "aal.txt: no regions listed"},
  };
  for (const Case& c : cases) {
    auto r = aal_classes(c.text, "aal.txt");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find(c.want), std::string::npos)
        << "want '" << c.want << "' in: " << r.status();
  }
}

TEST(MirroredClass, SwapsLeftAndRightAndIsAnInvolution) {
  const auto& name = brain_class_names();
  for (int c = 0; c < kBrainClasses; ++c) {
    const int m = mirrored_class(c);
    EXPECT_EQ(mirrored_class(m), c);
    const std::string a(name[c]), b(name[m]);
    std::string want = a;
    if (a.ends_with(" L")) want = a.substr(0, a.size() - 2) + " R";
    if (a.ends_with(" R")) want = a.substr(0, a.size() - 2) + " L";
    EXPECT_EQ(b, want) << "class " << c;
  }
}

// A 4x4x4 volume: reference class 1 is the first 6 voxels, the prediction
// puts class 1 on voxels 2..11, so 4 overlap: Dice 2*4 / (6 + 10) = 0.5.
// Class 2: reference voxels 20..29, prediction 25..29: 2*5 / (10 + 5).
// Class 3 is in neither (Dice 1); class 4 only in the prediction (Dice 0).
TEST(DicePerClass, KnownOverlapsGiveTheExactValues) {
  std::vector<int32_t> ref(64, 0), pred(64, 0);
  for (int i = 0; i < 6; ++i) ref[i] = 1;
  for (int i = 2; i < 12; ++i) pred[i] = 1;
  for (int i = 20; i < 30; ++i) ref[i] = 2;
  for (int i = 25; i < 30; ++i) pred[i] = 2;
  pred[40] = 4;
  pred[41] = 7;  // outside [0, classes): counted nowhere
  ref[42] = -1;  // likewise
  auto d = dice_per_class(pred, ref, 5);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_DOUBLE_EQ((*d)[1], 0.5);
  EXPECT_DOUBLE_EQ((*d)[2], 10.0 / 15.0);
  EXPECT_DOUBLE_EQ((*d)[3], 1.0);
  EXPECT_DOUBLE_EQ((*d)[4], 0.0);
  // Background: ref 64-6-10-1 = 47 voxels, pred 64-10-5-2 = 47, both 0 on
  // voxels outside 0..11, 20..29, 40..42: 64 - 12 - 10 - 3 = 39.
  EXPECT_DOUBLE_EQ((*d)[0], 2.0 * 39 / (47 + 47));
  EXPECT_FALSE(dice_per_class(pred, std::vector<int32_t>(63, 0), 5).ok());
  EXPECT_FALSE(dice_per_class(pred, ref, 0).ok());
}

}  // namespace
}  // namespace lms::unet3d
