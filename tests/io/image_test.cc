#include "lms/io/image.h"

#include <png.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
// jpeglib.h needs FILE and size_t first.
#include <jpeglib.h>

#include "gtest/gtest.h"
#include "temp_dir_test.h"

namespace lms::io {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kSeed = 20240611;

class ImageTest : public TempDirTest {
 protected:
  ImageTest() : TempDirTest(kSeed) {}
};

// 8-bit levels stored as k / 255, so a PNG round trip must be exact.
Image random_image(int w, int h, int c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> level(0, 255);
  Image img{w, h, c, std::vector<float>(static_cast<size_t>(w) * h * c)};
  for (float& v : img.data) v = level(rng) / 255.0f;
  return img;
}

// A smooth colour image (gradients), which JPEG reproduces closely.
Image smooth_image(int w, int h, int c) {
  Image img{w, h, c, std::vector<float>(static_cast<size_t>(w) * h * c)};
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int k = 0; k < c; ++k) {
        double v = 0.5 + 0.4 * std::sin(0.05 * x + 0.07 * y + k);
        img.data[(static_cast<size_t>(y) * w + x) * c + k] = static_cast<float>(v);
      }
    }
  }
  return img;
}

// Writes raw PNG rows with libpng: any colour type and depth, optional palette.
void write_raw_png(const std::string& path, int w, int h, int color, int depth,
                   const std::vector<uint8_t>& raw, const std::vector<png_color>& palette = {}) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_init_io(png, f);
  png_set_IHDR(png, info, w, h, depth, color, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!palette.empty()) png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
  png_write_info(png, info);
  size_t row_bytes = raw.size() / h;
  for (int y = 0; y < h; ++y) png_write_row(png, raw.data() + y * row_bytes);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  std::fclose(f);
}

void write_jpeg(const std::string& path, const Image& img, int quality) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = img.width;
  cinfo.image_height = img.height;
  cinfo.input_components = img.channels;
  cinfo.in_color_space = img.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(img.width) * img.channels);
  while (cinfo.next_scanline < cinfo.image_height) {
    for (size_t i = 0; i < row.size(); ++i) {
      row[i] = static_cast<uint8_t>(
          std::lround(img.data[cinfo.next_scanline * row.size() + i] * 255.0f));
    }
    JSAMPROW p = row.data();
    jpeg_write_scanlines(&cinfo, &p, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(f);
}

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

double mean_abs_diff(const Image& a, const Image& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.data.size(); ++i) sum += std::fabs(a.data[i] - b.data[i]);
  return sum / a.data.size();
}

void expect_error_names_file(const absl::Status& s, const std::string& file) {
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(file), std::string::npos) << s;
}

TEST_F(ImageTest, PngRoundTripIsExactForGrayAndRgb) {
  for (int c : {1, 3}) {
    Image img = random_image(37, 23, c, kSeed + c);
    std::string p = path("rt" + std::to_string(c) + ".png");
    ASSERT_TRUE(write_png(img, p).ok());
    absl::StatusOr<Image> back = read_image(p);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->width, 37);
    EXPECT_EQ(back->height, 23);
    EXPECT_EQ(back->channels, c);
    EXPECT_EQ(back->data, img.data);
  }
}

