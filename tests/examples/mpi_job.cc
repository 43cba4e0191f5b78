#include "mpi_job.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace lms::examples::testing {

bool mpirun_available() {
#ifdef LMS_MPIEXEC
  return access(LMS_MPIEXEC, X_OK) == 0;
#else
  return false;
#endif
}

std::string mpirun_missing_reason() {
#ifdef LMS_MPIEXEC
  return std::string("mpirun ") + LMS_MPIEXEC + " is not executable";
#else
  return "this build found no MPI (mpirun); install OpenMPI (scripts/install_deps.sh)";
#endif
}

namespace {

[[noreturn]] void exec_mpirun(const std::vector<std::string>& args,
                              const std::vector<std::pair<std::string, std::string>>& env,
                              int output_fd) {
  setpgid(0, 0);
  dup2(output_fd, STDOUT_FILENO);
  dup2(output_fd, STDERR_FILENO);
  close(output_fd);
  // mpirun refuses to start as root without these (CI containers run as root).
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
#ifdef LMS_MPIEXEC
  std::vector<char*> argv = {const_cast<char*>(LMS_MPIEXEC)};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(LMS_MPIEXEC, argv.data());
#endif
  _exit(127);
}

}  // namespace

JobEnd run_mpi_job(const std::vector<std::string>& args,
                   const std::vector<std::pair<std::string, std::string>>& env, double watchdog_s) {
  JobEnd end;
  std::string command = "mpirun";
  for (const auto& [name, value] : env) command = name + "=" + value + " " + command;
  for (const std::string& a : args) command += " " + a;
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return end;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipe_fds[0]);
    exec_mpirun(args, env, pipe_fds[1]);
  }
  close(pipe_fds[1]);
  auto elapsed_s = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  pollfd fd = {pipe_fds[0], POLLIN, 0};
  char buffer[4096];
  while (true) {
    if (elapsed_s() > watchdog_s) {
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
  std::printf("$ %s\n%s %d after %.2f s%s\n--- output ---\n%s--- end ---\n", command.c_str(),
              WIFEXITED(status) ? "exit code" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), end.elapsed_s,
              end.timed_out ? " (killed by the watchdog)" : "", end.output.c_str());
  return end;
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace lms::examples::testing
