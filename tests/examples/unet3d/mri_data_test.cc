// The training data of examples/unet3d on synthetic volumes (normalisation,
// cube resampling, batches: shapes, one-hot, determinism per step, flips
// that mirror the image and swap left and right classes) and, when
// scripts/fetch_data.sh has fetched it, on the real ch2bet + AAL pair.
#include "mri_data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>

#include "brain_task.h"

namespace lms::unet3d {
namespace {

constexpr uint64_t kSeed = 11235;

// A dims^3 pair: random intensities, labels 1 (frontal L) on x < dims/2 and
// 2 (frontal R) above, 0 on the z = 0 slab.
BrainPair synthetic(int64_t side) {
  BrainPair p;
  std::mt19937_64 rng(kSeed);
  std::uniform_real_distribution<float> u(10, 20);
  for (io::Volume* v : {&p.image, &p.labels}) {
    v->dims = {side, side, side};
    v->spacing_mm = {1, 1, 1};
    v->voxels.resize(static_cast<size_t>(side * side * side));
  }
  for (int64_t z = 0; z < side; ++z)
    for (int64_t y = 0; y < side; ++y)
      for (int64_t x = 0; x < side; ++x) {
        const size_t i = p.image.index(x, y, z);
        p.image.voxels[i] = u(rng) + static_cast<float>(x);  // asymmetric in x
        p.labels.voxels[i] = z == 0 ? 0.0f : (x < side / 2 ? 1.0f : 2.0f);
      }
  return p;
}

TEST(MriData, NormaliseGivesZeroMeanUnitVarianceOnLabelledVoxels) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  BrainPair p = synthetic(12);
  normalise(p.image, p.labels);
  double sum = 0, sq = 0;
  int n = 0;
  for (size_t i = 0; i < p.image.voxels.size(); ++i) {
    if (p.labels.voxels[i] == 0) continue;
    sum += p.image.voxels[i];
    sq += p.image.voxels[i] * p.image.voxels[i];
    ++n;
  }
  EXPECT_NEAR(sum / n, 0.0, 1e-5);
  EXPECT_NEAR(sq / n, 1.0, 1e-4);
}

TEST(MriData, BatchesAreOneHotDeterministicPerStepAndFlipsMirror) {
  BrainPair p = synthetic(10);
  normalise(p.image, p.labels);
  const BatchOptions o{.crop = 10, .batch = 16, .flips = true, .intensity_jitter = 0};
  std::vector<float> img, hot, img2, hot2;
  ASSERT_TRUE(make_batch(p, o, kSeed, 3, &img, &hot).ok());
  const int64_t v = 1000;
  ASSERT_EQ(img.size(), static_cast<size_t>(16 * v));
  ASSERT_EQ(hot.size(), static_cast<size_t>(16 * kBrainClasses * v));
  ASSERT_TRUE(make_batch(p, o, kSeed, 3, &img2, &hot2).ok());
  EXPECT_EQ(img, img2);
  EXPECT_EQ(hot, hot2);
  ASSERT_TRUE(make_batch(p, o, kSeed, 4, &img2, &hot2).ok());
  EXPECT_NE(img, img2);
  int flipped = 0, plain = 0;
  for (int n = 0; n < 16; ++n) {
    // The crop is the whole grid: a sample is the volume, mirrored in x or not.
    const float* s = img.data() + n * v;
    const bool is_flipped = s[0] == p.image.at(9, 0, 0);
    (is_flipped ? flipped : plain)++;
    for (int64_t z = 0; z < 10; ++z)
      for (int64_t y = 0; y < 10; ++y)
        for (int64_t x = 0; x < 10; ++x) {
          const int64_t sx = is_flipped ? 9 - x : x;
          const int64_t dst = (z * 10 + y) * 10 + x;
          ASSERT_EQ(s[dst], p.image.at(sx, y, z)) << "sample " << n;
          int ones = 0, cls = -1;
          for (int c = 0; c < kBrainClasses; ++c) {
            const float h = hot[(n * kBrainClasses + c) * v + dst];
            ASSERT_TRUE(h == 0.0f || h == 1.0f);
            if (h == 1.0f) ++ones, cls = c;
          }
          ASSERT_EQ(ones, 1);
          const int label = static_cast<int>(p.labels.at(sx, y, z));
          ASSERT_EQ(cls, is_flipped ? mirrored_class(label) : label) << "sample " << n;
        }
  }
  std::printf("%d of 16 samples flipped\n", flipped);
  EXPECT_GT(flipped, 0);
  EXPECT_GT(plain, 0);
}

TEST(MriData, CubeResamplingAndBadRequests) {
  BrainPair p = synthetic(12);
  auto cube = to_cube(p, 6);
  ASSERT_TRUE(cube.ok()) << cube.status();
  EXPECT_EQ(cube->image.dims, (std::array<int64_t, 3>{6, 6, 6}));
  EXPECT_DOUBLE_EQ(cube->image.spacing_mm[0], 2.0);
  for (float l : cube->labels.voxels) EXPECT_TRUE(l == 0 || l == 1 || l == 2);
  EXPECT_FALSE(to_cube(p, 0).ok());
  std::vector<float> img, hot;
  EXPECT_FALSE(make_batch(p, {.crop = 13}, 1, 0, &img, &hot).ok());
  EXPECT_FALSE(make_batch(p, {.crop = 4, .batch = 0}, 1, 0, &img, &hot).ok());
  p.labels.voxels[5] = 99;
  const absl::Status bad = make_batch(p, {.crop = 12, .batch = 1}, 1, 0, &img, &hot);
  EXPECT_NE(std::string(bad.message()).find("label 99"), std::string::npos) << bad;
}

TEST(MriData, RealCh2BetWithTheAalClasses) {
  const std::string dir = std::string(LMS_SOURCE_DIR) + "/data/mri";
  if (!std::filesystem::exists(dir + "/ch2bet.nii.gz")) {
    GTEST_SKIP() << dir
                 << " not fetched (scripts/fetch_data.sh); synthetic volumes are tested above";
  }
  auto p = load_brain(dir, "ch2bet.nii.gz");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->image.dims, (std::array<int64_t, 3>{181, 217, 181}));
  std::set<int> classes;
  for (float l : p->labels.voxels) classes.insert(static_cast<int>(l));
  EXPECT_EQ(classes.size(), static_cast<size_t>(kBrainClasses));
  auto cube = to_cube(*p, 48);
  ASSERT_TRUE(cube.ok()) << cube.status();
  std::vector<float> img, hot;
  ASSERT_TRUE(make_batch(*cube, {.crop = 32, .batch = 2}, 1, 0, &img, &hot).ok());
  EXPECT_EQ(img.size(), 2u * 32 * 32 * 32);
}

}  // namespace
}  // namespace lms::unet3d