TEST_F(ImageTest, WritePngClampsAndRoundsOutOfRangeValues) {
  Image img{4, 1, 1, {-0.5f, 2.0f, NAN, 0.5f}};
  ASSERT_TRUE(write_png(img, path("clamp.png")).ok());
  absl::StatusOr<Image> back = read_image(path("clamp.png"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data, (std::vector<float>{0.0f, 1.0f, 0.0f, 128 / 255.0f}));
}

TEST_F(ImageTest, Decodes16BitGrayWithFullPrecision) {
  std::vector<uint16_t> values = {0, 1, 257, 32768, 65534, 65535};
  std::vector<uint8_t> raw;
  for (uint16_t v : values) {
    raw.push_back(static_cast<uint8_t>(v >> 8));
    raw.push_back(static_cast<uint8_t>(v & 0xFF));
  }
  write_raw_png(path("g16.png"), 3, 2, PNG_COLOR_TYPE_GRAY, 16, raw);
  absl::StatusOr<Image> img = read_image(path("g16.png"));
  ASSERT_TRUE(img.ok()) << img.status();
  ASSERT_EQ(img->channels, 1);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_FLOAT_EQ(img->data[i], values[i] / 65535.0f);
}

TEST_F(ImageTest, RgbaAndGrayAlphaDropAlpha) {
  write_raw_png(path("rgba.png"), 2, 1, PNG_COLOR_TYPE_RGB_ALPHA, 8,
                {255, 0, 51, 0, 10, 20, 30, 255});
  write_raw_png(path("ga.png"), 2, 1, PNG_COLOR_TYPE_GRAY_ALPHA, 8, {102, 7, 204, 9});
  absl::StatusOr<Image> rgba = read_image(path("rgba.png"));
  absl::StatusOr<Image> ga = read_image(path("ga.png"));
  ASSERT_TRUE(rgba.ok() && ga.ok()) << rgba.status() << ga.status();
  EXPECT_EQ(rgba->channels, 3);
  EXPECT_EQ(rgba->data,
            (std::vector<float>{1.0f, 0.0f, 51 / 255.0f, 10 / 255.0f, 20 / 255.0f, 30 / 255.0f}));
  EXPECT_EQ(ga->channels, 1);
  EXPECT_EQ(ga->data, (std::vector<float>{102 / 255.0f, 204 / 255.0f}));
}

TEST_F(ImageTest, PaletteAndLowBitGrayExpand) {
  std::vector<png_color> palette = {{255, 0, 0}, {0, 128, 255}};
  // 4-bit palette indices: pixels 1, 0, 1 packed two per byte.
  write_raw_png(path("pal.png"), 3, 1, PNG_COLOR_TYPE_PALETTE, 4, {0x10, 0x10}, palette);
  // 1-bit gray: 1 0 1 1 0 -> bits 10110000.
  write_raw_png(path("g1.png"), 5, 1, PNG_COLOR_TYPE_GRAY, 1, {0xB0});
  absl::StatusOr<Image> pal = read_image(path("pal.png"));
  absl::StatusOr<Image> g1 = read_image(path("g1.png"));
  ASSERT_TRUE(pal.ok() && g1.ok()) << pal.status() << g1.status();
  EXPECT_EQ(pal->channels, 3);
  EXPECT_EQ(pal->data, (std::vector<float>{0, 128 / 255.0f, 1, 1, 0, 0, 0, 128 / 255.0f, 1}));
  EXPECT_EQ(g1->data, (std::vector<float>{1, 0, 1, 1, 0}));
}

TEST_F(ImageTest, JpegDecodesCloseToSource) {
  for (int c : {1, 3}) {
    Image src = smooth_image(64, 48, c);
    std::string p = path(c == 1 ? "gray.jpg" : "rgb.jpg");
    write_jpeg(p, src, 95);
    absl::StatusOr<Image> img = read_image(p);
    ASSERT_TRUE(img.ok()) << img.status();
    EXPECT_EQ(img->width, 64);
    EXPECT_EQ(img->height, 48);
    EXPECT_EQ(img->channels, c);
    // Quality 95 on a smooth image: under 2 levels of 255 on average.
    EXPECT_LT(mean_abs_diff(*img, src), 2.0 / 255.0);
  }
}

TEST_F(ImageTest, DecodesTheShippedRealPhotoFixture) {
  std::string p = std::string(LMS_SOURCE_DIR) + "/tests/data/astronaut_crop128.png";
  absl::StatusOr<Image> img = read_image(p);
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->width, 128);
  EXPECT_EQ(img->height, 128);
  EXPECT_EQ(img->channels, 3);
  // A photo, not a flat fill: values span most of the range.
  auto [lo, hi] = std::minmax_element(img->data.begin(), img->data.end());
  EXPECT_LT(*lo, 0.2f);
  EXPECT_GT(*hi, 0.8f);
}

