// The kinds of graph node (docs/ops.md): an enum, so that code dispatches on
// a node's op with a switch or a table instead of comparing strings. Names
// appear only where text is read or written (the graph's text form, error
// messages, profiles).
//
//   const lms::Node& n = graph.node(id);
//   if (n.op == lms::OpKind::kConv) ...
//   std::cout << lms::op_name(n.op);                        // "conv"
//   std::optional<lms::OpKind> k = lms::parse_op_kind("relu");
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace lms {

// One enumerator per op of docs/ops.md, in the order of its tables. Adding an
// op: an enumerator here, its name in kOpNames below, one registry entry in
// src/graph/ops_*.cc and its kernels (docs/ops.md, "Adding an op").
enum class OpKind : uint8_t {
  // Convolution family
  kConv,
  kConvBwdData,
  kConvBwdWeights,
  kDeconv,
  kDeconvBwdData,
  kDeconvBwdWeights,
  kUpsample,
  kUpsampleBwd,
  // Matrix products
  kLinear,
  kLinearBwdWeights,
  kMatMul,
  // Element-wise and activations
  kRelu,
  kReluBwd,
  kLeakyRelu,
  kLeakyReluBwd,
  kSigmoid,
  kSigmoidBwd,
  kTanh,
  kTanhBwd,
  kClip,
  kClipBwd,
  kGelu,
  kGeluBwd,
  kHardSigmoid,
  kHardSigmoidBwd,
  kHardSwish,
  kHardSwishBwd,
  kSoftmax,
  kSoftmaxBwd,
  kAttention,
  kAttentionBwd,
  kAdd,
  kMul,
  kScale,
  kConcat,
  kSlice,
  kReshape,
  kTranspose,
  kFill,
  kCast,
  kDropout,
  kDropoutBwd,
  // Embedding
  kEmbedding,
  kEmbeddingBwd,
  // Pooling and normalisation
  kMaxPool,
  kMaxPoolBwd,
  kAvgPool,
  kAvgPoolBwd,
  kInstanceNorm,
  kInstanceNormBwd,
  kBatchNorm,
  kBatchNormBwd,
  kBnStatsUpdate,
  kLayerNorm,
  kLayerNormBwd,
  // Losses and reductions
  kMseLoss,
  kMseLossBwd,
  kSoftDiceLoss,
  kSoftDiceLossBwd,
  kSoftmaxCrossEntropy,
  kSoftmaxCrossEntropyBwd,
  kLinearCrossEntropy,
  kLinearCrossEntropyBwd,
  kReduceMean,
  kReduceMeanBwd,
  kSumTo,
  // Optimizer
  kGlobalNorm,
  kIncrement,
  kSgdUpdate,
  kAdamUpdate,
  kAmpUpdateScale,
  // Swap and collective (inserted by lms::rewrite and training_graph)
  kSwapOut,
  kSwapIn,
  kAllReduce,
};

inline constexpr size_t kNumOpKinds = static_cast<size_t>(OpKind::kAllReduce) + 1;

// The op names of the text form and docs/ops.md, indexed by OpKind.
inline constexpr std::array<const char*, kNumOpKinds> kOpNames = {
    "conv",
    "conv_bwd_data",
    "conv_bwd_weights",
    "deconv",
    "deconv_bwd_data",
    "deconv_bwd_weights",
    "upsample",
    "upsample_bwd",
    "linear",
    "linear_bwd_weights",
    "matmul",
    "relu",
    "relu_bwd",
    "leaky_relu",
    "leaky_relu_bwd",
    "sigmoid",
    "sigmoid_bwd",
    "tanh",
    "tanh_bwd",
    "clip",
    "clip_bwd",
    "gelu",
    "gelu_bwd",
    "hard_sigmoid",
    "hard_sigmoid_bwd",
    "hard_swish",
    "hard_swish_bwd",
    "softmax",
    "softmax_bwd",
    "attention",
    "attention_bwd",
    "add",
    "mul",
    "scale",
    "concat",
    "slice",
    "reshape",
    "transpose",
    "fill",
    "cast",
    "dropout",
    "dropout_bwd",
    "embedding",
    "embedding_bwd",
    "max_pool",
    "max_pool_bwd",
    "avg_pool",
    "avg_pool_bwd",
    "instance_norm",
    "instance_norm_bwd",
    "batch_norm",
    "batch_norm_bwd",
    "bn_stats_update",
    "layer_norm",
    "layer_norm_bwd",
    "mse_loss",
    "mse_loss_bwd",
    "soft_dice_loss",
    "soft_dice_loss_bwd",
    "softmax_cross_entropy",
    "softmax_cross_entropy_bwd",
    "linear_cross_entropy",
    "linear_cross_entropy_bwd",
    "reduce_mean",
    "reduce_mean_bwd",
    "sum_to",
    "global_norm",
    "increment",
    "sgd_update",
    "adam_update",
    "amp_update_scale",
    "swap_out",
    "swap_in",
    "all_reduce",
};

// Every OpKind, in enum order (for tables and tests that cover all ops).
inline constexpr std::array<OpKind, kNumOpKinds> all_op_kinds() {
  std::array<OpKind, kNumOpKinds> kinds{};
  for (size_t i = 0; i < kNumOpKinds; ++i) kinds[i] = static_cast<OpKind>(i);
  return kinds;
}

// The op's name in docs/ops.md and the text form ("conv", "swap_out"); a
// C string, like role_name, so that absl::StrCat takes it as it is.
constexpr const char* op_name(OpKind op) { return kOpNames[static_cast<size_t>(op)]; }

// The OpKind named `name`; nullopt for a name no op has (the text parser
// reports it as an unknown op).
constexpr std::optional<OpKind> parse_op_kind(std::string_view name) {
  for (size_t i = 0; i < kNumOpKinds; ++i) {
    if (std::string_view(kOpNames[i]) == name) return static_cast<OpKind>(i);
  }
  return std::nullopt;
}

// The convolution family: conv, deconv and their two backward ops each
// (docs/ops.md), the ops that take the workspace attribute.
constexpr bool is_conv_family(OpKind op) {
  return op == OpKind::kConv || op == OpKind::kConvBwdData || op == OpKind::kConvBwdWeights ||
         op == OpKind::kDeconv || op == OpKind::kDeconvBwdData || op == OpKind::kDeconvBwdWeights;
}

// Ops whose kernels see every tensor as a flat array when all have one shape
// (add and mul may also broadcast, and then do not), so any storage layout
// works when all their tensors share it (Note [Blocked layouts]; the CPU
// backend's check_blocked_layout).
constexpr bool is_flat_elementwise(OpKind op) {
  switch (op) {
    case OpKind::kRelu:
    case OpKind::kReluBwd:
    case OpKind::kLeakyRelu:
    case OpKind::kLeakyReluBwd:
    case OpKind::kSigmoid:
    case OpKind::kSigmoidBwd:
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kScale:
      return true;
    default:
      return false;
  }
}

}  // namespace lms
