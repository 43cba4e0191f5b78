// Note [Failed ranks], end to end: each test launches
// `mpirun -np 2 mpi_failure_probe <mode>` (mpi_failure_probe.cc) under a
// watchdog and checks how the job ended, how fast, and what it printed.
// Not itself run under mpirun.
#include <gtest/gtest.h>

#include <string>

#include "mpi_job.h"

namespace {

// A job with a failed, killed or hung rank must end within this, seconds:
// start-up (about 1 s), the probe's 2 s deadline in the hang mode, its 2 s
// abort grace, mpirun's teardown, and room for a loaded 2-core machine.
// Without the notices and deadlines it would never end.
constexpr double kFailureBound_s = 30;
// The watchdog kills a job still running after this, seconds, so a
// regression fails the test instead of hanging it.
constexpr double kWatchdog_s = 90;

using lms::examples::testing::JobEnd;

// `mpirun -np 2 mpi_failure_probe <mode>` under the watchdog (mpi_job.h).
JobEnd run_probe(const char* mode) {
  JobEnd end = lms::examples::testing::run_mpi_job(
      {"-np", "2", "--oversubscribe", LMS_FAILURE_PROBE, mode}, {}, kWatchdog_s);
  testing::Test::RecordProperty("elapsed_s", std::to_string(end.elapsed_s));
  return end;
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

void expect_failed_quickly(const JobEnd& end) {
  EXPECT_FALSE(end.timed_out);
  EXPECT_NE(end.exit_code, 0);
  EXPECT_LT(end.elapsed_s, kFailureBound_s);
}

TEST(MpiFailure, AJobWithoutFailuresExitsZero) {
  const JobEnd end = run_probe("smoke");
  EXPECT_EQ(end.exit_code, 0);
  EXPECT_TRUE(contains(end.output, "rank 0: smoke ok")) << end.output;
  EXPECT_TRUE(contains(end.output, "rank 1: smoke ok")) << end.output;
}

TEST(MpiFailure, ARankThatAbortsEndsTheJobAndOthersNameIt) {
  const JobEnd end = run_probe("fail");
  expect_failed_quickly(end);
  // Rank 1's own report, then rank 0's Aborted from its stream all-reduce
  // (prefixed by the device with the task's name).
  EXPECT_TRUE(contains(end.output, "rank 1: INTERNAL: injected failure")) << end.output;
  EXPECT_TRUE(contains(end.output,
                       "rank 0: ABORTED: 'grads': rank 1 failed: INTERNAL: injected "
                       "failure"))
      << end.output;
}

TEST(MpiFailure, AKilledRankEndsTheJobAndMpirunNamesIt) {
  const JobEnd end = run_probe("kill");
  expect_failed_quickly(end);
  EXPECT_TRUE(contains(end.output, "rank 1")) << end.output;
}

TEST(MpiFailure, AHungRankIsNamedAtTheDeadlineAndTheJobEnds) {
  const JobEnd end = run_probe("hang");
  expect_failed_quickly(end);
  EXPECT_GE(end.elapsed_s, 2.0) << "the probe's deadline is 2 s";
  EXPECT_TRUE(contains(end.output,
                       "rank 0: DEADLINE_EXCEEDED: all_reduce_sum: waited 2 s for "
                       "rank(s) 1"))
      << end.output;
}

}  // namespace
