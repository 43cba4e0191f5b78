#include "flags.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <utility>

#include "fmt/format.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/units.h"

namespace lms::flags {
namespace {

constexpr char kBytesAllowed[] = "a positive size such as 256MiB or 2GB";
constexpr char kBandwidthUnits[] = "in B/s, KB/s, MB/s, GB/s, KiB/s, MiB/s or GiB/s";

// "--out FILE" -> {"--out", "FILE"}.
std::pair<std::string, std::string> split_names(std::string_view names) {
  const size_t space = names.find(' ');
  if (space == std::string_view::npos) return {std::string(names), ""};
  return {std::string(names.substr(0, space)), std::string(names.substr(space + 1))};
}

// "--threads" -> "--threads N"; names with a value name stay.
std::string with_value_name(std::string_view names, std::string_view value_name) {
  if (names.find(' ') != std::string_view::npos) return std::string(names);
  return fmt::format("{} {}", names, value_name);
}

std::string number_text(double v) { return fmt::format("{}", v); }

// 1073741824 -> "1GiB", 1000 -> "1000".
std::string bytes_text(uint64_t bytes) {
  for (const auto& [unit, size] :
       {std::pair{"TiB", uint64_t{1} << 40}, std::pair{"GiB", uint64_t{1} << 30},
        std::pair{"MiB", uint64_t{1} << 20}, std::pair{"KiB", uint64_t{1} << 10}}) {
    if (bytes != 0 && bytes % size == 0) return fmt::format("{}{}", bytes / size, unit);
  }
  return fmt::format("{}", bytes);
}

// Each comma-separated item of `text` through `item`; the whole list is the
// bad value when one item is bad.
template <typename T>
absl::StatusOr<std::vector<T>> parse_list(
    std::string_view text, std::string_view allowed,
    const std::function<absl::StatusOr<T>(std::string_view)>& item) {
  std::vector<T> out;
  for (size_t begin = 0; begin <= text.size();) {
    const size_t end = std::min(text.find(',', begin), text.size());
    absl::StatusOr<T> v = item(text.substr(begin, end - begin));
    if (!v.ok()) return absl::InvalidArgumentError(bad_value(text, allowed));
    out.push_back(*v);
    begin = end + 1;
  }
  return out;
}

template <typename T>
CLI::Option* add_int_of(CLI::App& app, std::string_view names, T* target, std::string help,
                        IntRange range) {
  CLI::Option* o = add_value(app, with_value_name(names, "N"), std::move(help),
                             [=](const std::string& v) -> absl::Status {
                               LMS_ASSIGN_OR_RETURN(int64_t n, parse_int(v, range));
                               // The range described, also within the target's type.
                               if (!std::in_range<T>(n)) {
                                 return absl::InvalidArgumentError(bad_value(v, describe(range)));
                               }
                               *target = static_cast<T>(n);
                               return absl::OkStatus();
                             });
  return o->default_str(fmt::format("{}", *target));
}

template <typename T>
std::string list_text(const std::vector<T>& values) {
  return fmt::format("{}", fmt::join(values, ","));
}

absl::Status check_non_empty(const std::string& v) {
  if (!v.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(bad_value(v, "a non-empty string"));
}

// A comma-separated list flag; `allowed` says what when an item is bad.
template <typename T>
CLI::Option* add_list(CLI::App& app, const std::string& names, std::vector<T>* target,
                      std::string help, const std::string& allowed,
                      std::function<absl::StatusOr<T>(std::string_view)> item) {
  return add_value(app, names, std::move(help),
                   [=](const std::string& v) -> absl::Status {
                     LMS_ASSIGN_OR_RETURN(*target, parse_list<T>(v, allowed, item));
                     return absl::OkStatus();
                   })
      ->default_str(list_text(*target));
}

// ">= 1", "from 0 to 1024"; "> 0", "in (0, 1]".
std::string int_bounds(const IntRange& r) {
  if (r.max == std::numeric_limits<int64_t>::max()) return fmt::format(">= {}", r.min);
  return fmt::format("from {} to {}", r.min, r.max);
}

std::string real_bounds(const RealRange& r) {
  if (std::isinf(r.max)) return fmt::format("{} {}", r.min_open ? ">" : ">=", number_text(r.min));
  return fmt::format("in {}{}, {}{}", r.min_open ? "(" : "[", number_text(r.min),
                     number_text(r.max), r.max_open ? ")" : "]");
}

// The message of a parse error, with a stray argument before a missing
// required flag: CLI11 checks requirements first, so `eval --chekpoint x`
// would say "--checkpoint is required" and hide the typo.
std::string message_of(const CLI::ParseError& e, const CLI::App& app) {
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
    const std::vector<std::string> stray = app.remaining(true);
    if (!stray.empty()) return std::string(CLI::ExtrasError(stray).what());
  }
  return e.what();
}

}  // namespace

std::string bad_value(std::string_view value, std::string_view allowed) {
  return fmt::format("bad value '{}' ({})", value, allowed);
}

absl::Status bad_flag(std::string_view flag, std::string_view value, std::string_view allowed) {
  return absl::InvalidArgumentError(fmt::format("{}: {}", flag, bad_value(value, allowed)));
}

std::string describe(const IntRange& r) { return "an integer " + int_bounds(r); }

std::string describe(const RealRange& r) { return "a number " + real_bounds(r); }

absl::StatusOr<int64_t> parse_int(std::string_view text, const IntRange& range) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < range.min || v > range.max) {
    return absl::InvalidArgumentError(bad_value(text, describe(range)));
  }
  return v;
}

