// Parsing and printing of quantities with units, as used in lms.toml and on
// the command line.
//
//   LMS_ASSIGN_OR_RETURN(uint64_t cap, lms::parse_bytes("256MiB"));   // 268435456
//   LMS_ASSIGN_OR_RETURN(double bw, lms::parse_bandwidth("12GB/s"));  // 12e9 bytes/s
//   LMS_ASSIGN_OR_RETURN(double t, lms::parse_duration("5us"));       // 5e-6 s
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace lms {

// Bytes: a non-negative decimal number with an optional unit B, KB, MB, GB,
// TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024). Fractions are
// allowed ("1.5GiB") and rounded down to whole bytes. InvalidArgument
// otherwise, also for hexadecimal ("0x10MiB"), "inf" and "nan"; the same
// for the numbers of parse_bandwidth and parse_duration.
absl::StatusOr<uint64_t> parse_bytes(std::string_view text);

// Bandwidth in bytes/s: a positive number with unit B/s, KB/s, MB/s, GB/s
// (powers of 1000) or KiB/s, MiB/s, GiB/s (powers of 1024).
absl::StatusOr<double> parse_bandwidth(std::string_view text);

// Duration in seconds: a non-negative number with unit s, ms, us or ns.
absl::StatusOr<double> parse_duration(std::string_view text);

// "256.0 MiB", "1.50 GiB", "512 B": binary units, for reports and messages.
std::string format_bytes(uint64_t bytes);

}  // namespace lms
