// Writes a whole file atomically and durably, through the writer lms::io uses
// (Note [Atomic write] and Note [Stale temporary files]): the contents go to
// a temporary file next to `path`, which is fsync'd and renamed over `path`,
// then the directory is fsync'd. On any failure the temporary file is removed
// and `path` is left as it was.
//
//   LMS_RETURN_IF_ERROR(lms::write_file_atomically("trace.json", text));
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace lms {

// Errors: InvalidArgument for an empty path; Internal (naming the path and the
// OS error) when the temporary file cannot be created, written or renamed.
absl::Status write_file_atomically(const std::string& path, std::string_view contents);

// The start of the temporary names used for `path` by this process (for
// tests that check nothing is left behind): "<path>.tmp.<pid>.", followed by
// six random characters.
std::string atomic_temp_prefix(const std::string& path);

}  // namespace lms
