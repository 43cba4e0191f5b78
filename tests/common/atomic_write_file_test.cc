#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/atomic_file.h"
#include "gtest/gtest.h"

namespace lms {
namespace {

namespace fs = std::filesystem;

class CommonAtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("lms_common_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  int entries() {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) n += e.is_regular_file();
    return n;
  }

  fs::path dir_;
};

TEST_F(CommonAtomicFileTest, WritesAnyBytesAndReplacesTheFile) {
  const fs::path p = dir_ / "f.bin";
  const std::string bytes("a\0b\xff", 4);
  ASSERT_TRUE(atomic_write_file(p.string(), bytes).ok());
  EXPECT_EQ(read(p), bytes);
  ASSERT_TRUE(atomic_write_file(p.string(), "second").ok());
  EXPECT_EQ(read(p), "second");
  EXPECT_EQ(fs::status(p).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
  EXPECT_EQ(entries(), 1) << "no temporary file left behind";
}

TEST_F(CommonAtomicFileTest, ErrorsCarryTheErrnoCodeAndThePath) {
  const std::string missing = (dir_ / "nope" / "f.txt").string();
  absl::Status st = atomic_write_file(missing, "x");
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_NE(st.message().find(missing), std::string::npos) << st;
  EXPECT_EQ(atomic_write_file("", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(atomic_write_file(dir_.string() + "/", "x").code(), absl::StatusCode::kInvalidArgument);
  fs::create_directories(dir_ / "d");
  EXPECT_FALSE(atomic_write_file((dir_ / "d").string(), "x").ok());
  EXPECT_EQ(entries(), 0) << "the temporary file was removed";
}

TEST_F(CommonAtomicFileTest, ByNameKeepsTheSuffixAndReplacesTheFile) {
  const fs::path p = dir_ / "v.nii.gz";
  std::string seen;
  absl::Status st = atomic_write_file_by_name(p.string(), ".nii.gz", [&](const std::string& tmp) {
    seen = tmp;
    std::ofstream(tmp, std::ios::binary) << "volume";
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(seen.rfind(atomic_temp_prefix(p.string()), 0), 0u) << seen;
  EXPECT_EQ(seen.substr(seen.size() - 7), ".nii.gz") << seen;
  EXPECT_EQ(read(p), "volume");
  EXPECT_EQ(entries(), 1) << "no temporary file left behind";
}

TEST_F(CommonAtomicFileTest, ByNameFailureKeepsTheOldFileAndRemovesTheTemporary) {
  const fs::path p = dir_ / "v.nii";
  ASSERT_TRUE(atomic_write_file(p.string(), "old").ok());
  absl::Status st = atomic_write_file_by_name(p.string(), ".nii", [](const std::string& tmp) {
    std::ofstream(tmp, std::ios::binary) << "half";
    return absl::DataLossError("the writer failed");
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(read(p), "old");
  EXPECT_EQ(entries(), 1) << "the temporary file was removed";
}

TEST_F(CommonAtomicFileTest, TemporaryNamesCarryThePid) {
  const std::string path = (dir_ / "f").string();
  EXPECT_EQ(atomic_temp_prefix(path), path + ".tmp." + std::to_string(::getpid()) + ".");
  // This process is alive, so its own temporary names are never stale.
  std::ofstream(atomic_temp_prefix(path) + "abc123") << "x";
  EXPECT_EQ(remove_stale_temp_files(path), 0);
}

}  // namespace
}  // namespace lms
