// The example programs' command lines, run as programs (tests/examples/program_cli.h):
// --help (of the program, or of its train command) lists the flags and
// exits 0; an unknown flag or a bad value is an error naming it, with the
// program's error status. (vdsr's own: tests/examples/vdsr_test.cc.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "program_cli.h"

namespace lms::cli_test {
namespace {

std::vector<CliProgram> programs() {
  std::vector<CliProgram> p;
#ifdef UNET3D_BINARY
  p.push_back({"unet3d", UNET3D_BINARY, {"train --help", "train -h"}, "--seg-levels", "train", 1});
#endif
#ifdef DIGITS_BINARY
  p.push_back({"digits", DIGITS_BINARY, {"--help", "-h"}, "--weight-decay", "", 2});
#endif
#ifdef TEXTLM_BINARY
  p.push_back({"textlm", TEXTLM_BINARY, {"--help", "-h"}, "--held-out", "", 2});
#endif
  return p;
}

TEST(ExamplePrograms, HelpExitsZeroAndListsTheFlags) {
  if (programs().empty()) GTEST_SKIP() << "no example program built";
  for (const CliProgram& p : programs()) expect_help_lists_the_flag(p);
}

TEST(ExamplePrograms, AnUnknownFlagOrABadValueIsAnErrorNamingIt) {
  if (programs().empty()) GTEST_SKIP() << "no example program built";
  for (const CliProgram& p : programs()) {
    expect_unknown_flag_named(p);
    // A bad value names the flag, the value and what is allowed.
    const ProgramRun bad = run_program(p.binary, p.command + " --threads 5000");
    EXPECT_EQ(bad.exit_code, p.error_exit) << p.name << ": " << bad.err;
    EXPECT_NE(bad.err.find("--threads: bad value '5000' (an integer from 0 to 1024)"),
              std::string::npos)
        << p.name << ": " << bad.err;
  }
}

}  // namespace
}  // namespace lms::cli_test
