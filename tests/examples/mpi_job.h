// Launches a program under mpirun for the data-parallel tests
// (vdsr_distributed_test, unet3d_distributed_test, mpi_failure_test): the
// job runs in its own
// process group under a watchdog that kills all of it, so a hung job fails
// its test instead of hanging ctest.
//
//   if (!mpirun_available()) GTEST_SKIP() << mpirun_missing_reason();
//   JobEnd end = run_mpi_job({"-np", "2", "--oversubscribe", VDSR_BINARY, "train", ...});
//   EXPECT_EQ(end.exit_code, 0) << end.output;
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lms::examples::testing {

struct JobEnd {
  int exit_code = -1;  // -1 unless mpirun exited (a signal, the watchdog)
  bool timed_out = false;
  double elapsed_s = 0;
  std::string output;  // stdout and stderr of mpirun and every rank, interleaved
};

// Whether this build found mpirun (CMake's MPIEXEC_EXECUTABLE), and why not.
bool mpirun_available();
std::string mpirun_missing_reason();

// Runs `mpirun <args>` with `env` added to the environment (mpirun passes it
// on to the ranks), and the variables that let mpirun start as root. Kills
// the job after watchdog_s seconds. Prints the command, how it ended, the
// time taken and the output, so a failing test shows them.
JobEnd run_mpi_job(const std::vector<std::string>& args,
                   const std::vector<std::pair<std::string, std::string>>& env = {},
                   double watchdog_s = 120);

// How many times `what` occurs in `text`.
int count_of(const std::string& text, const std::string& what);

}  // namespace lms::examples::testing
