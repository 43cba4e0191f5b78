// `unet3d train --distributed` under mpirun (Note [Data-parallel runs]) on
// a synthetic folder of two training pairs: with two ranks each trains on
// one subject; with three, every rank trains on both, on crops of its own.
// Rank 0 alone logs and writes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "lms/io/checkpoint.h"
#include "mpi_job.h"
#include "synthetic_pairs.h"

namespace lms::unet3d {
namespace {

namespace fs = std::filesystem;
using examples::testing::count_of;
using examples::testing::JobEnd;
using examples::testing::run_mpi_job;
constexpr uint64_t kSeed = 20261123;

class Unet3dDistributed : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!examples::testing::mpirun_available()) {
      GTEST_SKIP() << examples::testing::mpirun_missing_reason();
    }
    dir_ = fs::path(::testing::TempDir()) /
           ("unet3d_distributed_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    std::printf("seed %llu, data in %s\n", static_cast<unsigned long long>(kSeed),
                dir_.string().c_str());
    ASSERT_TRUE(write_synthetic_pair(dir_ / "data/train", "a.nii.gz", kSeed).ok());
    ASSERT_TRUE(write_synthetic_pair(dir_ / "data/train", "b.nii.gz", kSeed + 1).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // mpirun -np `ranks` of a 2-level U-Net on 8^3 crops for `steps` steps.
  JobEnd train(int ranks, int64_t steps) const {
    return run_mpi_job({"-np",
                        std::to_string(ranks),
                        "--oversubscribe",
                        UNET3D_BINARY,
                        "train",
                        "--distributed",
                        "--data",
                        (dir_ / "data").string(),
                        "--steps",
                        std::to_string(steps),
                        "--filters",
                        "2",
                        "--levels",
                        "2",
                        "--seg-levels",
                        "1",
                        "--size",
                        "8",
                        "--grid",
                        "12",
                        "--batch",
                        "2",
                        "--lr",
                        "1e-2",
                        "--seed",
                        std::to_string(kSeed),
                        "--threads",
                        "1",
                        "--capacity",
                        "256MiB",
                        "--host-memory",
                        "256MiB",
                        "--checkpoint",
                        (dir_ / "unet.ckpt").string()});
  }

  fs::path dir_;
};

TEST_F(Unet3dDistributed, TwoRanksTrainOnOneSubjectEach) {
  const JobEnd end = train(2, 2);
  ASSERT_EQ(end.exit_code, 0) << end.output;
  EXPECT_EQ(count_of(end.output, "2 subjects sharded over 2 ranks"), 1) << end.output;
  EXPECT_EQ(count_of(end.output, "data parallel: 2 ranks (mpi), global batch 4 (2 per rank)"), 1)
      << end.output;
  EXPECT_EQ(count_of(end.output, "done: steps 1..2"), 1) << end.output;
  absl::StatusOr<io::Checkpoint> ck = io::load_usable_checkpoint((dir_ / "unet.ckpt").string());
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->step, 2);
  EXPECT_EQ(ck->meta.at("ranks"), "2");
}

TEST_F(Unet3dDistributed, MoreRanksThanSubjectsShareThemAndDrawTheirOwnCrops) {
  const JobEnd end = train(3, 1);
  ASSERT_EQ(end.exit_code, 0) << end.output;
  EXPECT_EQ(count_of(end.output, "2 subject(s) for 3 ranks: every rank trains on all of them"), 1)
      << end.output;
  EXPECT_EQ(count_of(end.output, "done: steps 1..1"), 1) << end.output;
}

}  // namespace
}  // namespace lms::unet3d
