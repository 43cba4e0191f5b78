#include "runtime/capacity.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/align.h"
#include "lms/units.h"

namespace lms {

uint64_t in_allocator_units(uint64_t bytes, uint64_t alignment_bytes) {
  return align_down(bytes, std::max<uint64_t>(alignment_bytes, 1));
}

absl::Status check_within_capacity(absl::string_view what, uint64_t limit_bytes,
                                   const AllocatorStats& mem, absl::string_view device_name) {
  const uint64_t capacity = in_allocator_units(mem.capacity_bytes, mem.alignment_bytes);
  if (in_allocator_units(limit_bytes, mem.alignment_bytes) <= capacity) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", format_bytes(limit_bytes), " (", limit_bytes,
                   " bytes) exceeds the capacity of device ", device_name, " (",
                   format_bytes(capacity), ", ", capacity, " bytes in whole ", mem.alignment_bytes,
                   "-byte allocator units); allowed: 0 (the capacity) up to ", capacity, " bytes"));
}

}  // namespace lms
