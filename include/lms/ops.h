// Model builders: each adds nodes of docs/ops.md to a Graph.
//
//   lms::Graph g;
//   lms::TensorId x = g.input("lr", {16, 1, 64, 64});
//   lms::TensorId h = lms::conv2d(g, "conv1", x, 64, {3, 3}, {.pad = {1, 1}, .seed = 1});
//   h = lms::relu(g, "relu1", h);
//   lms::TensorId y = lms::conv2d(g, "conv2", h, 1, {3, 3}, {.pad = {1, 1}, .seed = 2});
//   lms::TensorId loss = lms::mse_loss(g, "loss", y, g.input("hr", {16, 1, 64, 64}));
//   LMS_RETURN_IF_ERROR(g.status());
//
// Layouts are NCHW (2-D) and NCDHW (3-D); S is the spatial part and r its rank.
// Low-level builders (conv, deconv, max_pool, instance_norm with gamma/beta,
// ...) add exactly one node named `name` whose output tensor is also `name`.
// Layer builders (conv2d, conv3d, conv_transpose, instance_norm, batch_norm
// and layer_norm without gamma/beta) also create their parameters
// "<name>/w", "<name>/b", "<name>/gamma", "<name>/beta".
//
// Errors never throw: a bad call records an InvalidArgument naming the node
// and the attribute or input in g.status() and returns kNoTensor; builders
// given kNoTensor (an earlier failure) add nothing and return kNoTensor.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "lms/graph.h"

