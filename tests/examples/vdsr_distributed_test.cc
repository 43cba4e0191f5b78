// `vdsr train --distributed` (Note [Data-parallel runs]): the sharded
// dataset in-process, then the program itself under `mpirun -np 2`
// (mpi_job.h): two ranks train and only rank 0 writes, a resumed two-rank
// run equals the uninterrupted one bit for bit, and a failed rank, a killed
// rank or ranks started with different settings end the job quickly, naming
// the rank.
// Data: tests/data/astronaut_crop128.png and its mirror image, one per rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "dataset.h"
#include "distributed.h"
#include "lms/distributed.h"
#include "lms/io/checkpoint.h"
#include "lms/io/image.h"
#include "mpi_job.h"
#include "trainer.h"

namespace lms::vdsr {
namespace {

namespace fs = std::filesystem;
using examples::testing::count_of;
using examples::testing::JobEnd;
using examples::testing::run_mpi_job;

// A job with a failed, killed or mismatched rank ends within this, seconds:
// start-up of two ranks (about 1 s each on a loaded 2-core machine), the
// MPI engine's 5 s abort grace, mpirun's teardown, and room to spare.
// Without abort notices it would wait for the 300 s collective timeout.
constexpr double kFailureBound_s = 30;

class VdsrDistributed : public ::testing::Test {
 protected:
  // <tmp>/<test>/data/train: the astronaut crop and its mirror image.
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("vdsr_distributed_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "data/train");
    const fs::path astronaut = fs::path(LMS_SOURCE_DIR) / "tests/data/astronaut_crop128.png";
    absl::StatusOr<io::Image> image = io::read_image(astronaut.string());
    ASSERT_TRUE(image.ok()) << image.status();
    ASSERT_TRUE(io::write_png(*image, (dir_ / "data/train/a.png").string()).ok());
    ASSERT_TRUE(io::write_png(mirrored(*image), (dir_ / "data/train/b.png").string()).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  static io::Image mirrored(io::Image image) {
    const size_t row = static_cast<size_t>(image.width) * image.channels;
    for (int y = 0; y < image.height; ++y) {
      float* p = image.data.data() + row * y;
      for (int x = 0; x < image.width / 2; ++x) {
        for (int c = 0; c < image.channels; ++c) {
          std::swap(p[x * image.channels + c], p[(image.width - 1 - x) * image.channels + c]);
        }
      }
    }
    return image;
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // `vdsr train` of a reduced VDSR for `steps` steps, as one rank.
  std::vector<std::string> train_args(int64_t steps) const {
    return {VDSR_BINARY,
            "train",
            "--distributed",
            "--data",
            path("data"),
            "--steps",
            std::to_string(steps),
            "--batch",
            "4",
            "--crop",
            "24",
            "--depth",
            "6",
            "--channels",
            "16",
            "--lr",
            "1e-3",
            "--seed",
            "3",
            "--threads",
            "1",
            "--capacity",
            "64MiB",
            "--host-memory",
            "256MiB"};
  }

  // mpirun -np 2 of one command line.
  static JobEnd two_ranks(std::vector<std::string> args,
                          const std::vector<std::pair<std::string, std::string>>& env = {}) {
    args.insert(args.begin(), {"-np", "2", "--oversubscribe"});
    return run_mpi_job(args, env);
  }

  // MPMD: rank 0 runs `rank0`, rank 1 runs `rank1`.
  static JobEnd one_each(const std::vector<std::string>& rank0,
                         const std::vector<std::string>& rank1) {
    std::vector<std::string> args = {"--oversubscribe", "-np", "1"};
    args.insert(args.end(), rank0.begin(), rank0.end());
    args.insert(args.end(), {":", "-np", "1"});
    args.insert(args.end(), rank1.begin(), rank1.end());
    return run_mpi_job(args);
  }

  static void expect_failed_quickly(const JobEnd& end) {
    EXPECT_FALSE(end.timed_out);
    EXPECT_NE(end.exit_code, 0);
    EXPECT_LT(end.elapsed_s, kFailureBound_s);
  }

  fs::path dir_;
};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return false;
  }
  return true;
}

void expect_same_tensors(const io::Checkpoint& a, const io::Checkpoint& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const io::NamedTensor& t : b.tensors) {
    const io::NamedTensor* same = a.find(t.name);
    ASSERT_NE(same, nullptr) << t.name;
    EXPECT_TRUE(same_bits(same->data, t.data)) << t.name;
  }
}

TEST_F(VdsrDistributed, EachRankLoadsItsShareOfTheImages) {
  std::vector<std::string> names;
  for (int rank = 0; rank < 2; ++rank) {
    absl::StatusOr<Dataset> d =
        Dataset::load(path("data/train"), {.scale = 2, .rank = rank, .ranks = 2});
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(d->pairs().size(), 1u);
    names.push_back(d->pairs()[0].name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"a.png", "b.png"}));  // files[rank::2]
  absl::StatusOr<Dataset> three = Dataset::load(path("data/train"), {.rank = 2, .ranks = 3});
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(three.status().message()).find("2 image file(s) for 3 ranks"),
            std::string::npos)
      << three.status();
}

