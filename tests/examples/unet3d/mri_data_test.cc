// The training data of examples/unet3d on synthetic volumes (normalisation,
// cube resampling, batches: shapes, one-hot, determinism per step, flips
// that mirror the image and swap left and right classes) and, when
// scripts/fetch_data.sh has fetched it, on the real ch2bet + AAL pair.
#include "mri_data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numbers>
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

// A 16^3 volume whose image is its z index and whose label is z % 3: a
// rotation about z keeps every voxel's z, so wherever a sample lands inside
// the grid its image is a whole z and its label that z % 3; outside, the
// background (image 0, label 0). No flips: they would swap classes 1 and 2
// (frontal L and R). A scaling stretches z evenly: the image
// rises by the same 1/zoom from slice to slice, within [1/1.5, 1/0.5].
TEST(MriData, RotationsAndScalingsKeepImageAndLabelsTogether) {
  BrainPair p;
  for (io::Volume* v : {&p.image, &p.labels}) {
    v->dims = {16, 16, 16};
    v->spacing_mm = {1, 1, 1};
    v->voxels.resize(4096);
  }
  for (int64_t z = 0; z < 16; ++z)
    for (int64_t i = 0; i < 256; ++i) {
      p.image.voxels[z * 256 + i] = static_cast<float>(z);
      p.labels.voxels[z * 256 + i] = static_cast<float>(z % 3);
    }
  std::vector<float> img, hot;
  const int64_t c = 8, v = c * c * c;
  ASSERT_TRUE(
      make_batch(
          p, {.crop = c, .batch = 8, .flips = false, .intensity_jitter = 0, .max_rotation_deg = 45},
          kSeed, 0, &img, &hot)
          .ok());
  int inside = 0;
  for (int64_t n = 0; n < 8; ++n)
    for (int64_t i = 0; i < v; ++i) {
      const float x = img[n * v + i];
      int cls = -1;
      for (int k = 0; k < kBrainClasses; ++k)
        if (hot[(n * kBrainClasses + k) * v + i] == 1.0f) cls = k;
      ASSERT_EQ(x, std::round(x)) << "sample " << n << " voxel " << i;
      ASSERT_EQ(cls, static_cast<int>(x) % 3) << "sample " << n << " voxel " << i;
      inside += x != 0.0f;
    }
  EXPECT_GT(inside, 8 * v / 2);
  ASSERT_TRUE(
      make_batch(p,
                 {.crop = c, .batch = 8, .flips = false, .intensity_jitter = 0, .max_scaling = 0.5},
                 kSeed, 1, &img, &hot)
          .ok());
  for (int64_t n = 0; n < 8; ++n) {
    // The centre column (x = y = 3) of each sample, slice by slice.
    std::vector<double> rises;
    for (int64_t z = 1; z < c; ++z) {
      const float lo = img[n * v + ((z - 1) * c + 3) * c + 3],
                  hi = img[n * v + (z * c + 3) * c + 3];
      if (lo > 0 && hi < 15) rises.push_back(hi - lo);
    }
    ASSERT_FALSE(rises.empty());
    for (double r : rises) {
      EXPECT_NEAR(r, rises[0], 1e-4) << "sample " << n;
      EXPECT_GE(r, 1 / 1.5 - 1e-6);
      EXPECT_LE(r, 1 / 0.5 + 1e-6);
    }
  }
  // An x ramp (image = x + 1, inside a 32^3 grid): rotated by a, the
  // crop's image rises by (cos a, sin a) per voxel in x and y, a unit
  // vector with |a| <= 45 degrees; some sample is really rotated.
  BrainPair ramp;
  for (io::Volume* vol : {&ramp.image, &ramp.labels}) {
    vol->dims = {32, 32, 32};
    vol->spacing_mm = {1, 1, 1};
    vol->voxels.assign(32 * 32 * 32, 0.0f);
  }
  for (int64_t i = 0; i < 32 * 32 * 32; ++i) ramp.image.voxels[i] = static_cast<float>(i % 32 + 1);
  ASSERT_TRUE(
      make_batch(
          ramp,
          {.crop = c, .batch = 8, .flips = false, .intensity_jitter = 0, .max_rotation_deg = 45},
          kSeed, 2, &img, &hot)
          .ok());
  double largest_sin = 0;
  for (int64_t n = 0; n < 8; ++n) {
    const float* s0 = img.data() + n * v;
    const double gx = s0[(4 * c + 3) * c + 4] - s0[(4 * c + 3) * c + 3];
    const double gy = s0[(4 * c + 4) * c + 3] - s0[(4 * c + 3) * c + 3];
    EXPECT_NEAR(gx * gx + gy * gy, 1.0, 1e-3) << "sample " << n;
    EXPECT_GE(gx, std::cos(std::numbers::pi / 4) - 1e-3) << "sample " << n;
    largest_sin = std::max(largest_sin, std::abs(gy));
  }
  EXPECT_GT(largest_sin, 0.05);
  EXPECT_FALSE(make_batch(p, {.crop = c, .max_rotation_deg = 181}, 1, 0, &img, &hot).ok());
  EXPECT_FALSE(make_batch(p, {.crop = c, .max_scaling = 0.6}, 1, 0, &img, &hot).ok());
}

