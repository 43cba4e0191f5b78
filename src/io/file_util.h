// File helpers shared by the io layer: whole-file reads and atomic writes.
//
// Note [Atomic write]: bytes go to "<path>.tmp.XXXXXX" in the destination's
// own directory (so rename(2) stays within one filesystem and is atomic),
// the file is fsync'd, renamed over `path`, and the directory is fsync'd.
// If anything fails the temporary file is removed and the previous contents
// of `path` are untouched, so a crash or a full disk never loses an existing
// checkpoint or image.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lms::io {

// Maps an errno value to the closest absl::StatusCode, with "<what>: <strerror>".
absl::Status errno_status(int err, const std::string& what);

// Reads the whole file. Errors: errno-derived (NotFound, PermissionDenied, ...),
// InvalidArgument when `path` is a directory.
absl::StatusOr<std::vector<uint8_t>> read_file(const std::string& path);

// Writes `bytes` to `path` as described in Note [Atomic write].
absl::Status write_file_atomically(const std::string& path, const uint8_t* bytes, size_t size);

}  // namespace lms::io
