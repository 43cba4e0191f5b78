// examples/common/flags.h: the CLI11 flags of every lms program. Each kind
// of flag parses what it documents and refuses anything else with
// "--flag: bad value 'VALUE' (ALLOWED)"; unknown flags, missing values and
// stray arguments are CLI11's errors naming them; --help is the help text.
#include "flags.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lms::flags {
namespace {

struct Values {
  int threads = 0;
  int64_t steps = 100;
  uint64_t seed = 1;
  double lr = 1e-4;
  double fraction = 0.6;
  uint64_t capacity = uint64_t{1} << 30;
  double link = 0;
  std::string data = "data";
  std::vector<std::string> sets;
  std::string device = "cpu";
  std::vector<int64_t> sizes = {4, 8};
  std::vector<double> factors = {1.5, 2};
  std::vector<double> links;
  bool resume = false;
  bool search = true;
};

// A program with every kind of flag over `v`.
void add_all(CLI::App& app, Values& v) {
  add_int(app, "--threads", &v.threads, "threads", {.max = kMaxThreads});
  add_int(app, "--steps", &v.steps, "steps", {.min = 1});
  add_int(app, "--seed", &v.seed, "seed");
  add_real(app, "--lr", &v.lr, "rate", {.min = 0, .min_open = true});
  add_real(app, "--fraction", &v.fraction, "fraction",
           {.min = 0, .max = 1, .min_open = true, .max_open = true});
  add_bytes(app, "--capacity", &v.capacity, "device memory");
  add_bandwidth(app, "--link", &v.link, "link");
  add_string(app, "--data DIR", &v.data, "data folder");
  add_strings(app, "--lms-set KEY=VALUE", &v.sets, "overrides");
  add_choice(app, "--device", &v.device, "device", {"cpu", "cuda"});
  add_int_list(app, "--sizes", &v.sizes, "sizes", {.min = 1, .max = 1 << 20});
  add_real_list(app, "--factors", &v.factors, "factors", {.min = 1, .min_open = true});
  add_bandwidth_list(app, "--links", &v.links, "links");
  add_switch(app, "--resume", &v.resume, "resume");
  add_switch(app, "--no-search", &v.search, "no search", false);
}

absl::StatusOr<std::string> parse_all(Values& v, const std::vector<std::string>& args) {
  CLI::App app("test program", "prog");
  add_all(app, v);
  return parse(app, args);
}

TEST(Flags, EveryKindParsesItsForms) {
  Values v;
  absl::StatusOr<std::string> help = parse_all(v, {"--threads",
                                                   "4",
                                                   "--steps=7",
                                                   "--seed",
                                                   "18446744073",
                                                   "--lr",
                                                   "1e-3",
                                                   "--fraction",
                                                   "0.25",
                                                   "--capacity",
                                                   "256MiB",
                                                   "--link=12GB/s",
                                                   "--data",
                                                   "d",
                                                   "--lms-set",
                                                   "a=1",
                                                   "--lms-set=b=2",
                                                   "--device",
                                                   "cuda",
                                                   "--sizes",
                                                   "1,2,3",
                                                   "--factors",
                                                   "1.25,3",
                                                   "--links",
                                                   "1GB/s,50MB/s",
                                                   "--resume",
                                                   "--no-search",
                                                   "--steps",
                                                   "9"});
  ASSERT_TRUE(help.ok()) << help.status();
  EXPECT_TRUE(help->empty());
  EXPECT_EQ(v.threads, 4);
  EXPECT_EQ(v.steps, 9);  // given twice: the last
  EXPECT_EQ(v.seed, 18446744073u);
  EXPECT_DOUBLE_EQ(v.lr, 1e-3);
  EXPECT_DOUBLE_EQ(v.fraction, 0.25);
  EXPECT_EQ(v.capacity, uint64_t{256} << 20);
  EXPECT_DOUBLE_EQ(v.link, 12e9);
  EXPECT_EQ(v.data, "d");
  EXPECT_EQ(v.sets, (std::vector<std::string>{"a=1", "b=2"}));  // repeatable, in order
  EXPECT_EQ(v.device, "cuda");
  EXPECT_EQ(v.sizes, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(v.factors, (std::vector<double>{1.25, 3}));
  EXPECT_EQ(v.links, (std::vector<double>{1e9, 50e6}));
  EXPECT_TRUE(v.resume);
  EXPECT_FALSE(v.search);

  Values defaults;
  help = parse_all(defaults, {});
  ASSERT_TRUE(help.ok()) << help.status();
  EXPECT_EQ(defaults.steps, 100);
  EXPECT_EQ(defaults.sizes, (std::vector<int64_t>{4, 8}));
  EXPECT_TRUE(defaults.search);
}

TEST(Flags, BadValuesNameTheFlagTheValueAndWhatIsAllowed) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {{"--threads", "1025"}, "--threads: bad value '1025' (an integer from 0 to 1024)"},
           {{"--threads", "99999999999999999999"}, "--threads: bad value '99999999999999999999'"},
           {{"--steps", "0"}, "--steps: bad value '0' (an integer >= 1)"},
           {{"--steps", "4x"}, "--steps: bad value '4x' (an integer >= 1)"},
           {{"--seed", "-1"}, "--seed: bad value '-1' (an integer >= 0)"},
           {{"--lr", "0"}, "--lr: bad value '0' (a number > 0)"},
           {{"--lr", "nan"}, "--lr: bad value 'nan' (a number > 0)"},
           {{"--lr", "0x10"}, "--lr: bad value '0x10' (a number > 0)"},
           {{"--fraction", "1"}, "--fraction: bad value '1' (a number in (0, 1))"},
           {{"--capacity", "12XB"}, "--capacity: bad value '12XB' (a positive size such as 256MiB"},
           {{"--capacity", "0"}, "--capacity: bad value '0' (a positive size"},
           {{"--link", "fast"}, "--link: bad value 'fast' (a bandwidth > 0 such as 12GB/s"},
           {{"--lms-set="}, "--lms-set"},
           {{"--device", "gpu"}, "--device: bad value 'gpu' (one of cpu, cuda)"},
           {{"--sizes", "4,x"},
            "--sizes: bad value '4,x' (a comma-separated list of integers from 1 to 1048576)"},
           {{"--sizes", ""}, "--sizes: bad value ''"},
           {{"--factors", "1,2"},
            "--factors: bad value '1,2' (a comma-separated list of numbers > 1)"},
           {{"--links", "1GB/s,x"}, "--links: bad value '1GB/s,x' (a comma-separated list"},
           {{"--resume=yes"}, "--resume: bad value 'yes' (a switch takes no value)"},
           {{"--steps"}, "--steps: 1 required N missing"},
           {{"--bogus", "1"}, "not expected: 1 --bogus"},
           {{"stray"}, "not expected: stray"},
       }) {
    Values v;
    absl::StatusOr<std::string> r = parse_all(v, c.args);
    ASSERT_FALSE(r.ok()) << c.args[0] << " accepted";
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find(c.expect), std::string::npos)
        << "want '" << c.expect << "' in: " << r.status().message();
  }
}

