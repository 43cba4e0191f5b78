#include "io/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace lms::io {
namespace {

absl::StatusCode code_for_errno(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
    case ENOMEM:
      return absl::StatusCode::kResourceExhausted;
    case EISDIR:
    case ENAMETOOLONG:
    case EINVAL:
      return absl::StatusCode::kInvalidArgument;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    default:
      return absl::StatusCode::kInternal;
  }
}

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Writes all of `bytes` to `fd`, retrying short writes and EINTR.
absl::Status write_all(int fd, const uint8_t* bytes, size_t size, const std::string& what) {
  while (size > 0) {
    ssize_t n = ::write(fd, bytes, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, what);
    }
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Best effort: makes the rename durable. Failure here does not undo the
// rename, so it is not reported.
void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

absl::Status errno_status(int err, const std::string& what) {
  return absl::Status(code_for_errno(err), absl::StrCat(what, ": ", std::strerror(err)));
}

absl::StatusOr<std::vector<uint8_t>> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, absl::StrCat("cannot open ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is a directory, not a file"));
  }
  std::vector<uint8_t> bytes;
  bytes.reserve(st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0);
  uint8_t chunk[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return errno_status(err, absl::StrCat("cannot read ", path));
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), chunk, chunk + n);
  }
  ::close(fd);
  return bytes;
}

absl::Status write_file_atomically(const std::string& path, const uint8_t* bytes, size_t size) {
  if (path.empty() || path.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat("output path '", path, "' names no file"));
  }
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) return errno_status(errno, absl::StrCat("cannot create a temporary file for ", path));
  std::string what = absl::StrCat("cannot write ", tmp);
  absl::Status status = write_all(fd, bytes, size, what);
  if (status.ok() && ::fchmod(fd, 0644) != 0) status = errno_status(errno, what);
  if (status.ok() && ::fsync(fd) != 0) status = errno_status(errno, what);
  if (::close(fd) != 0 && status.ok()) status = errno_status(errno, what);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = errno_status(errno, absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  fsync_dir(parent_dir(path));
  return absl::OkStatus();
}

}  // namespace lms::io
