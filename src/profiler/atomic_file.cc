#include "lms/profiler/atomic_file.h"

#include "common/atomic_file.h"

namespace lms {

// The profiler's contract predates the shared writer: an empty path is
// InvalidArgument and every other failure Internal, whatever errno said.
absl::Status write_file_atomically(const std::string& path, std::string_view contents) {
  if (path.empty()) return absl::InvalidArgumentError("output path is empty; give a file name");
  absl::Status status = atomic_write_file(path, contents);
  if (status.ok()) return status;
  return absl::InternalError(status.message());
}

}  // namespace lms