// Gamma changes the contrast and nothing else: with the same (seed, step) a
// sample keeps its crop and labels, its intensities keep their order and
// stay in the grid's range, and the drawn gamma lies in [1/1.5, 1.5]: it is
// recovered from one voxel, t_out = t_in^gamma on the range [lo, hi].
TEST(MriData, GammaKeepsCropLabelsAndIntensityOrder) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  const BrainPair p = synthetic(12);
  const auto [lo_it, hi_it] = std::minmax_element(p.image.voxels.begin(), p.image.voxels.end());
  const double lo = *lo_it, hi = *hi_it;
  const int64_t c = 8, v = c * c * c;
  const BatchOptions plain{.crop = c, .batch = 1, .intensity_jitter = 0};
  BatchOptions contrast = plain;
  contrast.max_gamma = 0.5;
  int changed = 0;
  for (int64_t step = 0; step < 6; ++step) {
    std::vector<float> img, hot, img_g, hot_g;
    ASSERT_TRUE(make_batch(p, plain, kSeed, step, &img, &hot).ok());
    ASSERT_TRUE(make_batch(p, contrast, kSeed, step, &img_g, &hot_g).ok());
    ASSERT_EQ(hot, hot_g) << "step " << step;
    std::vector<int64_t> order(static_cast<size_t>(v));
    for (int64_t i = 0; i < v; ++i) order[static_cast<size_t>(i)] = i;
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return img[a] < img[b]; });
    for (size_t k = 1; k < order.size(); ++k) {
      ASSERT_LE(img_g[order[k - 1]], img_g[order[k]]) << "step " << step;
    }
    for (float x : img_g) {
      ASSERT_GE(x, lo - 1e-4);
      ASSERT_LE(x, hi + 1e-4);
    }
    // A voxel well inside the range gives the gamma.
    const int64_t mid = order[order.size() / 2];
    const double t_in = (img[mid] - lo) / (hi - lo), t_out = (img_g[mid] - lo) / (hi - lo);
    ASSERT_GT(t_in, 0.05);
    ASSERT_LT(t_in, 0.95);
    const double gamma = std::log(t_out) / std::log(t_in);
    EXPECT_GE(gamma, 1 / 1.5 - 1e-3) << "step " << step;
    EXPECT_LE(gamma, 1.5 + 1e-3) << "step " << step;
    changed += std::abs(gamma - 1) > 0.02;
  }
  EXPECT_GE(changed, 3);
  std::vector<float> img, hot;
  const absl::Status bad = make_batch(p, {.crop = c, .max_gamma = 2.5}, 1, 0, &img, &hot);
  EXPECT_TRUE(absl::IsInvalidArgument(bad));
  EXPECT_NE(bad.message().find("max_gamma"), std::string_view::npos) << bad;
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

