// Note [Capacity units]: the device's allocator rounds its region down to
// whole alignment units (AllocatorStats::capacity_bytes is that rounded
// figure), and the planner rounds the budget it plans for the same way
// (lms::rewrite, src/swap/pass.cc). So every comparison of a limit, a
// budget or a planned capacity with a device's capacity is made in those
// units, here, and an unaligned capacity behaves the same in lms::rewrite
// and in Session::create: 41,943,140 B on a 256-byte allocator is
// 41,943,040 B on both sides.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "lms/memory_stats.h"

namespace lms {

// `bytes` in the units of an allocator aligned to `alignment_bytes` (0
// counts as 1): rounded down to a whole number of them.
uint64_t in_allocator_units(uint64_t bytes, uint64_t alignment_bytes);

// OkStatus when a device budget of `limit_bytes` (0: the capacity) is within
// the capacity of the device whose allocator reports `mem`, compared in
// allocator units; else InvalidArgument naming `what` (e.g.
// "device_memory_limit"), both sizes, `device_name` and what is allowed.
absl::Status check_within_capacity(absl::string_view what, uint64_t limit_bytes,
                                   const AllocatorStats& mem, absl::string_view device_name);

}  // namespace lms
