#include "lms/profiler/atomic_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace lms {
namespace {

std::string temp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}{}", atomic_temp_prefix(path), counter.fetch_add(1));
}

absl::Status os_error(std::string_view what, const std::string& path, int err) {
  return absl::InternalError(fmt::format("cannot {} '{}': {}", what, path, std::strerror(err)));
}

}  // namespace

std::string atomic_temp_prefix(const std::string& path) {
  return fmt::format("{}.tmp.{}.", path, static_cast<long>(::getpid()));
}

absl::Status write_file_atomically(const std::string& path, std::string_view contents) {
  if (path.empty()) return absl::InvalidArgumentError("output path is empty; give a file name");
  const std::string tmp = temp_name(path);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return os_error("create a temporary file for", path, errno);
  size_t written = std::fwrite(contents.data(), 1, contents.size(), f);
  int write_err = written == contents.size() ? 0 : errno;
  if (std::fflush(f) != 0 && write_err == 0) write_err = errno;
  if (std::fclose(f) != 0 && write_err == 0) write_err = errno;
  if (write_err != 0) {
    std::remove(tmp.c_str());
    return os_error("write", path, write_err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    return os_error("rename the temporary file onto", path, err);
  }
  return absl::OkStatus();
}

}  // namespace lms
