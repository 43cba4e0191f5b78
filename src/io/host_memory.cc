#include "lms/io/host_memory.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "lms/units.h"

namespace lms::io {

uint64_t host_memory_limit_bytes() {
  uint64_t limit = UINT64_MAX;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) {
    limit = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
  }
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");
  uint64_t cgroup_limit = 0;
  if (cgroup >> cgroup_limit && cgroup_limit > 0 && cgroup_limit < limit) limit = cgroup_limit;
  return limit;  // "max" (no cgroup limit) fails to parse and leaves the physical size
}

std::optional<uint64_t> checked_product(std::initializer_list<int64_t> factors) {
  uint64_t product = 1;
  for (int64_t f : factors) {
    if (f < 0) return std::nullopt;
    uint64_t next = 0;
    if (__builtin_mul_overflow(product, static_cast<uint64_t>(f), &next) ||
        next > static_cast<uint64_t>(INT64_MAX)) {
      return std::nullopt;
    }
    product = next;
  }
  return product;
}

int64_t largest_square_side(uint64_t limit, uint64_t per_unit) {
  if (per_unit == 0 || limit < per_unit) return 0;
  const uint64_t squares = limit / per_unit;
  uint64_t lo = 1, hi = uint64_t{1} << 32;  // lo * lo <= squares < hi * hi
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (mid * mid <= squares) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return static_cast<int64_t>(lo);
}

absl::Status check_host_bytes(const std::string& subject, const std::string& what,
                              const std::string& formula, std::optional<uint64_t> bytes,
                              uint64_t limit, const std::string& allowed) {
  if (bytes && *bytes <= limit) return absl::OkStatus();
  const std::string have = absl::StrCat("this machine has ", format_bytes(limit),
                                        " (physical memory or cgroup limit); ", allowed);
  if (!bytes) {
    return absl::InvalidArgumentError(absl::StrCat(subject, ": ", what, " need ", formula,
                                                   " bytes, which overflows 64-bit "
                                                   "sizes; ",
                                                   have));
  }
  return absl::InvalidArgumentError(absl::StrCat(subject, ": ", what, " need ", formula, " = ",
                                                 *bytes, " bytes (", format_bytes(*bytes),
                                                 ") of host memory, more than ", have));
}

}  // namespace lms::io
