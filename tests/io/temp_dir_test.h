// The fixture of the io tests that write files: a fresh folder per test,
// <temp>/lms_<suite>_<pid>_<test>, removed after the test, and the test's
// data seed printed so a failure can be reproduced.
//
//   class MyTest : public TempDirTest {
//    protected:
//     MyTest() : TempDirTest(/*seed=*/42) {}
//   };
//   TEST_F(MyTest, Writes) { write(path("a.bin")); }
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace lms::io {

class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(uint32_t seed) : seed_(seed) {}

  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("lms_" + std::string(info->test_suite_name()) + "_" + std::to_string(::getpid()) + "_" +
            info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::printf("seed %u\n", seed_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `name` inside the test's folder.
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  const uint32_t seed_;
  std::filesystem::path dir_;
};

}  // namespace lms::io
