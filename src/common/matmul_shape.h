#pragma once

// The one shape rule of `matmul` (docs/ops.md), shared by the registry's shape
// inference and the backends' spec checks: numpy.matmul on operands of rank 2
// to 4 with optional transposes of the last two dimensions.
//
//   a [2,3,5,4], b [2,3,4,6]            -> y [2,3,5,6]  (batch 2·3)
//   a [2,5,4],   b [4,6]                -> y [2,5,6]    (b shared by the batch)
//   a [5,4],     b [2,6,4], trans_b     -> y [2,5,6]
//
// Batch dimensions broadcast with the rule of common/broadcast.h; each
// operand's batch is padded with leading 1s to the output's, and a 1 where
// the output is larger means the operand's one matrix is reused (stride 0).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/broadcast.h"

namespace lms {

struct MatMulShape {
  std::vector<int64_t> batch;    // y's batch dimensions (rank of y - 2)
  std::vector<int64_t> a_batch;  // a's, padded with leading 1s to batch's rank
  std::vector<int64_t> b_batch;  // b's, likewise
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool trans_a = false;
  bool trans_b = false;

  int64_t batch_count() const {
    int64_t c = 1;
    for (int64_t d : batch) c *= d;
    return c;
  }
  std::vector<int64_t> out_shape() const {
    std::vector<int64_t> y = batch;
    y.push_back(m);
    y.push_back(n);
    return y;
  }
};

inline std::string matmul_shape_str(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ","), "]");
}

// The product's dimensions, or InvalidArgument with a message (without the
// op's or node's name, which the caller adds) saying what is allowed.
inline absl::StatusOr<MatMulShape> matmul_shape(const std::vector<int64_t>& a,
                                                const std::vector<int64_t>& b, bool trans_a,
                                                bool trans_b) {
  for (int i = 0; i < 2; ++i) {
    const std::vector<int64_t>& s = i == 0 ? a : b;
    if (s.size() < 2 || s.size() > 4) {
      const char* layout = i == 0 ? (trans_a ? "[..., K, M]" : "[..., M, K]")
                                  : (trans_b ? "[..., N, K]" : "[..., K, N]");
      return absl::InvalidArgumentError(absl::StrCat(i == 0 ? "a " : "b ", matmul_shape_str(s),
                                                     " must have rank 2 to 4 (", layout, ")"));
    }
  }
  MatMulShape d;
  d.trans_a = trans_a;
  d.trans_b = trans_b;
  const size_t ra = a.size(), rb = b.size();
  d.m = trans_a ? a[ra - 1] : a[ra - 2];
  d.k = trans_a ? a[ra - 2] : a[ra - 1];
  d.n = trans_b ? b[rb - 2] : b[rb - 1];
  const int64_t kb = trans_b ? b[rb - 1] : b[rb - 2];
  if (kb != d.k) {
    return absl::InvalidArgumentError(
        absl::StrCat("inner dimensions disagree: a ", matmul_shape_str(a), " (trans_a ",
                     trans_a ? 1 : 0, ") has K = ", d.k, ", b ", matmul_shape_str(b), " (trans_b ",
                     trans_b ? 1 : 0, ") has K = ", kb, "; they must be equal"));
  }
  const std::vector<int64_t> ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  const std::optional<std::vector<int64_t>> batch = broadcast_shape(ab, bb);
  if (!batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch dimensions of a ", matmul_shape_str(a), " and b ", matmul_shape_str(b),
        " do not broadcast: aligned at the last batch dimension, each pair must be equal or "
        "one of them 1"));
  }
  d.batch = *batch;
  d.a_batch = with_rank(ab, d.batch.size());
  d.b_batch = with_rank(bb, d.batch.size());
  return d;
}

}  // namespace lms
