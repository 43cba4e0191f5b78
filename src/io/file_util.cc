#include "lms/io/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string_view>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"

namespace lms::io {
namespace {

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::Status errno_status(int err, const std::string& what) { return lms::errno_status(err, what); }

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
  return atomic_write_file(path, std::string_view(reinterpret_cast<const char*>(bytes), size));
}

int remove_stale_temp_files(const std::string& path) { return lms::remove_stale_temp_files(path); }

absl::Status check_writable(const std::string& path) {
  if (path.empty() || path.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat("output path '", path, "' names no file"));
  }
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", path, ": it is a folder; give a file path"));
  }
  const std::string dir = parent_dir(path);
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      return errno_status(ENOTDIR, absl::StrCat("cannot write ", path, ": ", dir));
    }
  } else {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return errno_status(ec.value(),
                          absl::StrCat("cannot write ", path, ": cannot create the folder ", dir));
    }
  }
  lms::remove_stale_temp_files(path);
  std::string probe = atomic_temp_prefix(path) + "XXXXXX";
  int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    return errno_status(errno,
                        absl::StrCat("cannot write ", path, ": cannot create a file in ", dir));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return absl::OkStatus();
}

}  // namespace lms::io