namespace lms {

// ---- Convolution family ----

// The optional attribute "workspace" of the six convolution ops
// (kWorkspaceAttr in lms/types.h) picks their kernel's workspace policy.

// Spatial attributes, one entry per spatial dim; empty = default (stride 1,
// pad 0, dilation 1).
struct ConvOptions {
  std::vector<int64_t> stride = {};
  std::vector<int64_t> pad = {};       // symmetric, both sides
  std::vector<int64_t> dilation = {};  // 1 = dense
  // Channel groups: x's C channels and the K outputs split into `group`
  // groups, each output seeing the C/group channels of its group (ResNeXt);
  // group = C = K is a depthwise convolution (MobileNet). 1 = dense.
  int64_t group = 1;
};

// y[N,K,S'] = conv(x[N,C,S], w[K,C/group,k..]) + b[K],
// S' = (S + 2p - d(k-1) - 1)/s + 1. b may be kNoTensor (no bias).
TensorId conv(Graph& g, std::string_view name, TensorId x, TensorId w, TensorId b = kNoTensor,
              const ConvOptions& options = {});

struct DeconvOptions {
  std::vector<int64_t> stride = {};  // empty = 1
  std::vector<int64_t> pad = {};     // empty = 0
};

// Transposed convolution: y[N,K,S'] from x[N,C,S], w[C,K,k..], b?[K] with
// S' = (S-1)s - 2p + k.
TensorId deconv(Graph& g, std::string_view name, TensorId x, TensorId w, TensorId b = kNoTensor,
                const DeconvOptions& options = {});

// Options of the conv layer builders. A list with one entry is used for every
// spatial dim ({.pad = {1}} = pad 1 everywhere); empty = default.
struct ConvLayerOptions {
  std::vector<int64_t> stride = {};
  std::vector<int64_t> pad = {};
  std::vector<int64_t> dilation = {};  // ignored by conv_transpose
  bool bias = true;
  uint64_t seed = 0;  // seed of the He-normal weight initialisation
  int64_t group = 1;  // conv2d / conv3d: channel groups (ConvOptions::group)
};

// 2-D conv layer: x[N,C,H,W] -> y[N,out_channels,H',W']. Creates the parameters
// "<name>/w" [out_channels,C/group,k..] He-normal (He et al., ICCV 2015) with
// fan_in = C/group*prod(kernel) and "<name>/b" [out_channels] zeros (if bias).
// `kernel` has r entries or one (used for every dim). Errors if x is not 4-D.
TensorId conv2d(Graph& g, std::string_view name, TensorId x, int64_t out_channels,
                std::vector<int64_t> kernel, const ConvLayerOptions& options = {});
// The same for x[N,C,D,H,W]; errors if x is not 5-D.
TensorId conv3d(Graph& g, std::string_view name, TensorId x, int64_t out_channels,
                std::vector<int64_t> kernel, const ConvLayerOptions& options = {});
// Transposed conv layer (2-D or 3-D): creates "<name>/w" [C,out_channels,k..]
// He-normal with fan_in = max(1, C*prod(kernel)/prod(stride)) (the number of
// inputs that reach one output pixel) and "<name>/b" zeros.
TensorId conv_transpose(Graph& g, std::string_view name, TensorId x, int64_t out_channels,
                        std::vector<int64_t> kernel, const ConvLayerOptions& options = {});

// y[N,C,S*scale]; mode "nearest" or "linear" (bilinear/trilinear, half-pixel
// centres). `scale` has r entries or one, each >= 1.
TensorId upsample(Graph& g, std::string_view name, TensorId x, std::vector<int64_t> scale,
                  std::string_view mode = "nearest");

// ---- Matrix products ----

// y[N,K] = x[N,C] · wᵀ + b[K] with w[K,C] (trans_b, PyTorch's nn.Linear
// layout), or x · w + b with w[C,K] (trans_b = false); ONNX Gemm with
// alpha = beta = 1 and transA = 0. b may be kNoTensor (no bias).
TensorId linear(Graph& g, std::string_view name, TensorId x, TensorId w, TensorId b = kNoTensor,
                bool trans_b = true);

// Batched matrix product y[batch..., M, N] = op(a) · op(b), numpy.matmul /
// ONNX MatMul (rank 2 to 4) with optional transposes: a is [..., M, K]
// ([..., K, M] with trans_a), b is [..., K, N] ([..., N, K] with trans_b).
// The batch dimensions (all but the last two) broadcast as in numpy, so a
// rank-2 b is one weight shared by every matrix of a. float32 only. Errors
// (recorded in g.status(), naming the node): a rank outside 2 to 4, K of a
// and b disagreeing, batch dimensions that do not broadcast.
TensorId matmul(Graph& g, std::string_view name, TensorId a, TensorId b, bool trans_a = false,
                bool trans_b = false);

// ---- Element-wise and activations (any shape unless said) ----

TensorId relu(Graph& g, std::string_view name, TensorId x);
TensorId leaky_relu(Graph& g, std::string_view name, TensorId x, double alpha = 0.01);
TensorId sigmoid(Graph& g, std::string_view name, TensorId x);
// tanh(x); its gradient dy * (1 - y^2) is tanh_bwd, which keeps y.
TensorId tanh(Graph& g, std::string_view name, TensorId x);
// min(max(x, min), max) with min <= max; relu6 is clip(x, 0, 6) (MobileNet).
// The gradient passes where min < x < max (PyTorch's hardtanh).
TensorId clip(Graph& g, std::string_view name, TensorId x, double min, double max);
// y = x * 0.5 * (1 + erf(x / sqrt(2))), the exact (erf) GELU of Hendrycks
// and Gimpel, "Gaussian Error Linear Units" (2016): PyTorch's default
// nn.GELU (approximate='none') and ONNX Gelu-20 with approximate "none";
// the ONNX importer also maps the Div / Erf / Add / Mul / Mul decomposition
// that PyTorch exports at opsets 14 to 17 onto it. x of any shape; y has x's
// shape. The gradient dx = dy * (Phi(x) + x * phi(x)), Phi and phi the
// standard normal CDF and density, is gelu_bwd, which keeps x.
TensorId gelu(Graph& g, std::string_view name, TensorId x);
// y = min(max(alpha * x + beta, 0), 1): ONNX HardSigmoid (defaults alpha
// 0.2, beta 0.5); PyTorch's nn.Hardsigmoid is alpha 1/6, beta 1/2 (its
// export). The gradient dx = alpha * dy where 0 < alpha * x + beta < 1, else
// 0, is hard_sigmoid_bwd, which keeps x. Alpha and beta must be finite.
TensorId hard_sigmoid(Graph& g, std::string_view name, TensorId x, double alpha = 0.2,
                      double beta = 0.5);
// y = x * min(max(x + 3, 0), 6) / 6: PyTorch's nn.Hardswish and ONNX
// HardSwish-14, MobileNet V3's activation (Howard et al., "Searching for
// MobileNetV3", 2019). dx = dy * (2x + 3) / 6 on (-3, 3), dy above, 0 below
// (hard_swish_bwd, which keeps x).
TensorId hard_swish(Graph& g, std::string_view name, TensorId x);
// Softmax over axis 1 (channels) of x[N,C,...], or over `axis` of x of any
// rank >= 1 (negative counts from the end: -1 is the last).
TensorId softmax(Graph& g, std::string_view name, TensorId x);
TensorId softmax(Graph& g, std::string_view name, TensorId x, int64_t axis);
// a + b and a * b, NumPy's broadcasting as in ONNX and PyTorch: the shapes
// are aligned at their last dimension, a missing leading dimension counts as
// 1, and each pair of dimensions must be equal or one of them 1. One operand
// must have the output's shape (the other is broadcast: a squeeze-excitation
// gate [N,C,1,1] times [N,C,H,W], a per-channel scale [C,1,1]); otherwise
// the graph records InvalidArgument naming both shapes. The gradient of a
// broadcast operand is the output's gradient (times the other operand, for
// mul) summed over the broadcast dimensions (a `sum_to` node, docs/ops.md).
TensorId add(Graph& g, std::string_view name, TensorId a, TensorId b);
TensorId mul(Graph& g, std::string_view name, TensorId a, TensorId b);
// factor * x.
TensorId scale(Graph& g, std::string_view name, TensorId x, double factor);
// Inverted dropout (PyTorch's nn.Dropout in training mode): x of any shape,
// f32; y = x * keep / (1 - ratio), keep(i) = u(seed, step, i) >= ratio with
// i the element's row-major index, `step` the session's count of completed
// steps (KernelArgs::step; a failed step does not advance it) and u a
// uniform [0, 1) number: the top 24 bits of a splitmix64 chain over
// (seed, step, i), divided by 2^24 (backend/dropout_hash.h; the CPU and
// CUDA devices compute the same masks). The mask is never stored: the
// gradient, dropout_bwd, regenerates it, and so does a recomputation.
// ratio 0 is an identity. Errors (when the graph is built): ratio outside
// [0, 1) or not a real, seed not an int, are InvalidArgument naming the
// node.
TensorId dropout(Graph& g, std::string_view name, TensorId x, double ratio, int64_t seed);
// Concatenation along axis 1 of xi[N,Ci,S] -> y[N,ΣCi,S], or along `axis`
// (negative from the end); the inputs agree in every other dimension.
TensorId concat(Graph& g, std::string_view name, const std::vector<TensorId>& xs);
TensorId concat(Graph& g, std::string_view name, const std::vector<TensorId>& xs, int64_t axis);
// Channels [begin, begin+size) of x[N,C,S] -> y[N,size,S], or that range of
// `axis` (negative from the end).
TensorId slice(Graph& g, std::string_view name, TensorId x, int64_t begin, int64_t size);
TensorId slice(Graph& g, std::string_view name, TensorId x, int64_t begin, int64_t size,
               int64_t axis);
// x's elements, row-major, under `shape` (the same element count): ONNX
// Reshape with the shape resolved. A copy (one buffer per tensor).
TensorId reshape(Graph& g, std::string_view name, TensorId x, Shape shape);
// x[d0..d(r-1)] -> [d0*..*d(axis-1), d(axis)*..*d(r-1)] (ONNX Flatten;
// axis 1 turns a pooled [N,C,1,1] into [N,C] for linear).
TensorId flatten(Graph& g, std::string_view name, TensorId x, int64_t axis = 1);
// x[d0..d(r-1)] -> y[d(perm[0])..d(perm[r-1])], y[i0..] = x at the index whose
// dimension perm[k] is ik (ONNX Transpose, torch.permute), rank 1 to 8.
// `perm` is a permutation of 0..r-1 (empty: reversed, ONNX's default). A
// copy; the gradient is the transpose of dy by the inverse permutation.
// Errors (when the graph is built): perm of another length than x's rank,
// an entry out of range or repeated, are InvalidArgument naming the node.
TensorId transpose(Graph& g, std::string_view name, TensorId x, std::vector<int64_t> perm = {});
// y = x converted to `to` (f32, bf16 or f16; lms/types.h), of x's shape: a
// float32 value becomes the nearest bf16 / f16 value (ties to even, as
// PyTorch's Tensor.to; beyond f16's range, +-inf), and a 16-bit value
// widens exactly. The gradient is dy cast back to x's dtype. A cast to x's
// own dtype is a copy. These are the casts mixed precision places
// (lms::autocast, lms/autocast.h, as PyTorch's torch.autocast does); which
// other ops read bf16 and f16 is docs/ops.md's "Dtypes".
// Errors (when the graph is built): x of dtype i64, or `to` i64, are
// InvalidArgument naming the node.
TensorId cast(Graph& g, std::string_view name, TensorId x, DType to);
// A tensor of `shape` (empty = scalar) filled with `value`.
TensorId fill(Graph& g, std::string_view name, Shape shape, double value);

// ---- Pooling and normalisation ----

struct PoolOptions {
  std::vector<int64_t> kernel = {};  // required, r entries
  std::vector<int64_t> stride = {};  // empty = kernel
  std::vector<int64_t> pad = {};     // empty = 0; each < kernel
  // avg_pool only: divide by the whole window, padding included (PyTorch's
  // default), or by its elements inside x (ONNX AveragePool's default).
  bool count_include_pad = true;
  // Round the output size up instead of down (PyTorch's ceil_mode, ONNX's
  // ceil_mode = 1): S' = ceil((S + 2p - k)/s) + 1, less one where that last
  // window would start past S + p. A window that runs off the end sees only
  // x (max_pool) and divides by its elements inside x (avg_pool). avg_pool
  // with count_include_pad and a window that runs past S + p is refused
  // (InvalidArgument): PyTorch divides that window by its part inside the
  // padded input, which no oneDNN or cuDNN pooling computes.
  bool ceil_mode = false;
};
// Max pooling y[N,C,S'] with S' = (S + 2p - k)/s + 1 (see ceil_mode).
TensorId max_pool(Graph& g, std::string_view name, TensorId x, const PoolOptions& options);
// Square / cubic windows on x[N,C,H,W] / x[N,C,D,H,W]; stride 0 = kernel.
TensorId max_pool2d(Graph& g, std::string_view name, TensorId x, int64_t kernel, int64_t stride = 0,
                    int64_t pad = 0);
TensorId max_pool3d(Graph& g, std::string_view name, TensorId x, int64_t kernel, int64_t stride = 0,
                    int64_t pad = 0);

// Average pooling y[N,C,S'] with S' = (S + 2p - k)/s + 1 (see ceil_mode):
// the mean of each window (PyTorch's AvgPool2d/3d).
TensorId avg_pool(Graph& g, std::string_view name, TensorId x, const PoolOptions& options);
// Global average pooling y[N,C,1..] = the mean of x[N,C,S] over S (ONNX
// GlobalAveragePool, PyTorch's AdaptiveAvgPool to 1): one avg_pool node
// whose window is all of S.
TensorId global_avg_pool(Graph& g, std::string_view name, TensorId x);

// Instance norm (Ulyanov et al. 2016) of x[N,C,S] with gamma[C], beta[C]:
// statistics per (n, c) over S, biased variance.
TensorId instance_norm(Graph& g, std::string_view name, TensorId x, TensorId gamma, TensorId beta,
                       double eps = 1e-5);
// Layer form: creates "<name>/gamma" [C] ones and "<name>/beta" [C] zeros.
TensorId instance_norm(Graph& g, std::string_view name, TensorId x, double eps = 1e-5);
// Batch norm (Ioffe & Szegedy 2015), training mode: batch statistics over N
// and S, biased variance. These forms keep no running averages.
TensorId batch_norm(Graph& g, std::string_view name, TensorId x, TensorId gamma, TensorId beta,
                    double eps = 1e-5);
TensorId batch_norm(Graph& g, std::string_view name, TensorId x, double eps = 1e-5);

// Batch norm with running statistics, as PyTorch's nn.BatchNorm2d/3d
// (track_running_stats = True).
struct BatchNormOptions {
  double eps = 1e-5;
  // PyTorch's convention (ONNX's momentum attribute is 1 - this): after each
  // training step, running = (1 - momentum) * running + momentum * batch,
  // with the unbiased batch variance (times n / (n - 1), n = N * |S|).
  double momentum = 0.1;  // in [0, 1]
  // true: normalise with the batch statistics; lms::training_graph adds one
  // "bn_stats/<name>" node that updates the running statistics at the step
  // commit, with the optimizer (a failed step leaves them unchanged).
  // false (eval mode, PyTorch's model.eval()): normalise with the running
  // statistics; no gradient passes through (training_graph refuses it).
  bool training = true;
};
// running_mean[C], running_var[C]: persistent tensors (Graph::optimizer_state).
// Training mode: the node "name" has three outputs, "name:0" (y, returned),
// "name:1" and "name:2" (the batch mean and biased variance [C], read by
// the update); eval mode: one, "name".
TensorId batch_norm(Graph& g, std::string_view name, TensorId x, TensorId gamma, TensorId beta,
                    TensorId running_mean, TensorId running_var, const BatchNormOptions& options);
// Layer form: creates "<name>/gamma" [C] ones and "<name>/beta" [C] zeros
// (parameters), "<name>/running_mean" [C] zeros and "<name>/running_var" [C]
// ones (optimizer state), PyTorch's initial values.
TensorId batch_norm(Graph& g, std::string_view name, TensorId x, const BatchNormOptions& options);

// Layer norm (Ba et al. 2016) over the last axis of x[..., C] (rank 2 to 4)
// with gamma[C], beta[C]: each row of C elements normalised by its own mean
// and biased variance, y = (x - mean) / sqrt(var + eps) * gamma + beta.
// PyTorch's F.layer_norm(x, [C], weight, bias, eps) and ONNX
// LayerNormalization-17 with axis = -1. Errors (recorded in g.status(),
// naming the node): x of rank < 2 or > 4, gamma or beta not [C], eps not in
// (0, 1].
struct LayerNormOptions {
  double eps = 1e-5;  // added to the variance; PyTorch's default
};
TensorId layer_norm(Graph& g, std::string_view name, TensorId x, TensorId gamma, TensorId beta,
                    const LayerNormOptions& options = {});
// Layer form (nn.LayerNorm(C)): creates "<name>/gamma" [C] ones and
// "<name>/beta" [C] zeros, the parameters lms::training_graph trains.
TensorId layer_norm(Graph& g, std::string_view name, TensorId x,
                    const LayerNormOptions& options = {});

// ---- Attention ----

// Scaled dot-product attention of q[N,H,T,D] (T queries per head) over
// k[N,H,S,D] and v[N,H,S,D] (S keys), float32:
//   out[N,H,T,D] = softmax(softmax_scale * q·kᵀ + mask) · v
// with the softmax over the S keys; `causal` masks key s > query t (-inf
// above the diagonal, PyTorch's is_causal) and needs T == S. One node
// `name` with two outputs: "<name>:0" = out (returned) and "<name>:1" =
// lse[N,H,T], each row's log-sum-exp of the scaled, masked scores.
// The backward (attention_bwd) recomputes the probabilities
// P = exp(scale * q·kᵀ - lse) from q, k and lse: FlashAttention's
// recomputation (Dao et al. 2022, Sections 3.1 and B.2). So the tensors
// saved for the backward are q, k, v, out and lse, all O(T); the
// [N,H,T,S] probabilities are never a graph tensor. The CPU kernels are
// tiled (FlashAttention-2, Dao 2023): their workspace is a few 128x128
// tiles per thread whatever T and S are, and their bits do not depend on
// the number of threads.
// Errors (recorded in g.status(), naming the node): q, k or v not of rank
// 4, k not [N,H,S,D] with q's N, H and D, v not of k's shape, a head dim D
// outside 1 to 256, softmax_scale not > 0, causal with T != S.
TensorId attention(Graph& g, std::string_view name, TensorId q, TensorId k, TensorId v,
                   double softmax_scale, bool causal);

// ---- Losses and reductions (scalar outputs, shape []) ----

// mean((pred - target)^2) over all elements; same shapes.
TensorId mse_loss(Graph& g, std::string_view name, TensorId pred, TensorId target);
// 1 - mean over (n,c) of (2 Σ_S p t + eps) / (Σ_S p + Σ_S t + eps) (Milletari
// et al. 2016, V-Net) on probs[N,C,S] and target[N,C,S]. No gradient flows
// into the target.
TensorId soft_dice_loss(Graph& g, std::string_view name, TensorId probs, TensorId target,
                        double eps = 1e-5);
// Softmax cross-entropy with integer class labels, the mean over the rows
// that are not ignored (PyTorch's F.cross_entropy(logits, labels,
// ignore_index=...) with reduction "mean"):
//   loss[] = (1/M) Σ_{n: labels[n] != ignore_index} (logsumexp(logits[n,:]) - logits[n, labels[n]])
// with M the number of such rows. logits[N,C] float32 with labels[N] int64,
// or logits[..., C] with labels[...] (the classes on the last axis, every
// other position a row: a language model's [N,T,V] logits with [N,T] next
// tokens, as F.cross_entropy(logits.view(-1, V), labels.view(-1))). Labels
// come from Graph::input with DType::kInt64, fed through Int64Feeds, each in
// [0, C) or equal to ignore_index. The gradient of the logits is
// (softmax(logits) - onehot(labels)) / M · dloss, zero on ignored rows; the
// labels get none.
// Errors (recorded in g.status(), naming the node): logits of rank < 2, or
// of rank > 2 with one class on the last axis (an [N,C,1,1] output needs
// lms::flatten first), labels not logits' shape without its last axis, or
// not int64.
// At run time a label outside [0, C) that is not ignore_index fails the
// step with InvalidArgument naming the node, the label, its position and
// the allowed range, before anything is written. When every row is ignored
// (M = 0) the loss is NaN and the gradient zero, as in PyTorch.
TensorId softmax_cross_entropy(Graph& g, std::string_view name, TensorId logits, TensorId labels,
                               int64_t ignore_index = -100);
// A language-model head and its loss as one op (Liger's fused linear
// cross-entropy; ALST, Snowflake 2025): softmax_cross_entropy of the
// logits x·wᵀ (trans_b, w [V,D], PyTorch's nn.Linear weight or a tied
// embedding table) or x·w (w [D,V]), computed a chunk of rows at a time,
// so that no [N,V] logits tensor exists, in the graph or in a kernel.
// x[..., D] float32 (N rows), labels[...] = x's shape without its last
// axis (int64), as softmax_cross_entropy; returns loss[]. The backward
// (linear_cross_entropy_bwd) recomputes each chunk's logits and gives dx
// and dw; dw sums the chunks in order. With LmsConfig::chunked_head, the
// CPU device's lowering turns a matmul feeding softmax_cross_entropy into
// this op by itself (Note [Chunked language-model head]); the CUDA device
// has no kernel for it yet.
// Errors (recorded in g.status(), naming the node): x of rank < 2, w not
// [V,D] (or [D,V]) with x's D, fewer than 2 classes, labels not x's
// shape without its last axis, or not int64. At run time, a label outside
// [0, V) that is not ignore_index fails the step as softmax_cross_entropy.
TensorId linear_cross_entropy(Graph& g, std::string_view name, TensorId x, TensorId w,
                              TensorId labels, bool trans_b = true, int64_t ignore_index = -100);
// Mean of all elements (a scalar []), or the mean along `axis` (negative
// from the end) with that axis kept at size 1 (ONNX ReduceMean, keepdims=1).
TensorId reduce_mean(Graph& g, std::string_view name, TensorId x);
TensorId reduce_mean(Graph& g, std::string_view name, TensorId x, int64_t axis);

// Rows of table[V,D] picked by ids (an int64 input of any shape, each in
// [0, V); Graph::input with DType::kInt64) -> y[ids..., D]. The ids get no
// gradient; the table's sums the rows of dy per id (embedding_bwd).
TensorId embedding(Graph& g, std::string_view name, TensorId ids, TensorId table);

}  // namespace lms
