// The text reader, split and batches of the textlm example
// (examples/textlm/text_data.h), on a text written here and on missing or
// empty files.
#include "text_data.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace lms::examples {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// 0..255 cycled: each byte says where it stands.
std::string counting_text(size_t n) {
  std::string s(n, '\0');
  for (size_t k = 0; k < n; ++k) s[k] = static_cast<char>(k % 251);
  return s;
}

TEST(TextData, ReadsTheBytesAndNamesAMissingOrEmptyFile) {
  const std::string text = "In the beginning\n\xff\x01";
  auto read = read_text(write_file("lms_text_data.txt", text));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, text);
  auto missing = read_text("/nonexistent/kjv.txt");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/kjv.txt"), std::string::npos);
  EXPECT_NE(missing.status().message().find("fetch_data.sh"), std::string::npos);
  auto empty = read_text(write_file("lms_text_empty.txt", ""));
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TextData, SplitHoldsOutTheEnd) {
  const std::string text = counting_text(1000);
  const TextSplit s = split_text(text, 0.1);
  EXPECT_EQ(s.train.size(), 900u);
  EXPECT_EQ(s.held_out.size(), 100u);
  EXPECT_EQ(s.train + s.held_out, text);
}

TEST(TextData, BatchesAreWindowsWithTheNextByteAndDependOnSeedAndStepOnly) {
  const uint64_t seed = 7;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const std::string text = counting_text(5000);
  std::vector<int64_t> ids, next, ids2, next2;
  text_batch(text, 4, 16, seed, 3, &ids, &next);
  ASSERT_EQ(ids.size(), 64u);
  ASSERT_EQ(next.size(), 64u);
  for (size_t b = 0; b < 4; ++b) {
    for (size_t t = 0; t < 16; ++t) {
      const int64_t id = ids[b * 16 + t];
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 256);
      // Consecutive bytes of the text: each the one before plus 1 mod 251.
      EXPECT_EQ(next[b * 16 + t], (id + 1) % 251);
      if (t > 0) {
        EXPECT_EQ(id, next[b * 16 + t - 1]);
      }
    }
  }
  text_batch(text, 4, 16, seed, 3, &ids2, &next2);
  EXPECT_EQ(ids, ids2);
  text_batch(text, 4, 16, seed, 4, &ids2, &next2);
  EXPECT_NE(ids, ids2);
  text_batch(text, 4, 16, seed + 1, 3, &ids2, &next2);
  EXPECT_NE(ids, ids2);
}

TEST(TextData, EvalWindowsSpanTheTextEvenly) {
  const std::string text = counting_text(1000);
  std::vector<int64_t> ids, next;
  eval_windows(text, 3, 10, &ids, &next);
  ASSERT_EQ(ids.size(), 30u);
  EXPECT_EQ(ids[0], 0);                          // the first window starts the text
  EXPECT_EQ(next[29], int64_t{999 % 251});       // the last ends it
  EXPECT_EQ(ids[10], int64_t{(989 / 2) % 251});  // the middle one halfway
}

}  // namespace
}  // namespace lms::examples
