#pragma once

// The one rounding rule for sizes and offsets in lms: the BFC allocator, the
// swap planner's liveness and placement (Note [Memory accounting]) and the
// kernels' workspace slicing all round here, so the planner's predicted bytes
// and the allocator's are the same numbers.
//
//   align_up(300, 256)      == 512   // next multiple
//   align_down(300, 256)    == 256   // previous multiple
//   rounded_size(0, 256)    == 256   // what an allocation of 0 bytes occupies
//
// All three take any positive alignment (the allocator only accepts powers of
// two, the kernels use 16, 64 and 256) and never overflow: align_up saturates
// at the largest multiple of `alignment` that a uint64_t holds.

#include <algorithm>
#include <cstdint>
#include <limits>

namespace lms {

// The smallest multiple of `alignment` (> 0) that is >= `value`, or the
// largest multiple below 2^64 where that one does not fit.
constexpr uint64_t align_up(uint64_t value, uint64_t alignment) {
  const uint64_t units = value / alignment + (value % alignment != 0 ? 1 : 0);
  return std::min(units, std::numeric_limits<uint64_t>::max() / alignment) * alignment;
}

// The largest multiple of `alignment` (> 0) that is <= `value`.
constexpr uint64_t align_down(uint64_t value, uint64_t alignment) {
  return value / alignment * alignment;
}

// The bytes a device allocation of `bytes` occupies: align_up(bytes,
// alignment), and at least one alignment unit, so that every allocation,
// even of 0 bytes, has its own address. An alignment of 0 counts as 1.
constexpr uint64_t rounded_size(uint64_t bytes, uint64_t alignment) {
  alignment = std::max<uint64_t>(alignment, 1);
  return std::max(align_up(bytes, alignment), alignment);
}

}  // namespace lms
