// The digits reader and split (examples/digits/digits_data.h) on the file
// Debian's python3-sklearn ships, and on broken files.
#include "digits_data.h"

#include <zlib.h>

#include <filesystem>
#include <set>
#include <string>

#include "digits_file.h"
#include "gtest/gtest.h"

namespace lms::examples {
namespace {

std::string write_gz(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  return path;
}

TEST(DigitsData, ReadsEveryImageAndScalesItUp) {
  const std::string path = digits_file();
  if (path.empty()) GTEST_SKIP() << "digits.csv.gz not found: install python3-sklearn";
  auto small = read_digits(path, 8);
  ASSERT_TRUE(small.ok()) << small.status();
  auto big = read_digits(path, 32);
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_EQ(small->count(), 1797);
  ASSERT_EQ(big->count(), 1797);
  std::set<int64_t> classes(small->labels.begin(), small->labels.end());
  EXPECT_EQ(classes.size(), 10u);
  // The first image of the file, "0,0,5,13,9,1,0,0,...", a zero.
  EXPECT_EQ(small->labels[0], 0);
  EXPECT_FLOAT_EQ(small->pixels[2], 5.0f / 16);
  EXPECT_FLOAT_EQ(small->pixels[3], 13.0f / 16);
  // Each pixel of the 32x32 image is its 8x8 pixel, repeated 4x4.
  for (int64_t i : {0, 17, 1796}) {
    for (int64_t y = 0; y < 32; ++y) {
      for (int64_t x = 0; x < 32; ++x) {
        ASSERT_EQ(big->pixels[static_cast<size_t>(i * 1024 + y * 32 + x)],
                  small->pixels[static_cast<size_t>(i * 64 + (y / 4) * 8 + x / 4)])
            << i << " " << y << " " << x;
      }
    }
  }
}

TEST(DigitsData, SplitIsShuffledDisjointAndTheSameForASeed) {
  const std::string path = digits_file();
  if (path.empty()) GTEST_SKIP() << "digits.csv.gz not found: install python3-sklearn";
  auto all = read_digits(path, 8);
  ASSERT_TRUE(all.ok()) << all.status();
  const DigitsSplit a = split_digits(*all, 0.2, 1);
  const DigitsSplit b = split_digits(*all, 0.2, 1);
  const DigitsSplit c = split_digits(*all, 0.2, 2);
  EXPECT_EQ(a.test.count(), 359);
  EXPECT_EQ(a.train.count(), 1438);
  EXPECT_EQ(a.test.pixels, b.test.pixels);
  EXPECT_NE(a.test.pixels, c.test.pixels);
  // Every image lands in exactly one set: the multisets of images add up.
  std::multiset<std::vector<float>> whole, parts;
  auto add = [](std::multiset<std::vector<float>>& to, const Digits& d) {
    for (int64_t i = 0; i < d.count(); ++i) {
      std::vector<float> image(d.pixels.begin() + i * 64, d.pixels.begin() + (i + 1) * 64);
      image.push_back(static_cast<float>(d.labels[static_cast<size_t>(i)]));
      to.insert(std::move(image));
    }
  };
  add(whole, *all);
  add(parts, a.train);
  add(parts, a.test);
  EXPECT_EQ(whole, parts);
  // Batches wrap around the end of the set.
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  digits_batch(a.test, a.test.count() - 1, 2, &pixels, &labels);
  EXPECT_EQ(labels[0], a.test.labels.back());
  EXPECT_EQ(labels[1], a.test.labels.front());
}

TEST(DigitsData, BadFilesAreClearErrors) {
  EXPECT_EQ(read_digits("/nonexistent/digits.csv.gz", 32).status().code(),
            absl::StatusCode::kNotFound);
  const std::string short_row = write_gz("digits_short.csv.gz", "0,1,2\n");
  auto s = read_digits(short_row, 32);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("line 1"), std::string::npos) << s.status();
  std::string row;
  for (int i = 0; i < 64; ++i) row += "3,";
  const std::string bad_label = write_gz("digits_label.csv.gz", row + "0\n" + row + "12\n");
  s = read_digits(bad_label, 32);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("line 2"), std::string::npos) << s.status();
  const std::string empty = write_gz("digits_empty.csv.gz", "");
  EXPECT_EQ(read_digits(empty, 32).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(read_digits(short_row, 12).status().code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove(short_row);
  std::filesystem::remove(bad_label);
  std::filesystem::remove(empty);
}

}  // namespace
}  // namespace lms::examples