TEST_F(ImageTest, EmptyMissingDirectoryAndNonImageFilesFailNamingTheFile) {
  spit(path("empty.png"), {});
  spit(path("text.jpg"), {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '\n'});
  absl::Status empty = read_image(path("empty.png")).status();
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  expect_error_names_file(empty, path("empty.png"));
  absl::Status text = read_image(path("text.jpg")).status();
  EXPECT_EQ(text.code(), absl::StatusCode::kInvalidArgument);
  expect_error_names_file(text, path("text.jpg"));
  absl::Status missing = read_image(path("nope.png")).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  expect_error_names_file(missing, path("nope.png"));
  absl::Status is_dir = read_image(dir_.string()).status();
  EXPECT_EQ(is_dir.code(), absl::StatusCode::kInvalidArgument);
  expect_error_names_file(is_dir, dir_.string());
}

// Every truncation of a PNG and a JPEG must fail with DataLoss (never crash,
// never return a gray-padded image).
TEST_F(ImageTest, EveryTruncationIsDataLoss) {
  ASSERT_TRUE(write_png(random_image(19, 11, 3, kSeed), path("full.png")).ok());
  write_jpeg(path("full.jpg"), smooth_image(24, 16, 3), 90);
  for (const char* name : {"full.png", "full.jpg"}) {
    std::vector<uint8_t> bytes = slurp(path(name));
    ASSERT_GT(bytes.size(), 100u);
    std::string cut = path(std::string("cut_") + name);
    for (size_t len = 8; len < bytes.size(); len += (len < 64 ? 1 : 7)) {
      spit(cut, std::vector<uint8_t>(bytes.begin(), bytes.begin() + len));
      absl::Status s = read_image(cut).status();
      ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << name << " cut at " << len << ": " << s;
      expect_error_names_file(s, cut);
    }
  }
}

// Random byte corruption: decoding may succeed (JPEG has no checksum) but must
// not crash; a PNG whose image data is corrupted fails its chunk CRC.
TEST_F(ImageTest, CorruptedBytesNeverCrash) {
  ASSERT_TRUE(write_png(random_image(16, 16, 3, kSeed), path("c.png")).ok());
  write_jpeg(path("c.jpg"), smooth_image(32, 32, 3), 90);
  std::mt19937 rng(kSeed);
  for (const char* name : {"c.png", "c.jpg"}) {
    std::vector<uint8_t> bytes = slurp(path(name));
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<uint8_t> bad = bytes;
      size_t at = 2 + rng() % (bad.size() - 2);
      bad[at] ^= static_cast<uint8_t>(1 + rng() % 255);
      std::string p = path(std::string("bad_") + name);
      spit(p, bad);
      absl::StatusOr<Image> img = read_image(p);
      if (!img.ok()) expect_error_names_file(img.status(), p);
      bool png_body = std::string(name) == "c.png" && at >= 33 && at < bytes.size() - 12;
      if (png_body) {
        EXPECT_EQ(img.status().code(), absl::StatusCode::kDataLoss) << "byte " << at;
      }
    }
  }
}

