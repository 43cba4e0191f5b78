// How much host memory a program may ask for, and overflow-checked sizes, so
// that flags which become host buffer sizes (batch, crop, channels, ...) are
// refused with a clear error before anything is allocated, instead of ending
// in std::bad_alloc or the kernel's OOM killer. All sizes are in bytes.
//
//   std::optional<uint64_t> bytes = lms::io::checked_product({2, batch, crop, crop, 4});
//   LMS_RETURN_IF_ERROR(lms::io::check_host_bytes(
//       "--batch 64 with --crop 48", "the patch buffers", "2 x batch x crop^2 x 4", bytes,
//       lms::io::host_memory_limit_bytes(), "at --crop 48 the largest --batch is 1234"));
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace lms::io {

// Note [Host memory limit]: the physical memory of the machine
// (sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE)), lowered to the cgroup v2
// limit of the process (/sys/fs/cgroup/memory.max) when one is set, as in a
// container, in bytes. A request above it cannot be met without swapping or
// the OOM killer. It is a sanity bound, not a promise: what other programs
// use is not subtracted. UINT64_MAX when the machine does not say. Never
// fails.
uint64_t host_memory_limit_bytes();

// The product of `factors`, or nullopt when one is negative or the product
// does not fit 63 bits (so it also fits int64_t and size_t arithmetic).
std::optional<uint64_t> checked_product(std::initializer_list<int64_t> factors);

// The largest integer s with s * s * per_unit <= limit (a square side such
// as a crop; `limit` and `per_unit` in bytes), 0 when not even 1 fits.
int64_t largest_square_side(uint64_t limit, uint64_t per_unit);

// OK when `bytes` fits `limit` (both in bytes); otherwise InvalidArgument
// (the caller's flags ask for more than the machine has):
//   "<subject>: <what> need <formula> = <bytes> bytes (<human>) of host memory,
//    more than this machine has <limit> (physical memory or cgroup limit);
//    <allowed>"
// with "... need <formula> bytes, which overflows 64-bit sizes; ..." when
// `bytes` is nullopt (an overflowed checked_product). `allowed` says what
// would fit (e.g. "at --crop 48 the largest --batch is 1234").
absl::Status check_host_bytes(const std::string& subject, const std::string& what,
                              const std::string& formula, std::optional<uint64_t> bytes,
                              uint64_t limit, const std::string& allowed);

}  // namespace lms::io
