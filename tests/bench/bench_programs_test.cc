// The command lines of lms-bench and the benchmark programs, run as programs
// (tests/examples/program_cli.h): --help lists the flags and exits 0; an unknown flag
// is an error naming it, with the program's error status. The programs are
// wired in bench/CMakeLists.txt (configured after tests/).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "program_cli.h"

namespace lms::cli_test {
namespace {

std::vector<CliProgram> programs() {
  std::vector<CliProgram> p;
#ifdef LMS_BENCH_BINARY
  p.push_back(
      {"lms-bench", LMS_BENCH_BINARY, {"vdsr --help", "ratio --help"}, "--json", "vdsr", 2});
#endif
#ifdef TIME_MODEL_BENCH_BINARY
  p.push_back({"time_model_bench", TIME_MODEL_BENCH_BINARY, {"--help"}, "--links", "", 1});
#endif
#ifdef EXACT_PLAN_BENCH_BINARY
  p.push_back({"exact_plan_bench", EXACT_PLAN_BENCH_BINARY, {"--help"}, "--time-limit", "", 1});
#endif
#ifdef PLAN_SPEED_BENCH_BINARY
  p.push_back({"plan_speed_bench", PLAN_SPEED_BENCH_BINARY, {"--help"}, "--case", "", 2});
#endif
#ifdef VDSR_STEP_BENCH_BINARY
  p.push_back({"vdsr_step_bench", VDSR_STEP_BENCH_BINARY, {"--help"}, "--no-fuse", "", 1});
#endif
#ifdef ONNX_IMPORT_BENCH_BINARY
  p.push_back({"onnx_import_bench", ONNX_IMPORT_BENCH_BINARY, {"--help"}, "--repeat", "", 2});
#endif
  return p;
}

TEST(BenchPrograms, HelpExitsZeroAndListsTheFlags) {
  if (programs().empty()) GTEST_SKIP() << "no benchmark program built";
  for (const CliProgram& p : programs()) expect_help_lists_the_flag(p);
}

TEST(BenchPrograms, AnUnknownFlagIsAnErrorNamingIt) {
  if (programs().empty()) GTEST_SKIP() << "no benchmark program built";
  for (const CliProgram& p : programs()) expect_unknown_flag_named(p);
}

// A bad value names the flag, the value and what is allowed; a missing
// argument of onnx_import_bench is named.
TEST(BenchPrograms, BadValuesAreErrorsNamingThem) {
  struct Case {
    std::string name, binary, args, expect;
    int exit_code;
  };
  std::vector<Case> cases;
#ifdef TIME_MODEL_BENCH_BINARY
  cases.push_back({"time_model_bench", TIME_MODEL_BENCH_BINARY, "--links 1GB/s,fast",
                   "--links: bad value '1GB/s,fast'", 1});
  cases.push_back({"time_model_bench", TIME_MODEL_BENCH_BINARY, "--model resnet",
                   "--model: bad value 'resnet' (one of vdsr, unet3d)", 1});
#endif
#ifdef EXACT_PLAN_BENCH_BINARY
  cases.push_back({"exact_plan_bench", EXACT_PLAN_BENCH_BINARY, "--oversubscription 1",
                   "--oversubscription: bad value '1' (a number > 1)", 1});
  cases.push_back({"exact_plan_bench", EXACT_PLAN_BENCH_BINARY, "--preset a100",
                   "--preset: bad value 'a100' (unknown preset 'a100'", 1});
#endif
#ifdef PLAN_SPEED_BENCH_BINARY
  cases.push_back({"plan_speed_bench", PLAN_SPEED_BENCH_BINARY, "--case vdsr-7",
                   "--case: bad value 'vdsr-7' (one of unet3d-72, vdsr-20, vdsr-100k)", 2});
  cases.push_back({"plan_speed_bench", PLAN_SPEED_BENCH_BINARY, "--repeat 0",
                   "--repeat: bad value '0' (an integer >= 1)", 2});
#endif
#ifdef VDSR_STEP_BENCH_BINARY
  cases.push_back({"vdsr_step_bench", VDSR_STEP_BENCH_BINARY, "--size 4",
                   "--size: bad value '4' (an integer >= 8)", 1});
#endif
#ifdef ONNX_IMPORT_BENCH_BINARY
  cases.push_back(
      {"onnx_import_bench", ONNX_IMPORT_BENCH_BINARY, "m.onnx input", "shape is required", 2});
  cases.push_back({"onnx_import_bench", ONNX_IMPORT_BENCH_BINARY, "m.onnx input 8,x",
                   "shape: bad value '8,x'", 2});
#endif
  if (cases.empty()) GTEST_SKIP() << "no benchmark program built";
  for (const Case& c : cases) {
    const ProgramRun r = run_program(c.binary, c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.name << " " << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.name + ": error: " + c.expect), std::string::npos)
        << c.name << " " << c.args << ": " << r.err;
  }
}

}  // namespace
}  // namespace lms::cli_test
