// examples/common/distributed.h in one process (without --distributed, or
// refused without mpirun). The ranks of real jobs are tested through the
// programs under mpirun: tests/examples/vdsr_distributed_test.cc and
// tests/examples/unet3d/unet3d_distributed_test.cc.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "distributed.h"
#include "flags.h"

namespace lms::examples {
namespace {

TEST(DistributedFlags, ParseIntoTheOptionsAndAreChecked) {
  DistributedOptions o;
  CLI::App app("prog", "prog");
  add_distributed_flags(app, o);
  absl::StatusOr<std::string> help =
      flags::parse(app, {"--distributed", "--scale-lr", "--comm-timeout=12.5"});
  ASSERT_TRUE(help.ok()) << help.status();
  EXPECT_TRUE(help->empty());
  EXPECT_TRUE(o.enabled);
  EXPECT_TRUE(o.scale_lr);
  EXPECT_EQ(o.comm_timeout_s, 12.5);
  EXPECT_TRUE(check_distributed(o).ok());
  EXPECT_NE(app.help().find("--comm-timeout S=300"), std::string::npos) << app.help();
  EXPECT_NE(app.help().find("data-parallel"), std::string::npos) << app.help();

  // A timeout of 0 is refused while parsing, naming the flag and the value.
  CLI::App zero("prog", "prog");
  add_distributed_flags(zero, o);
  help = flags::parse(zero, {"--comm-timeout", "0"});
  EXPECT_EQ(help.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(help.status().message()).find("--comm-timeout: bad value '0'"),
            std::string::npos)
      << help.status();

  o.enabled = false;
  absl::Status s = check_distributed(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("--scale-lr needs --distributed"), std::string::npos);
  o = {.enabled = true, .comm_timeout_s = 0};
  s = check_distributed(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("--comm-timeout: bad value '0'"), std::string::npos);
}

TEST(RankSeed, RankZeroKeepsTheSeedAndRanksDiffer) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{20261123}}) {
    EXPECT_EQ(rank_seed(seed, 0), seed);
    std::set<uint64_t> seeds;
    for (int rank = 0; rank < 64; ++rank) seeds.insert(rank_seed(seed, rank));
    EXPECT_EQ(seeds.size(), 64u) << "seed " << seed;
  }
  EXPECT_NE(rank_seed(1, 1), rank_seed(2, 1));
}

TEST(Ranks, TheSingleProcessIsRankZeroOfOne) {
  absl::StatusOr<Ranks> ranks = Ranks::join({});
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  EXPECT_FALSE(ranks->distributed());
  EXPECT_EQ(ranks->rank(), 0);
  EXPECT_EQ(ranks->size(), 1);
  EXPECT_EQ(ranks->communicator(), nullptr);
  EXPECT_EQ(ranks->learning_rate(1e-3, true), 1e-3);
  std::ostringstream log;
  EXPECT_EQ(&ranks->root_log(log), &log);
  EXPECT_EQ(*ranks->mean(0.25), 0.25);
  EXPECT_EQ(*ranks->sum(3.0), 3.0);
  EXPECT_TRUE(ranks->check_same("settings", "a=1\n").ok());
  EXPECT_EQ(*ranks->from_root("text"), "text");
  EXPECT_TRUE(ranks->barrier().ok());
  EXPECT_TRUE(ranks->inject_fault(1).ok());
  EXPECT_EQ(data_parallel_summary(*ranks, 16, 1e-3, false), "");
  // Alone, a failure is the caller's to report.
  const absl::Status error = absl::InternalError("boom");
  EXPECT_EQ(ranks->fail(error), error);
}

TEST(Ranks, DistributedWithoutMpirunIsRefused) {
  if (launched_by_mpi()) GTEST_SKIP() << "this test process was itself started by mpirun";
  absl::StatusOr<Ranks> ranks = Ranks::join({.enabled = true});
  ASSERT_FALSE(ranks.ok());
  EXPECT_EQ(ranks.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(ranks.status().message()).find("not started by mpirun"), std::string::npos)
      << ranks.status();
}

}  // namespace
}  // namespace lms::examples
