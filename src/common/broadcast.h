#pragma once

// The one broadcasting rule of lms (docs/ops.md `add`, `mul`, `sum_to`):
// NumPy's, as ONNX and PyTorch have it. Shapes are aligned at their last
// dimension; a missing leading dimension counts as 1; two dimensions agree
// when they are equal or one of them is 1, and the result takes the other.
//
//   broadcast_shape({2, 8, 5, 5}, {2, 8, 1, 1}) == {2, 8, 5, 5}
//   broadcast_shape({8, 1, 1}, {2, 8, 5, 5})    == {2, 8, 5, 5}
//   broadcast_shape({2, 3}, {4, 3})             == nullopt
//
// The gradient of a broadcast operand is the output's gradient summed over
// the broadcast dimensions (`sum_to`). SumToPlan is how both devices walk
// that sum, so the CPU loop and the CUDA kernel add the same numbers in the
// same order and give the same bits.

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#if defined(__CUDACC__)
#define LMS_BROADCAST_HD __host__ __device__ __forceinline__
#else
#define LMS_BROADCAST_HD inline
#endif

namespace lms {

// `shape` with leading 1s up to `rank` (unchanged when it has that many).
inline std::vector<int64_t> with_rank(const std::vector<int64_t>& shape, size_t rank) {
  if (shape.size() >= rank) return shape;
  std::vector<int64_t> out(rank - shape.size(), 1);
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

// The shape `a` and `b` broadcast to, or nullopt when a dimension disagrees.
inline std::optional<std::vector<int64_t>> broadcast_shape(const std::vector<int64_t>& a,
                                                           const std::vector<int64_t>& b) {
  const size_t rank = a.size() > b.size() ? a.size() : b.size();
  const std::vector<int64_t> pa = with_rank(a, rank), pb = with_rank(b, rank);
  std::vector<int64_t> out(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (pa[d] != pb[d] && pa[d] != 1 && pb[d] != 1) return std::nullopt;
    out[d] = pa[d] == 1 ? pb[d] : pa[d];
  }
  return out;
}

// sum_to(x, shape): y[j] is the sum, in double and in the row-major order of
// x, of the elements of x whose index agrees with j on every dimension y
// keeps. The dimensions x has and y lacks or holds as 1 are summed over.
struct SumToPlan {
  static constexpr int kMaxRank = 8;
  int kept = 0;     // dimensions of y's (rank-aligned) shape larger than 1
  int reduced = 0;  // dimensions summed over
  int64_t kept_dims[kMaxRank] = {};
  int64_t kept_strides[kMaxRank] = {};  // in elements of x
  int64_t reduced_dims[kMaxRank] = {};
  int64_t reduced_strides[kMaxRank] = {};
  int64_t outputs = 1;     // elements of y
  int64_t per_output = 1;  // elements of x summed into each

  // The offset in x of entry `i` (row-major) of the `n` dimensions given.
  static LMS_BROADCAST_HD int64_t offset(int64_t i, int n, const int64_t* dims,
                                         const int64_t* strides) {
    int64_t off = 0;
    for (int d = n - 1; d >= 0; --d) {
      off += (i % dims[d]) * strides[d];
      i /= dims[d];
    }
    return off;
  }
  LMS_BROADCAST_HD int64_t base(int64_t j) const {
    return offset(j, kept, kept_dims, kept_strides);
  }
  LMS_BROADCAST_HD int64_t term(int64_t r) const {
    return offset(r, reduced, reduced_dims, reduced_strides);
  }
};

// Where a broadcast operand's element lies for each element of the output:
// entry i (row-major) of the output reads entry index(i) of the operand.
struct BroadcastIndex {
  int rank = 0;
  int64_t dims[SumToPlan::kMaxRank] = {};     // the output's
  int64_t strides[SumToPlan::kMaxRank] = {};  // the operand's; 0 where broadcast
  LMS_BROADCAST_HD int64_t index(int64_t i) const {
    return SumToPlan::offset(i, rank, dims, strides);
  }
};

// The index of operand `small` within output `y`, or nullopt when `small`
// does not broadcast to y or y's rank exceeds SumToPlan::kMaxRank.
inline std::optional<BroadcastIndex> broadcast_index(const std::vector<int64_t>& y,
                                                     const std::vector<int64_t>& small) {
  if (y.size() > SumToPlan::kMaxRank || small.size() > y.size()) return std::nullopt;
  if (broadcast_shape(y, small) != y) return std::nullopt;
  const std::vector<int64_t> ps = with_rank(small, y.size());
  BroadcastIndex b;
  b.rank = static_cast<int>(y.size());
  int64_t stride = 1;
  for (int d = b.rank - 1; d >= 0; --d) {
    b.dims[d] = y[d];
    b.strides[d] = ps[d] == 1 ? 0 : stride;
    stride *= ps[d];
  }
  return b;
}

// The plan of sum_to(x, y), or nullopt when y does not broadcast to x
// (broadcast_shape(x, y) != x) or a rank exceeds SumToPlan::kMaxRank.
inline std::optional<SumToPlan> sum_to_plan(const std::vector<int64_t>& x,
                                            const std::vector<int64_t>& y) {
  if (x.size() > SumToPlan::kMaxRank || y.size() > x.size()) return std::nullopt;
  if (broadcast_shape(x, y) != x) return std::nullopt;
  const std::vector<int64_t> py = with_rank(y, x.size());
  SumToPlan p;
  int64_t stride = 1;
  for (int d = static_cast<int>(x.size()) - 1; d >= 0; --d) {
    if (py[d] == x[d] && x[d] > 1) {
      p.kept_dims[p.kept] = x[d];
      p.kept_strides[p.kept++] = stride;
      p.outputs *= x[d];
    } else if (py[d] == 1 && x[d] > 1) {
      p.reduced_dims[p.reduced] = x[d];
      p.reduced_strides[p.reduced++] = stride;
      p.per_output *= x[d];
    }
    stride *= x[d];
  }
  // Collected from the last dimension; offset() wants the first first.
  auto reverse = [](int n, int64_t* dims, int64_t* strides) {
    for (int lo = 0, hi = n - 1; lo < hi; ++lo, --hi) {
      std::swap(dims[lo], dims[hi]);
      std::swap(strides[lo], strides[hi]);
    }
  };
  reverse(p.kept, p.kept_dims, p.kept_strides);
  reverse(p.reduced, p.reduced_dims, p.reduced_strides);
  // A dimension of 0 is neither kept nor summed over above: y then has
  // numel(y) elements (0 when it keeps that dimension), each a sum of none.
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] != 0) continue;
    p.per_output = 0;
    p.outputs = 1;
    for (int64_t e : py) p.outputs *= e;
  }
  return p;
}

// transpose: y[i] = x[t.index(i)] for y = transpose(x, perm), i y's
// row-major index: y's dimensions with x's strides permuted. nullopt when
// perm is not a permutation of x's dimensions or the rank exceeds
// SumToPlan::kMaxRank.
inline std::optional<BroadcastIndex> transpose_index(const std::vector<int64_t>& x,
                                                     const std::vector<int64_t>& perm) {
  if (x.size() > SumToPlan::kMaxRank || perm.size() != x.size()) return std::nullopt;
  std::vector<int64_t> x_stride(x.size(), 1);
  for (int d = static_cast<int>(x.size()) - 2; d >= 0; --d)
    x_stride[d] = x_stride[d + 1] * x[d + 1];
  std::vector<bool> seen(x.size(), false);
  BroadcastIndex t;
  t.rank = static_cast<int>(x.size());
  for (int d = 0; d < t.rank; ++d) {
    const int64_t p = perm[d];
    if (p < 0 || p >= t.rank || seen[p]) return std::nullopt;
    seen[p] = true;
    t.dims[d] = x[p];
    t.strides[d] = x_stride[p];
  }
  return t;
}

}  // namespace lms
