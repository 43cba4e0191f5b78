#include "common/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lms {
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

std::string base_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

bool all_of_class(const std::string& s, int (*is_class)(int)) {
  for (char c : s) {
    if (!is_class(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Whether `suffix` (what follows "<name>.tmp.") names a temporary file that
// no live writer owns (Note [Stale temporary files]).
bool is_stale_suffix(const std::string& suffix) {
  constexpr size_t kRandom = 6;  // mkstemp's XXXXXX
  size_t dot = suffix.find('.');
  if (dot == std::string::npos || dot == 0 || dot > 9 || suffix.size() - dot - 1 != kRandom) {
    return false;
  }
  std::string pid_text = suffix.substr(0, dot);
  if (!all_of_class(pid_text, std::isdigit) ||
      !all_of_class(suffix.substr(dot + 1), std::isalnum)) {
    return false;
  }
  const long pid = std::strtol(pid_text.c_str(), nullptr, 10);
  if (pid <= 0 || pid == ::getpid()) return false;  // our own: maybe another thread's write
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// Writes all of `contents` to `fd`, retrying short writes and EINTR.
absl::Status write_all(int fd, std::string_view contents, const std::string& what) {
  while (!contents.empty()) {
    ssize_t n = ::write(fd, contents.data(), contents.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, what);
    }
    contents.remove_prefix(static_cast<size_t>(n));
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

absl::Status check_names_a_file(const std::string& path) {
  if (!path.empty() && path.back() != '/') return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("output path '", path, "' names no file"));
}

absl::Status fsync_file(const std::string& file) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    return errno_status(err, absl::StrCat("cannot sync ", file));
  }
  ::close(fd);
  return absl::OkStatus();
}

// The end of every atomic write: renames the filled temporary file over
// `path` and syncs the directory when `status` is OK; removes it otherwise.
absl::Status replace_with(const std::string& tmp, const std::string& path, absl::Status status) {
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

// Fills the open temporary file `fd` and closes it: contents, mode 0644
// (mkstemp creates 0600), fsync.
absl::Status fill_and_close(int fd, std::string_view contents, const std::string& tmp) {
  const std::string what = absl::StrCat("cannot write ", tmp);
  absl::Status status = write_all(fd, contents, what);
  if (status.ok() && ::fchmod(fd, 0644) != 0) status = errno_status(errno, what);
  if (status.ok() && ::fsync(fd) != 0) status = errno_status(errno, what);
  if (::close(fd) != 0 && status.ok()) status = errno_status(errno, what);
  return status;
}

}  // namespace

absl::Status errno_status(int err, const std::string& what) {
  return absl::Status(code_for_errno(err), absl::StrCat(what, ": ", std::strerror(err)));
}

std::string atomic_temp_prefix(const std::string& path) {
  return absl::StrCat(path, ".tmp.", ::getpid(), ".");
}

absl::Status atomic_write_file(const std::string& path, std::string_view contents) {
  if (absl::Status named = check_names_a_file(path); !named.ok()) return named;
  remove_stale_temp_files(path);
  std::string tmp = atomic_temp_prefix(path) + "XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) return errno_status(errno, absl::StrCat("cannot create a temporary file for ", path));
  return replace_with(tmp, path, fill_and_close(fd, contents, tmp));
}

absl::Status atomic_write_file_by_name(
    const std::string& path, std::string_view suffix,
    const std::function<absl::Status(const std::string& tmp)>& fill) {
  if (absl::Status named = check_names_a_file(path); !named.ok()) return named;
  remove_stale_temp_files(path);
  std::string tmp = atomic_temp_prefix(path) + "XXXXXX" + std::string(suffix);
  int fd = ::mkstemps(tmp.data(), static_cast<int>(suffix.size()));
  if (fd < 0) return errno_status(errno, absl::StrCat("cannot create a temporary file for ", path));
  // The library rewrites the file in place, so the mode is what the renamed
  // file keeps: readable by all, as atomic_write_file's.
  absl::Status status = absl::OkStatus();
  if (::fchmod(fd, 0644) != 0) {
    status = errno_status(errno, absl::StrCat("cannot set the mode of ", tmp));
  }
  ::close(fd);
  if (status.ok()) status = fill(tmp);
  if (status.ok()) status = fsync_file(tmp);
  return replace_with(tmp, path, std::move(status));
}

int remove_stale_temp_files(const std::string& path) {
  const std::string dir = parent_dir(path);
  const std::string prefix = base_name(path) + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  while (dirent* entry = ::readdir(d)) {
    std::string name = entry->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (!is_stale_suffix(name.substr(prefix.size()))) continue;
    if (::unlink(join(dir, name).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

}  // namespace lms
