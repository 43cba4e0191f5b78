// The command-line flags of the example programs (vdsr, unet3d): a small hand
// parser with no global flag registry, so tests parse in-process. Flags are
// `--name value` or `--name=value`; booleans take no value.
//
//   int64_t steps = 100;
//   std::vector<examples::Flag> flags = {{"steps", &steps, 1}};
//   LMS_RETURN_IF_ERROR(examples::parse_flags("unet3d", "train", flags, args));
//
// Every error is InvalidArgument naming the flag, the value and what is
// allowed.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"

namespace lms::examples {

struct Bytes {  // a byte count such as 256MiB or 2GB (lms/units.h), > 0
  uint64_t* value;
};
struct StringList {  // a repeatable flag: each occurrence appends
  std::vector<std::string>* value;
};
using FlagTarget =
    std::variant<int*, int64_t*, uint64_t*, double*, bool*, std::string*, Bytes, StringList>;

struct Flag {
  std::string_view name;  // without "--"
  FlagTarget target;
  int64_t min = 0;  // integers: smallest allowed value (doubles: always >= 0)
  int64_t max = std::numeric_limits<int64_t>::max();          // integers: largest allowed value
  double max_real = std::numeric_limits<double>::infinity();  // doubles: largest allowed
};

// The most compute threads a --threads flag takes (as lms-bench's).
inline constexpr int64_t kMaxThreads = 1024;

// InvalidArgument "--flag: bad value 'value' (allowed)".
absl::Status bad_value(std::string_view flag, std::string_view value, std::string_view allowed);

// Parses args[1..] (args[0] is the command) into `flags`. InvalidArgument
// naming `program` and `command` for an argument that is not a flag or an
// unknown flag, and naming the flag for a missing or bad value.
absl::Status parse_flags(std::string_view program, std::string_view command,
                         const std::vector<Flag>& flags, const std::vector<std::string>& args);

}  // namespace lms::examples
