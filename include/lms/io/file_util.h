// File helpers of lms::io (checkpoints and PNG writing use them, and so can
// a program): whole-file reads, atomic writes, and a check that a path will
// be writable before a long run. Sizes are in bytes. Every error is an
// absl::Status whose message names the path and the reason; nothing throws.
//
//   LMS_RETURN_IF_ERROR(lms::io::check_writable("out/run1/vdsr.ckpt"));  // before training
//   LMS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, lms::io::read_file("in.bin"));
//   LMS_RETURN_IF_ERROR(lms::io::write_file_atomically("out.bin", bytes.data(), bytes.size()));
//
// The profiler's lms::write_file_atomically (lms/profiler/atomic_file.h)
// writes through the same writer, so its reports get the same guarantees.
//
// Note [Atomic write]: bytes go to "<path>.tmp.<pid>.XXXXXX" (the writer's
// process id, then mkstemp's random suffix) in the destination's own
// directory (so rename(2) stays within one filesystem and is atomic), the
// file is fsync'd, renamed over `path`, and the directory is fsync'd. If
// anything fails the temporary file is removed and the previous contents of
// `path` are untouched, so a crash or a full disk never loses an existing
// checkpoint or image.
//
// Note [Stale temporary files]: a writer killed mid-write (SIGKILL, power
// loss) cannot remove its temporary file. Every write of `path` therefore
// first removes the "<path>.tmp.<pid>.XXXXXX" files whose process no
// longer exists (kill(pid, 0) answers ESRCH). Files of a live process are
// kept, so two programs writing the same path never delete each other's
// file; a pid reused by an unrelated live process only delays the clean-up.
// Only names of this exact form are touched, never `path` itself or other
// files; "<path>.tmp.XXXXXX" files of the older naming (no pid) are left
// alone, as a user file such as "<path>.tmp.backup" has the same shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lms::io {

// Maps an errno value to the closest absl::StatusCode (ENOENT: NotFound,
// EACCES: PermissionDenied, ENOSPC: ResourceExhausted, EISDIR:
// InvalidArgument, ..., otherwise Internal), with "<what>: <strerror>".
absl::Status errno_status(int err, const std::string& what);

// Reads the whole file. Errors: errno-derived (NotFound, PermissionDenied, ...),
// InvalidArgument when `path` is a directory.
absl::StatusOr<std::vector<uint8_t>> read_file(const std::string& path);

// Writes the `size` bytes at `bytes` to `path` as described in Note [Atomic
// write], after removing stale temporary files (Note [Stale temporary
// files]). Errors: InvalidArgument when `path` names no file (empty or
// ending in '/'); errno-derived codes (NotFound for a missing folder,
// PermissionDenied, ResourceExhausted for a full disk, ...) naming the path;
// `path` keeps its previous contents then.
absl::Status write_file_atomically(const std::string& path, const uint8_t* bytes, size_t size);

// Removes the stale temporary files of `path` (Note [Stale temporary
// files]); returns how many were removed. Best effort: an unreadable folder
// removes nothing.
int remove_stale_temp_files(const std::string& path);

// Checks, before a long computation, that write_file_atomically(path, ...)
// will be able to write: creates the parent folders of `path` if missing,
// then creates and removes a probe temporary file there. Errors name the
// path and the reason: InvalidArgument when `path` names no file or is a
// folder; errno-derived codes (NotFound, PermissionDenied, ...) with the
// errno text otherwise.
absl::Status check_writable(const std::string& path);

}  // namespace lms::io
