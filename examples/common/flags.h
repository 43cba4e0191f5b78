// Command-line flags of the lms programs (the examples, lms-bench and the
// benchmarks) on CLI11: every program gets --help and the same errors, and
// tests parse in-process (a CLI::App per parse, no global registry). Flags
// are `--name value` or `--name=value`; switches take no value; a flag given
// twice keeps its last value, except the repeatable ones (add_strings).
//
//   CLI::App app("vdsr: VDSR x2 super-resolution", "vdsr");
//   CLI::App* train = app.add_subcommand("train", "train on <data>/train");
//   flags::add_int(*train, "--steps N", &t.steps, "total training steps", {.min = 1});
//   flags::add_bytes(*train, "--capacity BYTES", &t.capacity_bytes, "device memory");
//   LMS_ASSIGN_OR_RETURN(std::string help, flags::parse(app, args));
//   if (!help.empty()) ...  // --help (or `help`): print it and exit 0
//
// A flag's name may be followed by the name of its value ("--data DIR"), as
// --help shows it. Every rejected value is the error "--flag: bad value
// 'VALUE' (what is allowed)"; an unknown flag, a missing value, a stray
// argument or a missing required flag is CLI11's message, which names it.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lms::flags {

// The most compute threads a --threads flag takes.
inline constexpr int64_t kMaxThreads = 1024;

struct IntRange {
  int64_t min = 0;
  int64_t max = std::numeric_limits<int64_t>::max();
};

// A closed or open interval of finite numbers; the default is [0, inf).
struct RealRange {
  double min = 0;
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;  // (min, ... instead of [min, ...
  bool max_open = false;  // ..., max) instead of ..., max]
};

// "bad value 'VALUE' (ALLOWED)": what a setter returns for a rejected value
// (the flag is put in front of it).
std::string bad_value(std::string_view value, std::string_view allowed);
// InvalidArgument "--flag: bad value 'VALUE' (ALLOWED)", for a check made
// after parsing (a value that is only wrong with another flag's).
absl::Status bad_flag(std::string_view flag, std::string_view value, std::string_view allowed);

// "an integer >= 1", "an integer from 0 to 1024"; "a number in (0, 1)".
std::string describe(const IntRange& range);
std::string describe(const RealRange& range);

// The integer or number `text` within `range`; InvalidArgument
// bad_value(text, describe(range)) otherwise.
absl::StatusOr<int64_t> parse_int(std::string_view text, const IntRange& range);
absl::StatusOr<double> parse_real(std::string_view text, const RealRange& range);

// A flag taking one value, handed to `set` at the end of parsing; a failed
// Status is the error "--flag: <its message>". `names` is CLI11's ("--out",
// "-o,--out") with an optional value name after a space ("--out FILE"). No
// default is shown unless set with ->default_str().
CLI::Option* add_value(CLI::App& app, std::string_view names, std::string help,
                       std::function<absl::Status(const std::string&)> set);

// Integers within `range` (also within the target's type).
CLI::Option* add_int(CLI::App& app, std::string_view names, int* target, std::string help,
                     IntRange range = {});
CLI::Option* add_int(CLI::App& app, std::string_view names, int64_t* target, std::string help,
                     IntRange range = {});
CLI::Option* add_int(CLI::App& app, std::string_view names, uint64_t* target, std::string help,
                     IntRange range = {});
// Finite numbers within `range`.
CLI::Option* add_real(CLI::App& app, std::string_view names, double* target, std::string help,
                      RealRange range = {});
// A positive byte size: 256MiB, 2GB, 4096 (lms/units.h parse_bytes).
CLI::Option* add_bytes(CLI::App& app, std::string_view names, uint64_t* target, std::string help);
// A bandwidth: 12GB/s, 100MB/s (lms/units.h parse_bandwidth).
CLI::Option* add_bandwidth(CLI::App& app, std::string_view names, double* target, std::string help);
// A non-empty string.
CLI::Option* add_string(CLI::App& app, std::string_view names, std::string* target,
                        std::string help);
// A repeatable flag: each occurrence appends its (non-empty) value.
CLI::Option* add_strings(CLI::App& app, std::string_view names, std::vector<std::string>* target,
                         std::string help);
// One of `choices`.
CLI::Option* add_choice(CLI::App& app, std::string_view names, std::string* target,
                        std::string help, std::vector<std::string> choices);
// Comma-separated lists ("4,8,16"; "1.5,2,4"; "12GB/s,1GB/s"), each item
// within `range`; the list replaces the target's default.
CLI::Option* add_int_list(CLI::App& app, std::string_view names, std::vector<int64_t>* target,
                          std::string help, IntRange range = {});
CLI::Option* add_real_list(CLI::App& app, std::string_view names, std::vector<double>* target,
                           std::string help, RealRange range = {});
CLI::Option* add_bandwidth_list(CLI::App& app, std::string_view names, std::vector<double>* target,
                                std::string help);
// A switch: sets *target = value when given ("--no-flips", "--no-search"
// with value false); "--name=VALUE" is refused.
CLI::Option* add_switch(CLI::App& app, std::string_view names, bool* target, std::string help,
                        bool value = true);

// Parses `args` (without the program name) into the flags of `app` and its
// subcommands. Returns the help text when --help or -h was given (or, for a
// program with subcommands, the word `help`) and an empty string otherwise.
// InvalidArgument with the message of any parse error.
absl::StatusOr<std::string> parse(CLI::App& app, const std::vector<std::string>& args);

// parse() for a main(): prints the help to stdout and returns 0, or prints
// "<program>: error: <message>" to stderr and returns `error_exit`;
// std::nullopt when the program should run.
std::optional<int> parse_main(CLI::App& app, int argc, char** argv, int error_exit);

}  // namespace lms::flags
