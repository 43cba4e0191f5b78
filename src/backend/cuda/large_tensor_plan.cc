#include "backend/cuda/large_tensor_plan.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace lms::cuda {

std::vector<CopyStep> channel_copy_plan(int64_t n, int64_t src_c, int64_t src_c0, int64_t dst_c,
                                        int64_t dst_c0, int64_t c, int64_t inner,
                                        int64_t elem_bytes, int64_t max_pitch) {
  std::vector<CopyStep> plan;
  if (n <= 0 || c <= 0 || inner <= 0) return plan;
  const int64_t row = c * inner * elem_bytes;
  const int64_t src_pitch = src_c * inner * elem_bytes;
  const int64_t dst_pitch = dst_c * inner * elem_bytes;
  const int64_t src0 = src_c0 * inner * elem_bytes;
  const int64_t dst0 = dst_c0 * inner * elem_bytes;
  // Contiguous on both sides: one sample, or whole samples on both sides.
  if (n == 1 || (c == src_c && c == dst_c)) {
    plan.push_back({.kind = CopyStep::Kind::kContiguous,
                    .src_offset = src0,
                    .dst_offset = dst0,
                    .row_bytes = n == 1 ? row : n * row});
    return plan;
  }
  if (src_pitch <= max_pitch && dst_pitch <= max_pitch) {
    plan.push_back({.kind = CopyStep::Kind::kPitched,
                    .src_offset = src0,
                    .dst_offset = dst0,
                    .row_bytes = row,
                    .rows = n,
                    .src_pitch = src_pitch,
                    .dst_pitch = dst_pitch});
    return plan;
  }
  // A pitch over the limit means a sample over 2 GiB, so n is small.
  for (int64_t i = 0; i < n; ++i) {
    plan.push_back({.kind = CopyStep::Kind::kContiguous,
                    .src_offset = src0 + i * src_pitch,
                    .dst_offset = dst0 + i * dst_pitch,
                    .row_bytes = row});
  }
  return plan;
}

absl::StatusOr<ConvSplit> conv_split_plan(const std::string& node, int64_t n,
                                          int64_t max_sample_elements, int64_t limit) {
  if (n < 1 || max_sample_elements < 1) {
    return absl::InvalidArgumentError(absl::StrCat("node '", node, "': batch ", n,
                                                   " and sample elements ", max_sample_elements,
                                                   " must both be >= 1"));
  }
  if (max_sample_elements > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node '", node, "': one sample has ", max_sample_elements,
        " elements in its largest tensor, more than the ", limit,
        " elements a cuDNN tensor descriptor can describe; splitting along N cannot help: use "
        "smaller volumes (patches) or fewer channels"));
  }
  ConvSplit s;
  s.chunk = std::min(n, limit / max_sample_elements);
  for (int64_t first = 0; first < n; first += s.chunk) {
    s.pieces.emplace_back(first, std::min(s.chunk, n - first));
  }
  return s;
}

absl::StatusOr<int> checked_int(int64_t v, const std::string& what) {
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", v, ", outside the int range [", std::numeric_limits<int>::min(),
                     ", ", std::numeric_limits<int>::max(), "] the CUDA and cuDNN APIs take"));
  }
  return static_cast<int>(v);
}

}  // namespace lms::cuda
