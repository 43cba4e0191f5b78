// Checks of a program's command line, run as the program itself (the
// example programs: tests/examples/common/example_programs_test.cc; the
// benchmarks: tests/bench/bench_programs_test.cc): --help prints the flags
// to stdout and exits 0; an unknown flag exits with the program's error
// status, naming the flag on stderr after "<program>: ".
//
//   const CliProgram p{"digits", DIGITS_BINARY, {"--help"}, "--weight-decay", "", 2};
//   expect_help_lists_the_flag(p);
//   expect_unknown_flag_named(p);
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace lms::cli_test {

struct CliProgram {
  std::string name;
  std::string binary;
  std::vector<std::string> help;  // arguments, each of whose output lists `flag`
  std::string flag;               // a flag of that help
  std::string command;            // put before the unknown flag ("train"; "" for none)
  int error_exit = 1;             // the exit status of a bad flag
};

struct ProgramRun {
  int exit_code = -1;  // -1: killed by a signal
  std::string out, err;
};

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `binary args` through the shell, its stdout and stderr kept (in files of
// this process: ctest runs tests side by side).
inline ProgramRun run_program(const std::string& binary, const std::string& args) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string id = std::to_string(getpid());
  const std::filesystem::path out = dir / ("lms_program_cli_stdout_" + id + ".txt");
  const std::filesystem::path err = dir / ("lms_program_cli_stderr_" + id + ".txt");
  const std::string cmd = binary + " " + args + " > " + out.string() + " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  ProgramRun r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(out), read_text(err)};
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

inline void expect_help_lists_the_flag(const CliProgram& p) {
  for (const std::string& args : p.help) {
    const ProgramRun r = run_program(p.binary, args);
    EXPECT_EQ(r.exit_code, 0) << p.name << " " << args << ": " << r.err;
    EXPECT_NE(r.out.find(p.flag), std::string::npos) << p.name << " " << args << ":\n" << r.out;
    EXPECT_TRUE(r.err.empty()) << p.name << " " << args << ": " << r.err;
  }
}

inline void expect_unknown_flag_named(const CliProgram& p) {
  const ProgramRun r = run_program(p.binary, p.command + " --no-such-flag 3");
  EXPECT_EQ(r.exit_code, p.error_exit) << p.name << ": " << r.err;
  EXPECT_EQ(r.err.rfind(p.name + ": ", 0), 0u) << p.name << ": " << r.err;
  EXPECT_NE(r.err.find("--no-such-flag"), std::string::npos) << p.name << ": " << r.err;
}

}  // namespace lms::cli_test
