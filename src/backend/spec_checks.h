// Reading and checking the attributes, arity and shapes of a KernelSpec for
// the non-spatial kernels (element-wise, normalisation, losses, optimizer
// updates), shared by both backends so they reject a bad spec with the same
// status. Errors are InvalidArgument "node '<name>' (op <op>): <msg>".
//
//   LMS_RETURN_IF_ERROR(check_arity(spec, 3, 3, 1));  // 3 inputs, 1 output
//   LMS_ASSIGN_OR_RETURN(double eps,
//                        real_attr_in(spec, "eps", 0.0, true, 1e300, false, "eps > 0"));
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backend/kernel.h"
#include "common/broadcast.h"
#include "common/matmul_shape.h"

namespace lms {

// InvalidArgument "node '<name>' (op <op>): <msg>".
absl::Status invalid(const KernelSpec& spec, absl::string_view msg);
std::string shape_str(const Shape& shape);

// A `real` attribute (an `int` value is accepted and converted). Errors name
// the key, the value found and what is allowed.
absl::StatusOr<double> real_attr(const KernelSpec& spec, absl::string_view key);
// real_attr that must also satisfy lo <= v (lo_open: lo < v) and v <= hi
// (hi_open: v < hi); `allowed` describes the range in the message.
absl::StatusOr<double> real_attr_in(const KernelSpec& spec, absl::string_view key, double lo,
                                    bool lo_open, double hi, bool hi_open,
                                    absl::string_view allowed);
absl::StatusOr<int64_t> int_attr(const KernelSpec& spec, absl::string_view key);
absl::StatusOr<std::vector<int64_t>> ints_attr(const KernelSpec& spec, absl::string_view key);

// Input count in [min_in, max_in] and exactly n_out outputs; every shape has
// dimensions >= 1 (a scalar is [] or [1]).
absl::Status check_arity(const KernelSpec& spec, size_t min_in, size_t max_in, size_t n_out);
absl::Status check_same_shape(const KernelSpec& spec, const Shape& got, const Shape& want,
                              absl::string_view what);
absl::Status check_scalar(const KernelSpec& spec, const Shape& shape, absl::string_view what);
absl::Status check_rank(const KernelSpec& spec, const Shape& shape, size_t min_rank,
                        size_t max_rank, absl::string_view what);
// The dimension of `shape` the optional "axis" attribute names (kAxisAttr
// in lms/types.h; kDefaultAxis when absent), 0..rank-1. `what` names the
// input in the message, which gives the axis and the allowed range.
absl::StatusOr<size_t> axis_attr(const KernelSpec& spec, const Shape& shape,
                                 absl::string_view what);
// Whether the node has an "axis" attribute (reduce_mean: absent = all).
bool has_axis_attr(const KernelSpec& spec);

// add / mul with broadcasting (common/broadcast.h): two inputs that
// broadcast to the output's shape, which one of them has. Returns the
// index (0 or 1) of that full-shape input.
absl::StatusOr<size_t> check_broadcast_binary(const KernelSpec& spec);
// sum_to: one input x, the "shape" attribute, which broadcasts to x's shape
// and is the output's. Returns the plan both devices sum by.
absl::StatusOr<SumToPlan> check_sum_to(const KernelSpec& spec);
// transpose: one input x of rank 1 to SumToPlan::kMaxRank, the "perm"
// attribute, a permutation of its dimensions; the output is x's dimensions
// permuted. Returns the index both devices copy by (transpose_index).
absl::StatusOr<BroadcastIndex> check_transpose(const KernelSpec& spec);

// The run-time error of embedding / embedding_bwd for an id outside
// [0, rows) of the table: names the id, its position among the node's ids
// and the allowed range, the same on both backends.
absl::Status bad_embedding_id(const KernelSpec& spec, int64_t position, int64_t id, int64_t rows);

// The problem of a softmax_cross_entropy (logits[N,C], labels[N] int64 ->
// loss[]) or softmax_cross_entropy_bwd (logits, labels, dloss[] ->
// dlogits[N,C]) node (docs/ops.md): its sizes and ignore_index (absent:
// kDefaultIgnoreIndex).
inline constexpr int64_t kDefaultIgnoreIndex = -100;  // PyTorch's
struct CrossEntropyDims {
  int64_t n = 0;
  int64_t c = 0;
  int64_t ignore_index = kDefaultIgnoreIndex;
};
absl::StatusOr<CrossEntropyDims> cross_entropy_dims(const KernelSpec& spec);
// The run-time error of both cross-entropy ops for a label outside [0, C)
// that is not ignore_index: names the label, its position and what is
// allowed, the same on both backends.
absl::Status bad_class_label(const KernelSpec& spec, int64_t position, int64_t label,
                             const CrossEntropyDims& dims);

// The problem of a linear (x[N,C], w, b?[K] -> y[N,K]) or a
// linear_bwd_weights (x[N,C], dy[N,K] -> dw, db?[K]) node (docs/ops.md):
// w is [K,C] when trans_b, else [C,K]; `bias` is whether b (db) is there.
struct LinearDims {
  int64_t n = 0;
  int64_t c = 0;
  int64_t k = 0;
  bool trans_b = true;
  bool bias = false;
};
absl::StatusOr<LinearDims> linear_dims(const KernelSpec& spec);

// A matmul node (a, b -> y[batch..., M, N], docs/ops.md): the shape rule of
// common/matmul_shape.h, trans_a and trans_b 0 or 1, y of the product's shape.
absl::StatusOr<MatMulShape> matmul_dims(const KernelSpec& spec);

// A batch_norm node (docs/ops.md): x[N,C,S], gamma[C], beta[C] and
// optionally running_mean[C], running_var[C]; eps > 0. kTraining outputs y;
// kTrainingSavingStats (training with running statistics) also the batch
// mean and biased variance [C]; kEval normalises with the running statistics.
enum class BatchNormMode { kTraining, kTrainingSavingStats, kEval };
struct BatchNormDims {
  double eps = 0;
  BatchNormMode mode = BatchNormMode::kTraining;
};
absl::StatusOr<BatchNormDims> batch_norm_dims(const KernelSpec& spec);

// A layer_norm (x, gamma, beta -> y) or layer_norm_bwd (x, gamma, dy -> dx,
// dgamma, dbeta) node (docs/ops.md): x[..., C] of rank 2 to 4 seen as
// [rows, cols] with cols = C, gamma and beta [C], dy and dx like x; eps > 0.
struct LayerNormDims {
  int64_t rows = 0;
  int64_t cols = 0;
  double eps = 0;
};
absl::StatusOr<LayerNormDims> layer_norm_dims(const KernelSpec& spec, bool backward);

// An attention (q, k, v -> out, lse) or attention_bwd (q, k, v, out, lse,
// dout -> dq, dk, dv) node (docs/ops.md): q, out, dout, dq [N,H,T,D]; k, v,
// dk, dv [N,H,S,D]; lse [N,H,T]; softmax_scale > 0; causal 0 or 1, and
// T == S when 1.
struct AttentionDims {
  int64_t heads = 0;  // N*H independent (n, h) problems
  int64_t t = 0;      // queries
  int64_t s = 0;      // keys
  int64_t d = 0;      // head dim
  double scale = 0;
  bool causal = false;
};
absl::StatusOr<AttentionDims> attention_dims(const KernelSpec& spec, bool backward);

// A bn_stats_update node: running_mean, running_var, mean, var, all [C];
// momentum in [0, 1]; count >= 2 elements per channel. The unbiased
// variance is var * count / (count - 1).
struct BnStatsUpdateDims {
  int64_t channels = 0;
  double momentum = 0;
  int64_t count = 0;
};
absl::StatusOr<BnStatsUpdateDims> bn_stats_update_dims(const KernelSpec& spec);

}  // namespace lms
