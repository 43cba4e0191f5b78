#include "swap/range_max_tree.h"

#include <algorithm>
#include <limits>

namespace lms::swap {

RangeMaxTree::RangeMaxTree(const std::vector<int64_t>& values)
    : size_(static_cast<int32_t>(values.size())),
      max_(4 * values.size() + 4, 0),
      lazy_(4 * values.size() + 4, 0) {
  if (size_ > 0) build(1, 0, size_ - 1, values);
}

void RangeMaxTree::build(int32_t node, int32_t lo, int32_t hi, const std::vector<int64_t>& values) {
  if (lo == hi) {
    max_[node] = values[lo];
    return;
  }
  const int32_t mid = (lo + hi) / 2;
  build(2 * node, lo, mid, values);
  build(2 * node + 1, mid + 1, hi, values);
  max_[node] = std::max(max_[2 * node], max_[2 * node + 1]);
}

void RangeMaxTree::add(int32_t lo, int32_t hi, int64_t delta) {
  lo = std::max(lo, 0);
  hi = std::min(hi, size_ - 1);
  if (lo > hi) return;
  add(1, 0, size_ - 1, lo, hi, delta);
}

void RangeMaxTree::add(int32_t node, int32_t lo, int32_t hi, int32_t a, int32_t b, int64_t delta) {
  if (b < lo || hi < a) return;
  if (a <= lo && hi <= b) {
    max_[node] += delta;
    lazy_[node] += delta;
    return;
  }
  const int32_t mid = (lo + hi) / 2;
  add(2 * node, lo, mid, a, b, delta);
  add(2 * node + 1, mid + 1, hi, a, b, delta);
  max_[node] = std::max(max_[2 * node], max_[2 * node + 1]) + lazy_[node];
}

int64_t RangeMaxTree::max(int32_t lo, int32_t hi) const {
  lo = std::max(lo, 0);
  hi = std::min(hi, size_ - 1);
  if (lo > hi) return std::numeric_limits<int64_t>::min();
  return max(1, 0, size_ - 1, lo, hi);
}

int64_t RangeMaxTree::max(int32_t node, int32_t lo, int32_t hi, int32_t a, int32_t b) const {
  if (b < lo || hi < a) return std::numeric_limits<int64_t>::min();
  if (a <= lo && hi <= b) return max_[node];
  const int32_t mid = (lo + hi) / 2;
  return std::max(max(2 * node, lo, mid, a, b), max(2 * node + 1, mid + 1, hi, a, b)) + lazy_[node];
}

int32_t RangeMaxTree::argmax() const {
  if (size_ == 0) return -1;
  int32_t node = 1, lo = 0, hi = size_ - 1;
  int64_t target = max_[1];
  while (lo < hi) {
    target -= lazy_[node];
    const int32_t mid = (lo + hi) / 2;
    if (max_[2 * node] == target) {
      node = 2 * node;
      hi = mid;
    } else {
      node = 2 * node + 1;
      lo = mid + 1;
    }
  }
  return lo;
}

}  // namespace lms::swap
