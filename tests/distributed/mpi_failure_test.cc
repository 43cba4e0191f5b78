// Note [Failed ranks] (lms/distributed.h), end to end: each test launches
// `mpirun -np 2 mpi_failure_probe <mode>` (mpi_failure_probe.cc) under a
// watchdog and checks how the job ended, how fast, and what it printed.
// Not itself run under mpirun.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

// A job with a failed, killed or hung rank must end within this, seconds:
// start-up (about 1 s), the probe's 2 s deadline in the hang mode, its 2 s
// abort grace, mpirun's teardown, and room for a loaded 2-core machine.
// Without the notices and deadlines it would never end.
constexpr double kFailureBound_s = 30;
// The watchdog kills a job still running after this, seconds, so a
// regression fails the test instead of hanging it.
constexpr double kWatchdog_s = 90;

struct JobEnd {
  int exit_code = -1;  // -1 unless it exited
  bool timed_out = false;
  double elapsed_s = 0;
  std::string output;  // stdout and stderr together
};

// Runs mpirun in its own process group, so the watchdog can end all of it.
JobEnd run_probe(const char* mode) {
  JobEnd end;
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return end;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    // mpirun refuses to start as root without these (CI containers run as root).
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    execl(LMS_MPIEXEC, LMS_MPIEXEC, "-np", "2", "--oversubscribe", LMS_FAILURE_PROBE, mode,
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(pipe_fds[1]);
  auto elapsed_s = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  pollfd fd = {pipe_fds[0], POLLIN, 0};
  char buffer[4096];
  while (true) {
    if (elapsed_s() > kWatchdog_s) {
      end.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    if (poll(&fd, 1, 100) <= 0) continue;
    const ssize_t n = read(pipe_fds[0], buffer, sizeof(buffer));
    if (n <= 0) break;  // every writer is gone
    end.output.append(buffer, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  end.elapsed_s = elapsed_s();
  if (WIFEXITED(status)) end.exit_code = WEXITSTATUS(status);
  std::printf("mode %s: %s %d after %.2f s\n--- output ---\n%s--- end ---\n", mode,
              WIFEXITED(status) ? "exit code" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), end.elapsed_s,
              end.output.c_str());
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
