#include "lms/units.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lms/checked.h"
#include "lms/status.h"
#include "lms/strings.h"

namespace lms {
namespace {

struct Unit {
  std::string_view suffix;
  double scale;
};

// Splits "12.5GiB" into 12.5 and "GiB"; fails on an empty or non-numeric head.
absl::StatusOr<std::pair<double, std::string_view>> split_number(std::string_view what,
                                                                 std::string_view text) {
  std::string_view t = to_std(absl::StripAsciiWhitespace(to_absl(text)));
  std::string head(t);
  char* end = nullptr;
  double value = std::strtod(head.c_str(), &end);
  size_t used = static_cast<size_t>(end - head.c_str());
  // Decimal only: strtod also reads hexadecimal ("0x10" is 16), "inf" and
  // "nan", none of which the units document.
  const bool decimal =
      t.substr(0, used).find_first_not_of("0123456789.eE+-") == std::string_view::npos;
  if (used == 0 || !decimal || !std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad ", to_absl(what), " '", to_absl(text),
                     "': expected a non-negative decimal number followed by a unit"));
  }
  return std::make_pair(value, to_std(absl::StripAsciiWhitespace(to_absl(t.substr(used)))));
}

template <size_t N>
absl::StatusOr<double> parse_with_units(std::string_view what, std::string_view text,
                                        const std::array<Unit, N>& units, std::string_view allowed,
                                        bool unit_required) {
  auto split = split_number(what, text);
  if (!split.ok()) return split.status();
  auto [value, suffix] = *split;
  if (suffix.empty() && !unit_required) return value;
  for (const Unit& u : units) {
    if (suffix != u.suffix) continue;
    if (!std::isfinite(value * u.scale)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad ", to_absl(what), " '", to_absl(text), "': too large"));
    }
    return value * u.scale;
  }
  return absl::InvalidArgumentError(absl::StrCat("bad ", to_absl(what), " '", to_absl(text),
                                                 "': unknown unit '", to_absl(suffix),
                                                 "', allowed: ", to_absl(allowed)));
}

}  // namespace

absl::StatusOr<uint64_t> parse_bytes(std::string_view text) {
  static constexpr std::array<std::pair<std::string_view, uint64_t>, 10> kUnits = {{
      {"", 1},
      {"B", 1},
      {"KB", 1000},
      {"MB", 1000 * 1000},
      {"GB", 1000 * 1000 * 1000},
      {"TB", 1000ull * 1000 * 1000 * 1000},
      {"KiB", 1ull << 10},
      {"MiB", 1ull << 20},
      {"GiB", 1ull << 30},
      {"TiB", 1ull << 40},
  }};
  auto split = split_number("byte size", text);
  if (!split.ok()) return split.status();
  const auto [value, suffix] = *split;
  const auto* unit =
      std::find_if(kUnits.begin(), kUnits.end(), [&](const auto& u) { return u.first == suffix; });
  if (unit == kUnits.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad byte size '", to_absl(text), "': unknown unit '", to_absl(suffix),
                     "', allowed: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"));
  }
  auto too_large = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("byte size '", to_absl(text), "' is too large: at most 2^63 - 1 bytes"));
  };
  // A whole number is computed in integers, exactly: a double would round
  // 2^63 - 1 up to 2^63. A fraction or exponent ("1.5GiB", "1e3") goes
  // through the double and is rounded down.
  const absl::string_view trimmed = absl::StripAsciiWhitespace(to_absl(text));
  const absl::string_view number =
      absl::StripTrailingAsciiWhitespace(trimmed.substr(0, trimmed.size() - suffix.size()));
  uint64_t whole = 0;
  if (absl::c_all_of(number, absl::ascii_isdigit) && absl::SimpleAtoi(number, &whole)) {
    const std::optional<uint64_t> bytes = checked_mul(whole, unit->second);
    if (!bytes || *bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return too_large();
    }
    return *bytes;
  }
  const double bytes = value * static_cast<double>(unit->second);
  if (!(bytes < 9223372036854775808.0)) return too_large();  // 2^63, exact as a double
  return static_cast<uint64_t>(std::floor(bytes));
}

absl::StatusOr<double> parse_bandwidth(std::string_view text) {
  static constexpr std::array<Unit, 7> kUnits = {{{"B/s", 1},
                                                  {"KB/s", 1e3},
                                                  {"MB/s", 1e6},
                                                  {"GB/s", 1e9},
                                                  {"KiB/s", 1024.0},
                                                  {"MiB/s", 1048576.0},
                                                  {"GiB/s", 1073741824.0}}};
  auto v = parse_with_units("bandwidth", text, kUnits, "B/s, KB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s",
                            true);
  if (!v.ok()) return v.status();
  if (*v <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bandwidth '", to_absl(text), "' must be positive"));
  }
  return *v;
}

absl::StatusOr<double> parse_duration(std::string_view text) {
  static constexpr std::array<Unit, 4> kUnits = {
      {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}}};
  return parse_with_units("duration", text, kUnits, "s, ms, us, ns", true);
}

std::string format_bytes(uint64_t bytes) {
  static constexpr std::array<std::string_view, 5> kNames = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t i = 0;
  while (v >= 1024.0 && i + 1 < kNames.size()) {
    v /= 1024.0;
    ++i;
  }
  if (i == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.2f %s", v, kNames[i]);
}

}  // namespace lms