TEST(Flags, HelpListsEveryFlagWithItsDefault) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--help"}, {"-h"}, {"--steps", "3", "--help"}}) {
    Values v;
    absl::StatusOr<std::string> help = parse_all(v, args);
    ASSERT_TRUE(help.ok()) << help.status();
    for (const char* part : {"test program", "--threads N=0", "--capacity BYTES=1GiB",
                             "--data DIR=data", "--device cpu|cuda=cpu", "--sizes N[,N...]=4,8",
                             "--lms-set KEY=VALUE", "--resume", "--no-search"}) {
      EXPECT_NE(help->find(part), std::string::npos) << part << " not in:\n" << *help;
    }
  }
}

// A program of commands: `help` and no command are its help; a command's
// --help is the command's; a stray argument is named before a missing
// required flag; one command per run.
TEST(Flags, CommandsHelpAndRequiredFlags) {
  auto parse_commands = [](const std::vector<std::string>& args, std::string* checkpoint) {
    CLI::App app("commands", "prog");
    app.require_subcommand(0, 1);
    CLI::App* run = app.add_subcommand("run", "runs it");
    add_string(*run, "--checkpoint PATH", checkpoint, "the checkpoint")->required();
    app.add_subcommand("check", "checks it");
    return parse(app, args);
  };
  std::string checkpoint;
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{}, {"help"}, {"--help"}}) {
    absl::StatusOr<std::string> help = parse_commands(args, &checkpoint);
    ASSERT_TRUE(help.ok()) << help.status();
    EXPECT_NE(help->find("runs it"), std::string::npos) << *help;
  }
  absl::StatusOr<std::string> help = parse_commands({"run", "--help"}, &checkpoint);
  ASSERT_TRUE(help.ok()) << help.status();
  EXPECT_NE(help->find("--checkpoint PATH REQUIRED"), std::string::npos) << *help;
  help = parse_commands({"run", "--checkpoint", "c"}, &checkpoint);
  ASSERT_TRUE(help.ok()) << help.status();
  EXPECT_TRUE(help->empty());
  EXPECT_EQ(checkpoint, "c");
  for (const auto& [args, expect] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"run"}, "--checkpoint is required"},
           {{"run", "--chekpoint", "c"}, "not expected: c --chekpoint"},
           {{"run", "--checkpoint", "c", "check"}, "not expected: check"},
           {{"fly"}, "not expected: fly"}}) {
    absl::StatusOr<std::string> r = parse_commands(args, &checkpoint);
    ASSERT_FALSE(r.ok()) << args[0];
    EXPECT_NE(std::string(r.status().message()).find(expect), std::string::npos)
        << "want '" << expect << "' in: " << r.status().message();
  }
}

TEST(Flags, ParseMainPrintsHelpOrTheErrorAndSaysWhetherToRun) {
  auto run = [](std::vector<std::string> args) {
    Values v;
    CLI::App app("test program", "prog");
    add_all(app, v);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    std::optional<int> exit = parse_main(app, static_cast<int>(argv.size()), argv.data(), 3);
    const std::string out = testing::internal::GetCapturedStdout();
    const std::string err = testing::internal::GetCapturedStderr();
    return std::tuple(exit, out, err);
  };
  auto [exit, out, err] = run({"prog", "--steps", "3"});
  EXPECT_FALSE(exit.has_value());
  std::tie(exit, out, err) = run({"prog", "--help"});
  EXPECT_EQ(exit, 0);
  EXPECT_NE(out.find("--steps"), std::string::npos) << out;
  std::tie(exit, out, err) = run({"prog", "--steps", "0"});
  EXPECT_EQ(exit, 3);
  EXPECT_NE(err.find("prog: error: --steps: bad value '0'"), std::string::npos) << err;
  std::tie(exit, out, err) = run({"prog", "--frobnicate"});
  EXPECT_EQ(exit, 3);
  EXPECT_NE(err.find("--frobnicate"), std::string::npos) << err;
}

}  // namespace
}  // namespace lms::flags