TEST_F(VdsrDistributed, FlagsAreCheckedAndMpirunIsRequired) {
  absl::StatusOr<Command> cmd = parse_command_line({"train", "--scale-lr"});
  ASSERT_FALSE(cmd.ok());
  EXPECT_NE(std::string(cmd.status().message()).find("--scale-lr needs --distributed"),
            std::string::npos);
  cmd = parse_command_line({"train", "--distributed", "--comm-timeout", "0"});
  ASSERT_FALSE(cmd.ok());
  EXPECT_NE(std::string(cmd.status().message()).find("--comm-timeout"), std::string::npos);
  cmd = parse_command_line({"train", "--distributed", "--scale-lr", "--comm-timeout", "20"});
  ASSERT_TRUE(cmd.ok()) << cmd.status();
  EXPECT_TRUE(cmd->train.distributed.scale_lr);
  EXPECT_EQ(cmd->train.distributed.comm_timeout_s, 20);
  if (launched_by_mpi()) GTEST_SKIP() << "this test process was itself started by mpirun";
  cmd->train.run.data_dir = path("data");
  std::ostringstream log;
  absl::StatusOr<TrainResult> r = train(cmd->train, log);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(r.status().message()).find("mpirun -np N"), std::string::npos)
      << r.status();
}

TEST_F(VdsrDistributed, TwoRanksTrainAndOnlyRankZeroWritesOrLogs) {
  if (!examples::testing::mpirun_available()) {
    GTEST_SKIP() << examples::testing::mpirun_missing_reason();
  }
  // Each rank is given its own output paths, so what rank 1 would write shows.
  const JobEnd end = one_each(
      with(train_args(3), {"--checkpoint", path("rank0.ckpt"), "--trace", path("trace0")}),
      with(train_args(3), {"--checkpoint", path("rank1.ckpt"), "--trace", path("trace1")}));
  ASSERT_EQ(end.exit_code, 0) << end.output;
  EXPECT_TRUE(fs::exists(path("rank0.ckpt")));
  EXPECT_TRUE(fs::exists(path("trace0/trace.json")));
  EXPECT_FALSE(fs::exists(path("rank1.ckpt")));
  EXPECT_FALSE(fs::exists(path("trace1")));
  EXPECT_EQ(count_of(end.output, "data: 2 images from"), 1) << end.output;
  EXPECT_EQ(count_of(end.output, "data parallel: 2 ranks (mpi), global batch 8 (4 per rank)"), 1)
      << end.output;
  EXPECT_EQ(count_of(end.output, "step      3/3"), 1) << end.output;
  EXPECT_EQ(count_of(end.output, "done: steps 1..3"), 1) << end.output;
  absl::StatusOr<io::Checkpoint> ck = io::load_usable_checkpoint(path("rank0.ckpt"));
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->step, 3);
  EXPECT_EQ(ck->meta.at("ranks"), "2");
  EXPECT_EQ(ck->meta.at("scale_lr"), "off");
}

