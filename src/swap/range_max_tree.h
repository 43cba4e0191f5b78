// A segment tree over positions with lazy range add and range / global max:
// the auto planner's incremental memory profile (O(log n) per swap decision).
#pragma once

#include <cstdint>
#include <vector>

namespace lms::swap {

class RangeMaxTree {
 public:
  explicit RangeMaxTree(const std::vector<int64_t>& values);

  // Adds `delta` to every position in [lo, hi]; an empty range is a no-op.
  void add(int32_t lo, int32_t hi, int64_t delta);
  // Maximum over [lo, hi]; INT64_MIN for an empty range.
  int64_t max(int32_t lo, int32_t hi) const;
  int64_t global_max() const { return size_ == 0 ? 0 : max_[1]; }
  // The first position holding global_max().
  int32_t argmax() const;

 private:
  void build(int32_t node, int32_t lo, int32_t hi, const std::vector<int64_t>& values);
  void add(int32_t node, int32_t lo, int32_t hi, int32_t a, int32_t b, int64_t delta);
  int64_t max(int32_t node, int32_t lo, int32_t hi, int32_t a, int32_t b) const;

  int32_t size_;
  std::vector<int64_t> max_;   // max of the subtree, including its own pending add
  std::vector<int64_t> lazy_;  // add applied to the whole subtree
};

}  // namespace lms::swap