absl::StatusOr<double> parse_real(std::string_view text, const RealRange& range) {
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  // Decimal only: strtod also reads hexadecimal, "inf" and "nan".
  const bool decimal = s.find_first_not_of("0123456789.eE+-") == std::string::npos;
  const bool in_range = (range.min_open ? v > range.min : v >= range.min) &&
                        (range.max_open ? v < range.max : v <= range.max);
  if (s.empty() || end != s.c_str() + s.size() || !decimal || !std::isfinite(v) || !in_range) {
    return absl::InvalidArgumentError(bad_value(text, describe(range)));
  }
  return v;
}

CLI::Option* add_value(CLI::App& app, std::string_view names, std::string help,
                       std::function<absl::Status(const std::string&)> set) {
  const auto [name, value_name] = split_names(names);
  CLI::Option* o = app.add_option(
      name,
      [set = std::move(set), flag = name](const CLI::results_t& values) {
        for (const std::string& v : values) {
          if (absl::Status s = set(v); !s.ok()) {
            throw CLI::ValidationError(flag, std::string(to_std(s.message())));
          }
        }
        return true;
      },
      std::move(help));
  return o->type_name(value_name.empty() ? "VALUE" : value_name)
      ->type_size(1)
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

CLI::Option* add_int(CLI::App& app, std::string_view names, int* target, std::string help,
                     IntRange range) {
  return add_int_of(app, names, target, std::move(help), range);
}

CLI::Option* add_int(CLI::App& app, std::string_view names, int64_t* target, std::string help,
                     IntRange range) {
  return add_int_of(app, names, target, std::move(help), range);
}

CLI::Option* add_int(CLI::App& app, std::string_view names, uint64_t* target, std::string help,
                     IntRange range) {
  return add_int_of(app, names, target, std::move(help), range);
}

CLI::Option* add_real(CLI::App& app, std::string_view names, double* target, std::string help,
                      RealRange range) {
  return add_value(app, with_value_name(names, "X"), std::move(help),
                   [=](const std::string& v) {
                     LMS_ASSIGN_OR_RETURN(*target, parse_real(v, range));
                     return absl::OkStatus();
                   })
      ->default_str(number_text(*target));
}

CLI::Option* add_bytes(CLI::App& app, std::string_view names, uint64_t* target, std::string help) {
  return add_value(app, with_value_name(names, "BYTES"), std::move(help),
                   [=](const std::string& v) -> absl::Status {
                     absl::StatusOr<uint64_t> n = parse_bytes(v);
                     if (!n.ok() || *n == 0) {
                       return absl::InvalidArgumentError(bad_value(v, kBytesAllowed));
                     }
                     *target = *n;
                     return absl::OkStatus();
                   })
      ->default_str(*target == 0 ? "" : bytes_text(*target));
}

CLI::Option* add_bandwidth(CLI::App& app, std::string_view names, double* target,
                           std::string help) {
  return add_value(app, with_value_name(names, "BW"), std::move(help),
                   [=](const std::string& v) -> absl::Status {
                     absl::StatusOr<double> bw = parse_bandwidth(v);
                     if (!bw.ok())
                       return absl::InvalidArgumentError(bad_value(
                           v, fmt::format("a bandwidth > 0 such as 12GB/s, {}", kBandwidthUnits)));
                     *target = *bw;
                     return absl::OkStatus();
                   });
}

CLI::Option* add_string(CLI::App& app, std::string_view names, std::string* target,
                        std::string help) {
  return add_value(app, with_value_name(names, "TEXT"), std::move(help),
                   [=](const std::string& v) -> absl::Status {
                     LMS_RETURN_IF_ERROR(check_non_empty(v));
                     *target = v;
                     return absl::OkStatus();
                   })
      ->default_str(*target);
}

CLI::Option* add_strings(CLI::App& app, std::string_view names, std::vector<std::string>* target,
                         std::string help) {
  return add_value(app, with_value_name(names, "TEXT"), std::move(help),
                   [=](const std::string& v) -> absl::Status {
                     LMS_RETURN_IF_ERROR(check_non_empty(v));
                     target->push_back(v);
                     return absl::OkStatus();
                   })
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

CLI::Option* add_choice(CLI::App& app, std::string_view names, std::string* target,
                        std::string help, std::vector<std::string> choices) {
  const std::string allowed = fmt::format("one of {}", fmt::join(choices, ", "));
  return add_value(app, with_value_name(names, fmt::format("{}", fmt::join(choices, "|"))),
                   std::move(help),
                   [=](const std::string& v) -> absl::Status {
                     if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
                       return absl::InvalidArgumentError(bad_value(v, allowed));
                     }
                     *target = v;
                     return absl::OkStatus();
                   })
      ->default_str(*target);
}

CLI::Option* add_int_list(CLI::App& app, std::string_view names, std::vector<int64_t>* target,
                          std::string help, IntRange range) {
  return add_list<int64_t>(app, with_value_name(names, "N[,N...]"), target, std::move(help),
                           "a comma-separated list of integers " + int_bounds(range),
                           [range](std::string_view item) { return parse_int(item, range); });
}

CLI::Option* add_real_list(CLI::App& app, std::string_view names, std::vector<double>* target,
                           std::string help, RealRange range) {
  return add_list<double>(app, with_value_name(names, "X[,X...]"), target, std::move(help),
                          "a comma-separated list of numbers " + real_bounds(range),
                          [range](std::string_view item) { return parse_real(item, range); });
}

CLI::Option* add_bandwidth_list(CLI::App& app, std::string_view names, std::vector<double>* target,
                                std::string help) {
  return add_list<double>(
      app, with_value_name(names, "BW[,BW...]"), target, std::move(help),
      fmt::format("a comma-separated list of bandwidths > 0 such as 12GB/s,50MB/s, {}",
                  kBandwidthUnits),
      [](std::string_view item) { return parse_bandwidth(item); });
}

CLI::Option* add_switch(CLI::App& app, std::string_view names, bool* target, std::string help,
                        bool value) {
  const std::string name(names);
  return app
      .add_flag_callback(
          name, [=] { *target = value; }, std::move(help))
      ->check(
          [](const std::string& v) {
            // A switch given alone has the result "true"; "--name=VALUE" has VALUE.
            return v == "true" ? std::string() : bad_value(v, "a switch takes no value");
          },
          "", "switch");
}

absl::StatusOr<std::string> parse(CLI::App& app, const std::vector<std::string>& args) {
  // Commands have names; option groups (headings of --help) do not.
  const CLI::App& all = app;
  const std::function<bool(const CLI::App*)> command = [](const CLI::App* sub) {
    return !sub->get_name().empty();
  };
  const bool has_commands = !all.get_subcommands(command).empty();
  if (has_commands && !args.empty() && args[0] == "help") return app.help();
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them reversed
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return app.help();
  } catch (const CLI::CallForAllHelp&) {
    return app.help("", CLI::AppFormatMode::All);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(message_of(e, app));
  }
  // A program of commands run without one: its help.
  const std::vector<CLI::App*> given = app.get_subcommands();
  if (has_commands && std::none_of(given.begin(), given.end(), command)) return app.help();
  return std::string();
}

std::optional<int> parse_main(CLI::App& app, int argc, char** argv, int error_exit) {
  absl::StatusOr<std::string> help = parse(app, std::vector<std::string>(argv + 1, argv + argc));
  if (!help.ok()) {
    std::cerr << app.get_name() << ": error: " << to_std(help.status().message()) << "\n";
    return error_exit;
  }
  if (!help->empty()) {
    std::cout << *help;
    return 0;
  }
  return std::nullopt;
}

}  // namespace lms::flags