TEST_F(ImageTest, WritePngRejectsInvalidImagesAndMissingFolders) {
  Image bad{4, 4, 3, std::vector<float>(5)};
  EXPECT_EQ(write_png(bad, path("bad.png")).code(), absl::StatusCode::kInvalidArgument);
  Image two{1, 1, 2, {0, 0}};
  EXPECT_EQ(write_png(two, path("two.png")).code(), absl::StatusCode::kInvalidArgument);
  absl::Status s = write_png(random_image(2, 2, 1, kSeed), path("no/such/dir/x.png"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_FALSE(fs::exists(path("bad.png")));
}

TEST_F(ImageTest, WritePngReplacesAtomicallyAndLeavesNoTemporaryFiles) {
  ASSERT_TRUE(write_png(random_image(8, 8, 3, kSeed), path("a.png")).ok());
  Image second = random_image(5, 3, 1, kSeed + 1);
  ASSERT_TRUE(write_png(second, path("a.png")).ok());
  absl::StatusOr<Image> back = read_image(path("a.png"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data, second.data);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST_F(ImageTest, LoadImagesSkipsBadFilesWithWarnings) {
  ASSERT_TRUE(write_png(random_image(6, 4, 3, kSeed), path("a.png")).ok());
  write_jpeg(path("b.JPG"), smooth_image(8, 8, 3), 90);
  spit(path("c_empty.png"), {});
  spit(path("d_text.jpeg"), {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'});
  ASSERT_TRUE(write_png(random_image(3, 3, 1, kSeed), path("e.png")).ok());
  spit(path("notes.txt"), {'x'});
  std::vector<std::string> warnings, names;
  absl::StatusOr<std::vector<Image>> all = load_images(dir_.string(), 0, &warnings, &names);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ(names, (std::vector<std::string>{path("a.png"), path("b.JPG"), path("e.png")}));
  EXPECT_EQ((*all)[2].width, 3);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("c_empty.png"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("d_text.jpeg"), std::string::npos) << warnings[1];

  absl::StatusOr<std::vector<Image>> two = load_images(dir_.string(), 2, nullptr);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->size(), 2u);
  EXPECT_EQ(load_images(dir_.string(), -1, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ImageTest, LoadImagesFailsOnMissingOrImagelessFolders) {
  EXPECT_EQ(load_images(path("missing"), 0, nullptr).status().code(), absl::StatusCode::kNotFound);
  spit(path("x.png"), {1, 2, 3});
  std::vector<std::string> warnings;
  absl::Status s = load_images(dir_.string(), 0, &warnings).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_EQ(warnings.size(), 1u);
}

// Per Note [Unusable folder], every file that could not be used is named with its
// reason, not just counted.
TEST_F(ImageTest, ImagelessFolderErrorListsEveryFileAndItsReason) {
  spit(path("a.png"), {1, 2, 3});
  spit(path("b.jpg"), {0xFF, 0xD8, 0xFF, 0xE0, 0, 0});
  spit(path("c.txt"), {'h', 'i'});
  spit(path(".hidden.png"), {1});
  std::filesystem::create_directories(dir_ / "d.png");
  std::vector<std::string> rejected;
  absl::StatusOr<std::vector<std::string>> listed = list_images(dir_.string(), &rejected);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->size(), 2u);
  ASSERT_EQ(rejected.size(), 2u);
  absl::Status s = load_images(dir_.string(), 0, nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  const std::string m(s.message());
  for (const std::string& part :
       {"no usable image in " + dir_.string() + ": ",
        std::string("a.png: not a PNG or JPEG file (unrecognised signature); b.jpg: "),
        std::string("; c.txt: unsupported extension (allowed: .png, .jpg, .jpeg); d.png: not a "
                    "regular file")}) {
    EXPECT_NE(m.find(part), std::string::npos) << "want '" << part << "' in: " << m;
  }
  EXPECT_EQ(m.find(".hidden"), std::string::npos) << m;
  EXPECT_EQ(m.find(dir_.string() + "/a.png"), std::string::npos) << "path repeated: " << m;
}

TEST(ImageReasons, LongListsAreCut) {
  std::vector<std::string> reasons;
  for (size_t i = 0; i < kMaxListedReasons + 5; ++i) reasons.push_back("f: bad");
  std::string m = no_usable_image_message("d", reasons);
  EXPECT_NE(m.find("; and 5 more files"), std::string::npos) << m;
  EXPECT_EQ(no_usable_image_message("d", {}), "no usable image in d: the folder is empty");
}

}  // namespace
}  // namespace lms::io