TEST(MriData, GridSideIsAQuarterLargerRoundedToTheUnetMultiple) {
  EXPECT_EQ(grid_side(32, 3), 40);  // 40 is a multiple of 4
  EXPECT_EQ(grid_side(48, 4), 64);  // 60 -> 64 (multiple of 8)
  EXPECT_EQ(grid_side(16, 1), 20);
  EXPECT_EQ(grid_side(17, 1), 22);  // 21.25 rounds up
  EXPECT_EQ(grid_side(24, 2), 30);
  EXPECT_EQ(grid_side(40, 4), 56);  // 50 -> 56
  EXPECT_EQ(grid_side(1, 1), 2);
  for (int64_t levels = 1; levels <= 6; ++levels) {
    const int64_t multiple = int64_t{1} << (levels - 1);
    for (int64_t size = multiple; size <= 256; size += multiple) {
      const int64_t g = grid_side(size, levels);
      ASSERT_EQ(g % multiple, 0) << size << " " << levels;
      ASSERT_GE(4 * g, 5 * size) << size << " " << levels;
      ASSERT_LT(4 * (g - multiple), 5 * size) << size << " " << levels;  // the smallest such
    }
  }
  EXPECT_EQ(grid_side(0, 3), 0);
  EXPECT_EQ(grid_side(32, 0), 0);
  EXPECT_EQ(grid_side(32, 33), 0);
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

// ch2better (0.5 mm, its own field of view) comes back on the atlas grid,
// resampled in world space, and normalised over the labelled voxels.
TEST(MriData, RealCh2BetterIsResampledOntoTheAtlasGrid) {
  const std::string dir = std::string(LMS_SOURCE_DIR) + "/data/mri";
  if (!std::filesystem::exists(dir + "/ch2better.nii.gz")) {
    GTEST_SKIP() << dir
                 << " not fetched (scripts/fetch_data.sh); resample_to_grid is tested on synthetic "
                    "volumes in tests/io/nifti_test.cc";
  }
  auto p = load_brain(dir, "ch2better.nii.gz");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->image.dims, (std::array<int64_t, 3>{181, 217, 181}));
  EXPECT_EQ(p->image.spacing_mm, (std::array<double, 3>{1, 1, 1}));
  EXPECT_EQ(p->image.dims, p->labels.dims);
  double sum = 0, sq = 0;
  int64_t n = 0;
  for (size_t i = 0; i < p->image.voxels.size(); ++i) {
    if (p->labels.voxels[i] == 0) continue;
    sum += p->image.voxels[i];
    sq += static_cast<double>(p->image.voxels[i]) * p->image.voxels[i];
    ++n;
  }
  ASSERT_GT(n, 0);
  std::printf("%lld labelled voxels, mean %g, mean square %g\n", static_cast<long long>(n),
              sum / static_cast<double>(n), sq / static_cast<double>(n));
  EXPECT_NEAR(sum / static_cast<double>(n), 0.0, 1e-3);
  EXPECT_NEAR(sq / static_cast<double>(n), 1.0, 1e-3);
  // The same head in the same place: over the labelled voxels, the
  // resampled image follows ch2bet (both normalised there, so the mean
  // product is their correlation).
  auto bet = load_brain(dir, "ch2bet.nii.gz");
  ASSERT_TRUE(bet.ok()) << bet.status();
  double product = 0;
  for (size_t i = 0; i < p->image.voxels.size(); ++i) {
    if (p->labels.voxels[i] != 0) product += double{p->image.voxels[i]} * bet->image.voxels[i];
  }
  const double correlation = product / static_cast<double>(n);
  std::printf("correlation with ch2bet over labelled voxels: %.3f\n", correlation);
  EXPECT_GT(correlation, 0.5);
}

}  // namespace
}  // namespace lms::unet3d

namespace lms::unet3d {
namespace {

// A 10 x 20 x 20 volume on a 20^3 cube: the 5 voxels either side along x lie
// beyond it and are background, not copies of the edge.
TEST(MriData, CubePaddingIsBackground) {
  BrainPair p;
  for (io::Volume* v : {&p.image, &p.labels}) {
    v->dims = {10, 20, 20};
    v->spacing_mm = {1, 1, 1};
    v->voxels.assign(10 * 20 * 20, 1.0f);
  }
  for (int64_t z = 0; z < 20; ++z)
    for (int64_t y = 0; y < 20; ++y)
      for (int64_t x = 0; x < 10; ++x) p.image.voxels[p.image.index(x, y, z)] = 10.0f + x;
  auto cube = to_cube(p, 20);
  ASSERT_TRUE(cube.ok()) << cube.status();
  const float lowest = cube->image.at(5, 10, 10);  // the source's x = 0, value 10
  for (int64_t x = 0; x < 20; ++x) {
    const bool inside = x >= 5 && x < 15;
    EXPECT_EQ(cube->labels.at(x, 7, 3), inside ? 1.0f : 0.0f) << x;
    if (!inside) {
      EXPECT_EQ(cube->image.at(x, 7, 3), lowest) << x;
    }
  }
  EXPECT_LT(cube->image.at(5, 10, 10), cube->image.at(14, 10, 10));
}

}  // namespace
}  // namespace lms::unet3d
