// The digits example end to end (examples/digits/digits_train.h): a CNN
// written in PyTorch, exported at test time (make_tiny_classifier.py, by
// Debian's /usr/bin/python3), imported and trained on the real digits, with
// LMS under a device smaller than its step needs and without LMS on a large
// one. Skips with the reason without torch or the digits file.
#include "digits_train.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include "digits_file.h"
#include "gtest/gtest.h"

namespace lms::examples {
namespace {

constexpr uint64_t kSeed = 5;

TEST(DigitsTrain, LmsTrainsTheImportedCnnToTheSameLossesAsWithoutIt) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  const std::string data = digits_file();
  if (data.empty()) GTEST_SKIP() << "digits.csv.gz not found: install python3-sklearn";
  const std::string model =
      (std::filesystem::temp_directory_path() / "lms_digits_tiny.onnx").string();
  const std::string command = "/usr/bin/python3 " + std::string(LMS_SOURCE_DIR) +
                              "/tests/examples/digits/make_tiny_classifier.py " + model + " " +
                              std::to_string(kSeed) + " > /dev/null 2>&1";
  if (std::system(command.c_str()) != 0) {
    GTEST_SKIP() << "/usr/bin/python3 with torch and onnx is needed to export the model ("
                 << command << ")";
  }
  DigitsOptions o{.data = data,
                  .model = model,
                  .side = 16,
                  .batch = 32,
                  .epochs = 3,
                  .lr = 0.05,
                  .threads = 1,
                  .seed = kSeed};
  o.capacity_bytes = uint64_t{1} << 30;
  std::ostringstream log_off;
  auto off = train_digits(o, log_off);
  ASSERT_TRUE(off.ok()) << off.status();
  ASSERT_EQ(off->swapped + off->recomputed, 0) << log_off.str();
  // A device between the step's working set and its peak: LMS is needed.
  o.capacity_bytes = off->no_lms_peak_bytes * 3 / 4;
  std::ostringstream log_on;
  auto on = train_digits(o, log_on);
  ASSERT_TRUE(on.ok()) << on.status() << "\n" << log_on.str();
  std::printf("%s", log_on.str().c_str());
  EXPECT_GT(on->no_lms_peak_bytes, o.capacity_bytes);
  EXPECT_LE(on->lms_peak_bytes, o.capacity_bytes);
  EXPECT_GT(on->swapped + on->recomputed, 0);
  EXPECT_EQ(on->train_images, 1438);
  EXPECT_EQ(on->test_images, 359);
  ASSERT_EQ(on->losses.size(), 135u);  // 3 epochs of ceil(1438 / 32)
  // Bit-identical to training without LMS, so the same accuracy.
  EXPECT_EQ(on->losses, off->losses);
  EXPECT_EQ(on->test_accuracy, off->test_accuracy);
  // It learns: the last steps' loss is well under the first's, and the
  // held-out accuracy over 90% (chance is 10%; 98.9% with seed 5).
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) {
    first += on->losses[static_cast<size_t>(i)];
    last += on->losses[on->losses.size() - 1 - static_cast<size_t>(i)];
  }
  EXPECT_LT(last, first / 2);
  EXPECT_GT(on->test_accuracy, 0.9);
  std::filesystem::remove(model);
}

TEST(DigitsTrain, AMissingModelOrDataFileIsNamed) {
  DigitsOptions o{.data = "/nonexistent/digits.csv.gz", .model = "/nonexistent/m.onnx"};
  std::ostringstream log;
  auto r = train_digits(o, log);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("digits.csv.gz"), std::string::npos) << r.status();
  const std::string data = digits_file();
  if (data.empty()) GTEST_SKIP() << "digits.csv.gz not found: install python3-sklearn";
  o.data = data;
  r = train_digits(o, log);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("m.onnx"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace lms::examples
