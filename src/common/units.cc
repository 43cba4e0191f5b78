#include "lms/units.h"

#include <array>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  if (used == 0 || !std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad ", to_absl(what), " '", to_absl(text),
                     "': expected a non-negative number followed by a unit"));
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
    if (suffix == u.suffix) return value * u.scale;
  }
  return absl::InvalidArgumentError(absl::StrCat("bad ", to_absl(what), " '", to_absl(text),
                                                 "': unknown unit '", to_absl(suffix),
                                                 "', allowed: ", to_absl(allowed)));
}

}  // namespace

absl::StatusOr<uint64_t> parse_bytes(std::string_view text) {
  static constexpr std::array<Unit, 9> kUnits = {{{"B", 1},
                                                  {"KB", 1e3},
                                                  {"MB", 1e6},
                                                  {"GB", 1e9},
                                                  {"TB", 1e12},
                                                  {"KiB", 1024.0},
                                                  {"MiB", 1048576.0},
                                                  {"GiB", 1073741824.0},
                                                  {"TiB", 1099511627776.0}}};
  auto v =
      parse_with_units("byte size", text, kUnits, "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB", false);
  if (!v.ok()) return v.status();
  if (*v >= 1.8e19) {
    return absl::InvalidArgumentError(absl::StrCat("byte size '", to_absl(text), "' is too large"));
  }
  return static_cast<uint64_t>(std::floor(*v));
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
