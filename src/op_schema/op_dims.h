// What a kernel reads from an op instance its op's rule has accepted
// (op_schema.h): each function below is the core of that rule, so it
// validates what it reads and a backend that has called check_spec gets
// no error from it. Errors as in spec_checks.h.
//
//   LMS_RETURN_IF_ERROR(check_spec(spec));            // at the backend's dispatch
//   LMS_ASSIGN_OR_RETURN(SliceDims d, slice_dims(spec));
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/broadcast.h"
#include "common/matmul_shape.h"
#include "op_schema/op_instance.h"

namespace lms {

// ---- Spatial ops (rules_spatial.cc) ----

// Which pass of the convolution family an op is (conv and deconv alike).
enum class ConvPass { kForward, kBackwardData, kBackwardWeights };
ConvPass conv_pass(OpKind op);

// The convolution problem behind conv, conv_bwd_data, conv_bwd_weights,
// deconv, deconv_bwd_data and deconv_bwd_weights, in forward terms:
// x[N,C,S] -> y[N,K,S']. `w` is the op's weight shape: [K,C/groups,k..] for
// conv, [C,K,k..] for deconv (transposed); x is input_shape for the
// backward-data ops, w weight_shape for the backward-weights ops.
struct ConvProblem {
  bool transposed = false;
  bool bias = false;  // b (conv, deconv) or db (has_bias = 1)
  int rank = 2;       // spatial dims
  int64_t groups = 1;
  Shape x, w, y;
  std::vector<int64_t> stride, pad, dilation;  // dilation as in ops.md (1 = dense)
};
absl::StatusOr<ConvProblem> conv_problem(const OpInstance& spec);

// upsample (x) / upsample_bwd (dy, input_shape): x[N,C,S] -> y[N,C,S*scale].
struct UpsampleDims {
  Shape x, y;
  std::vector<int64_t> scale;
  bool linear = false;  // mode "linear", else "nearest"
};
absl::StatusOr<UpsampleDims> upsample_dims(const OpInstance& spec);

// max_pool (x), max_pool_bwd (x, dy), avg_pool (x), avg_pool_bwd (dy,
// input_shape): x[N,C,S] -> y[N,C,S'] with S' = (S + 2 pad - kernel) /
// stride + 1 and pad < kernel.
struct PoolDims {
  Shape x, y;
  std::vector<int64_t> kernel, stride, pad;
  // The padding after x in each spatial dim: pad, or more where ceil_mode
  // adds a last window that runs off the end (Note [Pooling ceil mode]).
  std::vector<int64_t> pad_end;
  bool count_include_pad = true;  // avg_pool's divisor (absent: 1, PyTorch's)
  bool ceil_mode = false;
};
absl::StatusOr<PoolDims> pool_dims(const OpInstance& spec);

// ---- Element-wise, concat / slice (rules_pointwise.cc) ----

// add / mul with broadcasting (common/broadcast.h): a and b broadcast to a
// shape one of them has, of rank at most SumToPlan::kMaxRank when they
// differ. Returns the index (0 or 1) of the operand with the output's shape.
absl::StatusOr<size_t> check_broadcast_binary(const OpInstance& spec);
// sum_to: the "shape" attribute broadcasts to x's shape (rank at most
// SumToPlan::kMaxRank) and is the output's. Returns the plan both devices
// sum by.
absl::StatusOr<SumToPlan> check_sum_to(const OpInstance& spec);
// transpose: the "perm" attribute, a permutation of the dimensions of x
// (rank 1 to SumToPlan::kMaxRank). Returns the index both devices copy by.
absl::StatusOr<BroadcastIndex> check_transpose(const OpInstance& spec);
// concat: the axis along which every input matches input 0 elsewhere.
absl::StatusOr<size_t> concat_axis(const OpInstance& spec);

// slice: y = x[..., begin:begin+size, ...] along `axis`.
struct SliceDims {
  size_t axis = 0;
  int64_t begin = 0;
  int64_t size = 0;
};
absl::StatusOr<SliceDims> slice_dims(const OpInstance& spec);

// dropout / dropout_bwd: ratio in [0, 1) and the mask's seed.
struct DropoutDims {
  double ratio = 0;
  int64_t seed = 0;
};
absl::StatusOr<DropoutDims> dropout_dims(const OpInstance& spec);

// ---- Normalisation (rules_norm.cc) ----

// instance_norm (+ _bwd), batch_norm_bwd and the first three inputs of
// batch_norm: x[N,C,...] (N,C,S for instance norm), gamma[C] and the third
// input (beta[C], or dy like x); returns eps, in (0, 1].
absl::StatusOr<double> norm_eps(const OpInstance& spec);

// A batch_norm node (docs/ops.md): x[N,C,S], gamma[C], beta[C] and
// optionally running_mean[C], running_var[C]; eps in (0, 1]. kTraining
// outputs y; kTrainingSavingStats (training with running statistics) also
// the batch mean and biased variance [C]; kEval normalises with the running
// statistics.
enum class BatchNormMode { kTraining, kTrainingSavingStats, kEval };
struct BatchNormDims {
  double eps = 0;
  BatchNormMode mode = BatchNormMode::kTraining;
};
absl::StatusOr<BatchNormDims> batch_norm_dims(const OpInstance& spec);

// A layer_norm (x, gamma, beta -> y) or layer_norm_bwd (x, gamma, dy -> dx,
// dgamma, dbeta) node (docs/ops.md): x[..., C] of rank 2 to 4 seen as
// [rows, cols] with cols = C, gamma and beta [C], dy like x; eps in (0, 1].
struct LayerNormDims {
  int64_t rows = 0;
  int64_t cols = 0;
  double eps = 0;
};
absl::StatusOr<LayerNormDims> layer_norm_dims(const OpInstance& spec);

// A bn_stats_update node: running_mean, running_var, mean, var, all [C];
// momentum in [0, 1]; count >= 2 elements per channel. The unbiased
// variance is var * count / (count - 1).
struct BnStatsUpdateDims {
  int64_t channels = 0;
  double momentum = 0;
  int64_t count = 0;
};
absl::StatusOr<BnStatsUpdateDims> bn_stats_update_dims(const OpInstance& spec);

// ---- Optimizer updates (rules_optimizer.cc) ----

// The hyper-parameters of sgd_update (param, grad, velocity, norm?[]) and
// adam_update (param, grad, m, v, step[], norm?[]) (docs/ops.md): lr,
// weight_decay, clip_norm >= 0; sgd's momentum and adam's beta1, beta2 in
// [0, 1); adam's eps > 0 and its optional poly schedule (decay_steps >= 1
// and decay_power > 0, both or neither); the optional loss_scaling flag,
// with which scale[] and norm[] end the inputs. Fields of the other update
// are 0.
struct UpdateAttrs {
  bool loss_scaling = false;
  double lr = 0;
  double weight_decay = 0;
  double clip_norm = 0;  // 0: no clipping
  double momentum = 0;
  double beta1 = 0;
  double beta2 = 0;
  double eps = 0;
  int64_t decay_steps = 0;  // 0: no poly schedule
  double decay_power = 0;
};
absl::StatusOr<UpdateAttrs> update_attrs(const OpInstance& spec);

// amp_update_scale (scale[], growth_tracker[], norm[]): growth_factor > 1,
// backoff_factor in (0, 1), growth_interval in [1, 2^24] (GradScaler's; the
// tracker is a float32 tensor).
struct AmpScaleAttrs {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};
absl::StatusOr<AmpScaleAttrs> amp_scale_attrs(const OpInstance& spec);

// ---- Matrix products, attention, embedding (rules_linear.cc) ----

// A linear (x[N,C], w, b?[K] -> y[N,K]) or a linear_bwd_weights (x[N,C],
// dy[N,K] -> dw, db?[K]) node (docs/ops.md): w is [K,C] when trans_b, else
// [C,K]; `bias` is whether b (db, has_bias = 1) is there.
struct LinearDims {
  int64_t n = 0;
  int64_t c = 0;
  int64_t k = 0;
  bool trans_b = true;
  bool bias = false;
};
absl::StatusOr<LinearDims> linear_dims(const OpInstance& spec);

// A matmul node (a, b -> y[batch..., M, N], docs/ops.md): the shape rule of
// common/matmul_shape.h, trans_a and trans_b 0 or 1.
absl::StatusOr<MatMulShape> matmul_dims(const OpInstance& spec);

// An attention (q, k, v -> out, lse) or attention_bwd (q, k, v, out, lse,
// dout -> dq, dk, dv) node (docs/ops.md): q, out, dout [N,H,T,D]; k, v
// [N,H,S,D]; lse [N,H,T]; softmax_scale > 0; causal 0 or 1, and T == S
// when 1.
// The largest head dim attention takes (FlashAttention-2's bound too).
inline constexpr int64_t kMaxAttentionHeadDim = 256;

struct AttentionDims {
  int64_t heads = 0;  // N*H independent (n, h) problems
  int64_t t = 0;      // queries
  int64_t s = 0;      // keys
  int64_t d = 0;      // head dim
  double scale = 0;
  bool causal = false;
};
absl::StatusOr<AttentionDims> attention_dims(const OpInstance& spec);

// ---- Losses (rules_loss.cc) ----

// The problem of a softmax_cross_entropy (logits[..., C], labels[...] int64
// -> loss[]) or softmax_cross_entropy_bwd (logits, labels, dloss[] ->
// dlogits) node (docs/ops.md): n rows of c classes and ignore_index
// (absent: kDefaultIgnoreIndex).
inline constexpr int64_t kDefaultIgnoreIndex = -100;  // PyTorch's
struct CrossEntropyDims {
  int64_t n = 0;
  int64_t c = 0;
  int64_t ignore_index = kDefaultIgnoreIndex;
};
absl::StatusOr<CrossEntropyDims> cross_entropy_dims(const OpInstance& spec);

// The problem of a linear_cross_entropy (x[..., D], w [V,D] when trans_b
// else [D,V], labels[...] int64; + dloss[] for the backward):
// n rows of x, each scored against the V classes.
struct LinearCrossEntropyDims {
  int64_t n = 0;
  int64_t d = 0;
  int64_t v = 0;
  bool trans_b = true;
  int64_t ignore_index = kDefaultIgnoreIndex;
  // The CrossEntropyDims of the [n, v] logits, for bad_class_label.
  CrossEntropyDims logits() const { return {n, v, ignore_index}; }
};
absl::StatusOr<LinearCrossEntropyDims> linear_cross_entropy_dims(const OpInstance& spec);
// The run-time error of both cross-entropy ops for a label outside [0, C)
// that is not ignore_index: names the label, its position and what is
// allowed, the same on both backends.
absl::Status bad_class_label(const OpInstance& spec, int64_t position, int64_t label,
                             const CrossEntropyDims& dims);

}  // namespace lms
