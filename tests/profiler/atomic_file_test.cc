#include "lms/profiler/atomic_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "synthetic_run.h"

namespace lms {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::fresh_test_dir(); }
  void TearDown() override { fs::remove_all(dir_); }

  std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  int files_in_dir() {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) n += e.is_regular_file();
    return n;
  }

  fs::path dir_;
};

TEST_F(AtomicFileTest, WritesAndReplacesBinaryContents) {
  constexpr uint32_t kSeed = 5150;
  std::printf("seed %u\n", kSeed);
  std::mt19937 rng(kSeed);
  std::string big(1 << 20, '\0');
  for (char& c : big) c = static_cast<char>(rng());
  fs::path p = dir_ / "f.bin";
  absl::Status first = write_file_atomically(p.string(), big);
  ASSERT_TRUE(first.ok()) << first;
  EXPECT_EQ(read(p), big);
  absl::Status st = write_file_atomically(p.string(), "short");
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(read(p), "short");
  ASSERT_TRUE(write_file_atomically(p.string(), "").ok());
  EXPECT_EQ(fs::file_size(p), 0u);
  EXPECT_EQ(files_in_dir(), 1) << "no temporary file left behind";
}

TEST_F(AtomicFileTest, FailuresNameThePathAndLeaveNothing) {
  std::string missing = (dir_ / "nope" / "f.txt").string();
  absl::Status st = write_file_atomically(missing, "x");
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_NE(st.message().find(missing), std::string::npos) << st;

  fs::create_directories(dir_ / "d");
  std::string onto_dir = (dir_ / "d").string();
  st = write_file_atomically(onto_dir, "x");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(onto_dir), std::string::npos) << st;
  EXPECT_EQ(files_in_dir(), 0) << "the temporary file was removed";
  EXPECT_TRUE(fs::is_directory(onto_dir));

  EXPECT_EQ(write_file_atomically("", "x").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(AtomicFileTest, TempNamesAreNextToTheTarget) {
  std::string prefix = atomic_temp_prefix((dir_ / "f").string());
  EXPECT_EQ(prefix.rfind((dir_ / "f").string(), 0), 0u);
  EXPECT_NE(prefix.find(".tmp."), std::string::npos);
}

}  // namespace
}  // namespace lms
