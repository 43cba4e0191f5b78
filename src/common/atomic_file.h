#pragma once

// The one atomic file writer of lms: checkpoints, images and NIfTI volumes
// (lms::io) and the profiler's reports all write through it, so every output
// file gets the same guarantees. The rule is Note [Atomic write]
// and Note [Stale temporary files]: a temporary file
// "<path>.tmp.<pid>.XXXXXX" next to `path`, fsync'd, renamed over `path`,
// then the directory fsync'd; stale temporary files of dead writers removed
// first.
//
//   LMS_RETURN_IF_ERROR(lms::atomic_write_file("out/run1/trace.json", text));

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace lms {

// Writes `contents` (any bytes) to `path` atomically and durably. Errors:
// InvalidArgument when `path` names no file (empty or ending in '/');
// otherwise errno_status() codes naming the path (NotFound for a missing
// folder, PermissionDenied, ResourceExhausted for a full disk, ...). On any
// error the temporary file is removed and `path` keeps its previous contents.
absl::Status atomic_write_file(const std::string& path, std::string_view contents);

// The same, for a library that writes a file only by its name (niftilib,
// which picks gzip by the name): the temporary name ends in `suffix`, and
// `fill(tmp)` writes the temporary file (created empty, mode 0644); its
// error is returned as it is, after the temporary file is removed.
absl::Status atomic_write_file_by_name(
    const std::string& path, std::string_view suffix,
    const std::function<absl::Status(const std::string& tmp)>& fill);

// "<path>.tmp.<pid>.": what this process's temporary files for `path` start
// with (mkstemp's six random characters follow).
std::string atomic_temp_prefix(const std::string& path);

// Removes the temporary files of `path` left by writers that no longer run;
// returns how many. Best effort: an unreadable folder removes nothing.
int remove_stale_temp_files(const std::string& path);

// The closest absl::StatusCode to errno value `err` (ENOENT: NotFound, EACCES:
// PermissionDenied, ENOSPC: ResourceExhausted, EISDIR: InvalidArgument, ...,
// otherwise Internal), with the message "<what>: <strerror(err)>".
absl::Status errno_status(int err, const std::string& what);

}  // namespace lms