TEST_F(VdsrDistributed, ResumedTwoRankRunEqualsTheUninterruptedOne) {
  if (!examples::testing::mpirun_available()) {
    GTEST_SKIP() << examples::testing::mpirun_missing_reason();
  }
  JobEnd end = two_ranks(with(train_args(5), {"--scale-lr", "--checkpoint", path("full.ckpt")}));
  ASSERT_EQ(end.exit_code, 0) << end.output;
  EXPECT_EQ(count_of(end.output, "lr 0.002 (--scale-lr: 0.001 x 2)"), 1) << end.output;
  end = two_ranks(with(train_args(3), {"--scale-lr", "--checkpoint", path("part.ckpt")}));
  ASSERT_EQ(end.exit_code, 0) << end.output;
  end =
      two_ranks(with(train_args(5), {"--scale-lr", "--checkpoint", path("part.ckpt"), "--resume"}));
  ASSERT_EQ(end.exit_code, 0) << end.output;
  EXPECT_EQ(count_of(end.output, "at step 3"), 1) << end.output;

  absl::StatusOr<io::Checkpoint> full = io::load_usable_checkpoint(path("full.ckpt"));
  absl::StatusOr<io::Checkpoint> resumed = io::load_usable_checkpoint(path("part.ckpt"));
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->step, 5);
  EXPECT_EQ(resumed->meta, full->meta);
  expect_same_tensors(*resumed, *full);
}

// Under LMS each rank would profile its own device; lms::gather_facts plans
// from rank 0's times on both, so the plans agree (Session::create checks)
// and swapping changes no bit (contract 1 of docs/design.md).
TEST_F(VdsrDistributed, LmsPlansAgreeAcrossRanksAndChangeNoBit) {
  if (!examples::testing::mpirun_available()) {
    GTEST_SKIP() << examples::testing::mpirun_missing_reason();
  }
  JobEnd end = two_ranks(with(train_args(2), {"--checkpoint", path("off.ckpt")}));
  ASSERT_EQ(end.exit_code, 0) << end.output;
  // 1 MiB holds less than the 1.42 MiB this step needs without swapping.
  end = two_ranks(with(train_args(2), {"--checkpoint", path("on.ckpt"), "--capacity", "1MiB",
                                       "--lms-set", "policy=auto"}));
  ASSERT_EQ(end.exit_code, 0) << end.output;
  EXPECT_EQ(count_of(end.output, "measured on rank 0 (cpu-emulated), planned alike on all 2 ranks"),
            1)
      << end.output;
  EXPECT_EQ(count_of(end.output, "LMS auto: "), 1) << end.output;
  EXPECT_EQ(count_of(end.output, "LMS auto: 0 tensors"), 0) << end.output;
  absl::StatusOr<io::Checkpoint> off = io::load_usable_checkpoint(path("off.ckpt"));
  absl::StatusOr<io::Checkpoint> on = io::load_usable_checkpoint(path("on.ckpt"));
  ASSERT_TRUE(off.ok()) << off.status();
  ASSERT_TRUE(on.ok()) << on.status();
  expect_same_tensors(*on, *off);
}

