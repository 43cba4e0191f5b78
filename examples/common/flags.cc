#include "flags.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

#include "fmt/format.h"
#include "lms/status.h"
#include "lms/units.h"

namespace lms::examples {
namespace {

template <typename T>
absl::Status parse_integer(const Flag& f, std::string_view v, T* out) {
  T parsed{};
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), parsed);
  const bool in_range =
      ec == std::errc() && end == v.data() + v.size() && static_cast<int64_t>(parsed) >= f.min &&
      (std::is_signed_v<T> || static_cast<uint64_t>(parsed) <=
                                  static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) &&
      static_cast<int64_t>(parsed) <= f.max;
  if (!in_range) {
    return bad_value(f.name, v,
                     f.max == std::numeric_limits<int64_t>::max()
                         ? fmt::format("an integer >= {}", f.min)
                         : fmt::format("an integer from {} to {}", f.min, f.max));
  }
  *out = parsed;
  return absl::OkStatus();
}

absl::Status parse_double(const Flag& f, std::string_view v, double* out) {
  std::string s(v);
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(d) || d < 0 || d > f.max_real) {
    return bad_value(f.name, v,
                     std::isinf(f.max_real) ? std::string("a finite number >= 0")
                                            : fmt::format("a number from 0 to {}", f.max_real));
  }
  *out = d;
  return absl::OkStatus();
}

absl::Status assign(const Flag& f, std::string_view v) {
  struct Visitor {
    const Flag& f;
    std::string_view v;
    absl::Status operator()(int* p) { return parse_integer(f, v, p); }
    absl::Status operator()(int64_t* p) { return parse_integer(f, v, p); }
    absl::Status operator()(uint64_t* p) { return parse_integer(f, v, p); }
    absl::Status operator()(double* p) { return parse_double(f, v, p); }
    absl::Status operator()(bool* p) {
      *p = true;
      return absl::OkStatus();
    }
    absl::Status operator()(std::string* p) {
      if (v.empty()) return bad_value(f.name, v, "a non-empty string");
      *p = std::string(v);
      return absl::OkStatus();
    }
    absl::Status operator()(Bytes b) {
      absl::StatusOr<uint64_t> n = parse_bytes(v);
      if (!n.ok() || *n == 0) return bad_value(f.name, v, "a positive size such as 256MiB or 2GB");
      *b.value = *n;
      return absl::OkStatus();
    }
    absl::Status operator()(StringList l) {
      if (v.empty()) return bad_value(f.name, v, "a non-empty string");
      l.value->emplace_back(v);
      return absl::OkStatus();
    }
  };
  return std::visit(Visitor{f, v}, f.target);
}

}  // namespace

absl::Status bad_value(std::string_view flag, std::string_view value, std::string_view allowed) {
  return absl::InvalidArgumentError(fmt::format("--{}: bad value '{}' ({})", flag, value, allowed));
}

absl::Status parse_flags(std::string_view program, std::string_view command,
                         const std::vector<Flag>& flags, const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a.substr(0, 2) != "--") {
      return absl::InvalidArgumentError(
          fmt::format("{} {}: unexpected argument '{}' (flags start with --; see '{} help')",
                      program, command, a, program));
    }
    a.remove_prefix(2);
    std::string_view name = a.substr(0, a.find('='));
    const Flag* flag = nullptr;
    for (const Flag& f : flags) flag = f.name == name ? &f : flag;
    if (flag == nullptr) {
      return absl::InvalidArgumentError(fmt::format("{} {}: unknown flag '--{}' (see '{} help')",
                                                    program, command, name, program));
    }
    bool boolean = std::holds_alternative<bool*>(flag->target);
    std::string_view value;
    if (a.find('=') != std::string_view::npos) {
      if (boolean) return bad_value(name, a.substr(name.size() + 1), "a switch takes no value");
      value = a.substr(name.size() + 1);
    } else if (!boolean) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(fmt::format("--{}: missing value", name));
      }
      value = args[++i];
    }
    LMS_RETURN_IF_ERROR(assign(*flag, value));
  }
  return absl::OkStatus();
}

}  // namespace lms::examples
