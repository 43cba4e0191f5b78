// Debian's Abseil 20220623 is built with ABSL_OPTION_USE_STD_STRING_VIEW 0,
// so absl::string_view is its own type: absl::StrCat, StrSplit and friends do
// not accept std::string_view, and Status::message() is an absl::string_view.
// lms APIs use std::string_view; these helpers cross the boundary.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace lms {

inline absl::string_view to_absl(std::string_view s) { return {s.data(), s.size()}; }
inline std::string_view to_std(absl::string_view s) { return {s.data(), s.size()}; }

}  // namespace lms