TEST_F(VdsrDistributed, AFailedRankEndsTheJobAndEveryRankNamesIt) {
  if (!examples::testing::mpirun_available()) {
    GTEST_SKIP() << examples::testing::mpirun_missing_reason();
  }
  const JobEnd end = two_ranks(train_args(4), {{"LMS_EXAMPLES_INJECT_FAULT", "1:2:fail"}});
  expect_failed_quickly(end);
  EXPECT_EQ(count_of(end.output, "step      1/4"), 1) << end.output;
  EXPECT_EQ(count_of(end.output, "step      2/4"), 0) << end.output;
  EXPECT_EQ(count_of(end.output, "rank 1: error: injected fault at step 2"), 1) << end.output;
  EXPECT_EQ(count_of(end.output, "rank 0: error: "), 1) << end.output;
  EXPECT_NE(end.output.find("rank 1 failed: INTERNAL: injected fault at step 2"), std::string::npos)
      << end.output;
}

TEST_F(VdsrDistributed, AKilledRankEndsTheJobAndMpirunNamesIt) {
  if (!examples::testing::mpirun_available()) {
    GTEST_SKIP() << examples::testing::mpirun_missing_reason();
  }
  const JobEnd end = two_ranks(train_args(4), {{"LMS_EXAMPLES_INJECT_FAULT", "1:2:kill"}});
  expect_failed_quickly(end);
  EXPECT_NE(end.output.find("rank 1"), std::string::npos) << end.output;
}

TEST_F(VdsrDistributed, AHungRankIsNamedAfterTheCommTimeoutAndTheJobEnds) {
  if (!examples::testing::mpirun_available()) {
    GTEST_SKIP() << examples::testing::mpirun_missing_reason();
  }
  const JobEnd end = two_ranks(with(train_args(4), {"--comm-timeout", "2"}),
                               {{"LMS_EXAMPLES_INJECT_FAULT", "1:2:hang"}});
  expect_failed_quickly(end);
  EXPECT_GE(end.elapsed_s, 2.0) << "the deadline is 2 s";
  EXPECT_EQ(count_of(end.output, "rank 0: error: "), 1) << end.output;
  EXPECT_NE(end.output.find("waited 2 s for rank(s) 1"), std::string::npos) << end.output;
}

// Settings and LMS configs are compared by the program, the graphs and LMS
// plans by Session::create (here: planned for different capacities).
TEST_F(VdsrDistributed, RanksThatDisagreeAreRefusedAtStart) {
  if (!examples::testing::mpirun_available()) {
    GTEST_SKIP() << examples::testing::mpirun_missing_reason();
  }
  JobEnd end = one_each(train_args(2), with(train_args(2), {"--depth", "5"}));
  expect_failed_quickly(end);
  EXPECT_NE(end.output.find("settings differ across ranks: rank 1 has 'depth=5' where rank 0 "
                            "has 'depth=6'"),
            std::string::npos)
      << end.output;
  EXPECT_EQ(count_of(end.output, "step      1/2"), 0) << end.output;

  end = one_each(with(train_args(2), {"--lms-set", "policy=auto"}),
                 with(train_args(2), {"--lms-set", "policy=tflms"}));
  expect_failed_quickly(end);
  EXPECT_NE(end.output.find("LMS configs differ across ranks: rank 1 has 'policy = \"tflms\"'"),
            std::string::npos)
      << end.output;

  const std::vector<std::string> lms = {"--lms-set", "policy=auto", "--capacity"};
  end =
      one_each(with(with(train_args(2), lms), {"1MiB"}), with(with(train_args(2), lms), {"2MiB"}));
  expect_failed_quickly(end);
  // Rank 0 reports the disagreement itself, or rank 1's report of it when
  // that arrives first: either way rank 0 names it.
  EXPECT_TRUE(
      end.output.find("rank 0: error: data-parallel ranks disagree") != std::string::npos ||
      end.output.find("rank 0: error: rank 1 failed: FAILED_PRECONDITION: data-parallel ranks "
                      "disagree") != std::string::npos)
      << end.output;
  EXPECT_NE(end.output.find("differs on rank(s) 1"), std::string::npos) << end.output;
  EXPECT_EQ(count_of(end.output, "step      1/2"), 0) << end.output;
}

}  // namespace
}  // namespace lms::vdsr
