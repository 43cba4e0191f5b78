#include "lms/io/image_ops.h"

#include <cmath>
#include <cstdio>
#include <random>

#include "gtest/gtest.h"

namespace lms::io {
namespace {

constexpr uint32_t kSeed = 7301;

Plane constant_plane(int w, int h, float v) {
  return Plane{w, h, std::vector<float>(static_cast<size_t>(w) * h, v)};
}

Plane random_plane(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Plane p{w, h, std::vector<float>(static_cast<size_t>(w) * h)};
  for (float& v : p.data) v = u(rng);
  return p;
}

float at(const Plane& p, int x, int y) { return p.data[static_cast<size_t>(y) * p.width + x]; }

TEST(RgbToY, MatchesBt601OnKnownColours) {
  // Expected values are MATLAB rgb2ycbcr's on uint8 colours, divided by 255.
  struct Case {
    float r, g, b;
    double y255;
  };
  const Case cases[] = {{0, 0, 0, 16.0},    {1, 1, 1, 235.0},  {1, 0, 0, 81.481},
                        {0, 1, 0, 144.553}, {0, 0, 1, 40.966}, {0.5f, 0.5f, 0.5f, 125.5}};
  for (const Case& c : cases) {
    absl::StatusOr<Plane> y = rgb_to_y(Image{1, 1, 3, {c.r, c.g, c.b}});
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_NEAR(y->data[0] * 255.0, c.y255, 1e-4) << c.r << " " << c.g << " " << c.b;
  }
}

TEST(RgbToY, GrayImageIsTreatedAsEqualChannels) {
  absl::StatusOr<Plane> y = rgb_to_y(Image{2, 1, 1, {0.0f, 0.25f}});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_NEAR(y->data[0], 16.0 / 255.0, 1e-6);
  EXPECT_NEAR(y->data[1], (16.0 + 219.0 * 0.25) / 255.0, 1e-6);
  EXPECT_EQ(rgb_to_y(Image{2, 2, 3, {0.0f}}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(YCbCr, WhiteAndBlackHaveNeutralChromaAndRoundTripIsExact) {
  absl::StatusOr<Image> ycc = rgb_to_ycbcr(Image{2, 1, 3, {1, 1, 1, 0, 0, 0}});
  ASSERT_TRUE(ycc.ok()) << ycc.status();
  for (int i : {1, 2, 4, 5}) EXPECT_NEAR(ycc->data[i] * 255.0, 128.0, 1e-4);
  std::printf("seed %u\n", kSeed);
  std::mt19937 rng(kSeed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Image rgb{31, 17, 3, std::vector<float>(31 * 17 * 3)};
  for (float& v : rgb.data) v = u(rng);
  absl::StatusOr<Image> there = rgb_to_ycbcr(rgb);
  ASSERT_TRUE(there.ok());
  absl::StatusOr<Image> back = ycbcr_to_rgb(*there);
  ASSERT_TRUE(back.ok());
  for (size_t i = 0; i < rgb.data.size(); ++i) ASSERT_NEAR(back->data[i], rgb.data[i], 2e-6) << i;
}

TEST(Planes, ExtractAndMergeAreInverse) {
  Image img{2, 1, 3, {1, 2, 3, 4, 5, 6}};
  std::vector<Plane> planes;
  for (int c = 0; c < 3; ++c) {
    absl::StatusOr<Plane> p = extract_channel(img, c);
    ASSERT_TRUE(p.ok());
    planes.push_back(*p);
  }
  EXPECT_EQ(planes[1].data, (std::vector<float>{2, 5}));
  absl::StatusOr<Image> merged = merge_planes(planes);
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(merged->data, img.data);
  EXPECT_FALSE(extract_channel(img, 3).ok());
  planes[2].width = 1;
  EXPECT_EQ(merge_planes(planes).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ResizeBicubic, ConstantImageStaysConstant) {
  std::printf("seed %u\n", kSeed);
  std::mt19937 rng(kSeed);
  for (int trial = 0; trial < 20; ++trial) {
    int w = 1 + rng() % 40, h = 1 + rng() % 40, ow = 1 + rng() % 60, oh = 1 + rng() % 60;
    absl::StatusOr<Plane> out = resize_bicubic(constant_plane(w, h, 0.37f), ow, oh);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->width, ow);
    ASSERT_EQ(out->height, oh);
    for (float v : out->data)
      ASSERT_NEAR(v, 0.37f, 1e-6) << w << "x" << h << " -> " << ow << "x" << oh;
  }
}

// Hand-computed from imresize's definition (see image_ops.h): upscaling
// [1 2 4 8] by 2, output 1 sits at u = 0.75 with taps on inputs (-1, 0, 1, 2)
// mirrored to (2, 1, 1, 2): weights -0.0234375, 0.2265625, 0.8671875,
// -0.0703125, so y1 = 1.09375 * 1 - 0.09375 * 2 = 0.90625; output 2 at
// u = 1.25: y2 = 0.796875 * 1 + 0.2265625 * 2 - 0.0234375 * 4 = 1.15625.
// Downscaling by 2 (kernel 0.5 * cubic(x / 2), 8 wide) at u = 1.5:
// y1 = 0.546875 * 1 + 0.3984375 * 2 + 0.1015625 * 4 - 0.046875 * 8 = 1.375.
TEST(ResizeBicubic, MatchesHandComputedImresizeValues) {
  Plane row{4, 1, {1, 2, 4, 8}};
  absl::StatusOr<Plane> up = resize_bicubic(row, 8, 1);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_NEAR(up->data[0], 0.90625, 1e-6);
  EXPECT_NEAR(up->data[1], 1.15625, 1e-6);
  absl::StatusOr<Plane> down = resize_bicubic(row, 2, 1);
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_NEAR(down->data[0], 1.375, 1e-6);
  // The same along the other axis: a 1x4 column gives the transposed result.
  absl::StatusOr<Plane> col = resize_bicubic(Plane{1, 4, {1, 2, 4, 8}}, 1, 8);
  ASSERT_TRUE(col.ok());
  EXPECT_NEAR(col->data[0], 0.90625, 1e-6);
  EXPECT_NEAR(col->data[1], 1.15625, 1e-6);
}

TEST(ResizeBicubic, SameSizeIsIdentity) {
  Plane p = random_plane(13, 9, kSeed);
  absl::StatusOr<Plane> out = resize_bicubic(p, 13, 9);
  ASSERT_TRUE(out.ok());
  for (size_t i = 0; i < p.data.size(); ++i) EXPECT_NEAR(out->data[i], p.data[i], 1e-6);
}

// A linear ramp is reproduced by the symmetric cubic kernel away from the
// borders, so shrinking by 2 and growing back is near exact inside.
TEST(ResizeBicubic, DownThenUpOfSmoothRampIsClose) {
  const int w = 64, h = 48;
  Plane ramp{w, h, std::vector<float>(w * h)};
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x)
      ramp.data[y * w + x] = 0.1f + 0.8f * (x + 0.5f * y) / (w + 0.5f * h);
  }
  absl::StatusOr<Plane> small = resize_bicubic(ramp, w / 2, h / 2);
  ASSERT_TRUE(small.ok());
  absl::StatusOr<Plane> back = resize_bicubic(*small, w, h);
  ASSERT_TRUE(back.ok());
  double worst_inside = 0.0;
  for (int y = 8; y < h - 8; ++y) {
    for (int x = 8; x < w - 8; ++x) {
      worst_inside = std::max(worst_inside, std::fabs(double{at(*back, x, y)} - at(ramp, x, y)));
    }
  }
  EXPECT_LT(worst_inside, 1e-5);
  absl::StatusOr<double> db = psnr(*back, ramp, 0);
  ASSERT_TRUE(db.ok());
  EXPECT_GT(*db, 40.0);
}

// On a real photo (a crop of skimage's astronaut), x2 bicubic degradation and
// restoration lands in the usual 25-40 dB range and beats pixel replication.
TEST(ResizeBicubic, BeatsNearestNeighbourOnARealPhoto) {
  absl::StatusOr<Image> img =
      read_image(LMS_SOURCE_DIR "/tests/data/astronaut_crop128.png");
  ASSERT_TRUE(img.ok()) << img.status();
  absl::StatusOr<Plane> hr = rgb_to_y(*img);
  ASSERT_TRUE(hr.ok());
  absl::StatusOr<Plane> lr = resize_bicubic(*hr, 64, 64);
  ASSERT_TRUE(lr.ok());
  absl::StatusOr<Plane> bicubic = resize_bicubic(*lr, 128, 128);
  ASSERT_TRUE(bicubic.ok());
  Plane nearest{128, 128, std::vector<float>(128 * 128)};
  for (int y = 0; y < 128; ++y) {
    for (int x = 0; x < 128; ++x) nearest.data[y * 128 + x] = at(*lr, x / 2, y / 2);
  }
  double db_bicubic = *psnr(*bicubic, *hr, 2), db_nearest = *psnr(nearest, *hr, 2);
  std::printf("x2 PSNR on Y: bicubic %.2f dB, nearest %.2f dB\n", db_bicubic, db_nearest);
  EXPECT_GT(db_bicubic, 25.0);
  EXPECT_LT(db_bicubic, 40.0);
  EXPECT_GT(db_bicubic, db_nearest + 1.0);
}

TEST(ResizeBicubic, RejectsBadSizes) {
  EXPECT_EQ(resize_bicubic(constant_plane(4, 4, 0), 0, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(resize_bicubic(Plane{4, 4, std::vector<float>(3)}, 2, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Geometry, CropModcropFlipsAndRotations) {
  Plane p{3, 2, {1, 2, 3, 4, 5, 6}};  // rows: [1 2 3], [4 5 6]
  EXPECT_EQ(crop(p, 1, 0, 2, 2)->data, (std::vector<float>{2, 3, 5, 6}));
  EXPECT_FALSE(crop(p, 2, 0, 2, 1).ok());
  EXPECT_FALSE(crop(p, -1, 0, 1, 1).ok());
  absl::StatusOr<Plane> m = modcrop(p, 2);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->width, 2);
  EXPECT_EQ(m->height, 2);
  EXPECT_EQ(flip_horizontal(p)->data, (std::vector<float>{3, 2, 1, 6, 5, 4}));
  EXPECT_EQ(flip_vertical(p)->data, (std::vector<float>{4, 5, 6, 1, 2, 3}));
  absl::StatusOr<Plane> r = rotate90(p, 1);  // counter-clockwise: [3 6], [2 5], [1 4]
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->width, 2);
  EXPECT_EQ(r->height, 3);
  EXPECT_EQ(r->data, (std::vector<float>{3, 6, 2, 5, 1, 4}));
  Plane q = random_plane(7, 5, kSeed);
  EXPECT_EQ(rotate90(q, 4)->data, q.data);
  EXPECT_EQ(rotate90(q, -1)->data, rotate90(q, 3)->data);
  EXPECT_EQ(rotate90(*rotate90(q, 2), 0)->data, flip_vertical(*flip_horizontal(q))->data);
}

TEST(Quantize, RoundsToNearestOf256Levels) {
  absl::StatusOr<Plane> q = quantize_8bit(Plane{4, 1, {0.5f, -1.0f, 2.0f, 10.4f / 255.0f}});
  ASSERT_TRUE(q.ok());
  EXPECT_FLOAT_EQ(q->data[0], 128.0f / 255.0f);
  EXPECT_FLOAT_EQ(q->data[1], 0.0f);
  EXPECT_FLOAT_EQ(q->data[2], 1.0f);
  EXPECT_FLOAT_EQ(q->data[3], 10.0f / 255.0f);
}

TEST(Psnr, KnownMseGivesKnownDecibels) {
  Plane a = constant_plane(10, 8, 0.5f);
  Plane b = constant_plane(10, 8, 0.6f);  // MSE 0.01 -> 20 dB
  EXPECT_NEAR(*psnr(a, b, 0), 20.0, 1e-4);
  // Error only in a 2-pixel frame: shaved off by border 2, counted by border 1.
  Plane c = a;
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 10; ++x) {
      if (x < 2 || y < 2 || x >= 8 || y >= 6) c.data[y * 10 + x] = 0.6f;
    }
  }
  EXPECT_TRUE(std::isinf(*psnr(a, c, 2)));
  // Border 1 keeps an 8x6 window (48 pixels) around an untouched 6x4 core, so
  // 24 pixels are off by 0.1: MSE = 0.005, 23.01 dB.
  EXPECT_NEAR(*psnr(a, c, 1), 10.0 * std::log10(48.0 / (24 * 0.01)), 1e-3);
  EXPECT_TRUE(std::isinf(*psnr(a, a, 0)));
}

TEST(Psnr, RejectsMismatchedSizesAndOversizedBorders) {
  Plane a = constant_plane(10, 8, 0.5f);
  EXPECT_EQ(psnr(a, constant_plane(8, 10, 0.5f), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(psnr(a, a, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(psnr(a, a, -1).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lms::io
