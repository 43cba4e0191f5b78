// The public builders of lms/ops.h: fill in default attributes, create layer
// parameters, and add nodes through Graph::add1, which records errors.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "graph/ops_internal.h"
#include "lms/ops.h"

namespace lms {
namespace {

using ops_internal::shape_str;
using ops_internal::str_cat;

// True if x can be used: an earlier failure (kNoTensor with an error already
// recorded) or a foreign id (recorded now) make the caller return kNoTensor.
bool usable(Graph& g, std::string_view name, TensorId x) {
  if (!g.status().ok()) return false;
  if (x >= 0 && x < g.num_tensors()) return true;
  g.record_error(absl::InvalidArgumentError(
      str_cat("node '", name, "': input ", x, " is not a tensor of this graph")));
  return false;
}

size_t spatial_rank(const Graph& g, TensorId x) {
  const size_t rank = g.tensor(x).shape.size();
  return rank >= 2 ? rank - 2 : 0;
}

// An empty list becomes r copies of `fallback`; a one-entry list is
// broadcast when `broadcast`; anything else is passed on for the op to check.
std::vector<int64_t> spatial(std::vector<int64_t> v, size_t r, int64_t fallback,
                             bool broadcast = false) {
  if (v.empty()) return std::vector<int64_t>(r, fallback);
  if (broadcast && v.size() == 1) return std::vector<int64_t>(r, v[0]);
  return v;
}

TensorId add_op(Graph& g, OpKind op, std::string_view name, std::vector<TensorId> in,
                Attrs attrs = {}) {
  for (TensorId t : in) {
    if (!usable(g, name, t)) return kNoTensor;
  }
  return g.add1(op, name, std::move(in), std::move(attrs));
}

std::vector<TensorId> with_bias(TensorId x, TensorId w, TensorId b) {
  if (b == kNoTensor) return {x, w};
  return {x, w, b};
}

// Checks x's rank and the layer arguments of conv2d / conv3d / conv_transpose.
bool check_layer(Graph& g, std::string_view name, TensorId x, size_t want_rank,
                 int64_t out_channels, const std::vector<int64_t>& kernel) {
  if (!usable(g, name, x)) return false;
  const Shape& s = g.tensor(x).shape;
  std::string why;
  if (want_rank != 0 && s.size() != want_rank) {
    why = str_cat("input must be ", want_rank, "-D (", want_rank == 4 ? "NCHW" : "NCDHW", "), got ",
                  shape_str(s));
  } else if (s.size() != 4 && s.size() != 5) {
    why = str_cat("input must be 4-D (NCHW) or 5-D (NCDHW), got ", shape_str(s));
  } else if (out_channels < 1) {
    why = str_cat("out_channels must be >= 1, got ", out_channels);
  } else if (kernel.size() != 1 && kernel.size() != s.size() - 2) {
    why = str_cat("kernel must have 1 or ", s.size() - 2, " entries, got ", shape_str(kernel));
  } else if (std::any_of(kernel.begin(), kernel.end(), [](int64_t k) { return k < 1; })) {
    why = str_cat("kernel entries must be >= 1, got ", shape_str(kernel));
  }
  if (why.empty()) return true;
  g.record_error(absl::InvalidArgumentError(str_cat("layer '", name, "': ", why)));
  return false;
}

// Checks the weight shape a layer builder derived from its arguments before
// computing with it (fan_in is a product of its dims).
bool weight_shape_ok(Graph& g, std::string_view name, const Shape& w_shape) {
  absl::Status s = check_shape(str_cat("weight ", shape_str(w_shape)), w_shape);
  if (s.ok()) return true;
  g.record_error(absl::InvalidArgumentError(str_cat(
      "layer '", name, "': out_channels, channels of x or kernel too large: ", s.message())));
  return false;
}

// Creates "<name>/w" (He-normal) and, if wanted, "<name>/b" (zeros).
std::pair<TensorId, TensorId> layer_params(Graph& g, std::string_view name, Shape w_shape,
                                           int64_t fan_in, int64_t out_channels,
                                           const ConvLayerOptions& o) {
  TensorId w = g.parameter(str_cat(name, "/w"), std::move(w_shape),
                           Init::he_normal(o.seed, std::max<int64_t>(1, fan_in)));
  TensorId b = kNoTensor;
  if (o.bias) b = g.parameter(str_cat(name, "/b"), {out_channels}, Init::zeros());
  return {w, b};
}

TensorId conv_layer(Graph& g, std::string_view name, TensorId x, int64_t out_channels,
                    std::vector<int64_t> kernel, const ConvLayerOptions& o, size_t rank) {
  if (!check_layer(g, name, x, rank, out_channels, kernel)) return kNoTensor;
  const Shape s = g.tensor(x).shape;
  const size_t r = s.size() - 2;
  kernel = spatial(std::move(kernel), r, 1, true);
  // A group that does not divide C is refused by the conv node, which names it.
  const int64_t group = o.group >= 1 && s[1] % o.group == 0 ? o.group : 1;
  Shape w_shape = {out_channels, s[1] / group};
  w_shape.insert(w_shape.end(), kernel.begin(), kernel.end());
  if (!weight_shape_ok(g, name, w_shape)) return kNoTensor;
  const int64_t fan_in = num_elements(w_shape) / out_channels;  // C/group*prod(k)
  auto [w, b] = layer_params(g, name, std::move(w_shape), fan_in, out_channels, o);
  if (!g.status().ok()) return kNoTensor;
  return conv(g, name, x, w, b,
              {spatial(o.stride, r, 1, true), spatial(o.pad, r, 0, true),
               spatial(o.dilation, r, 1, true), o.group});
}

// gamma[C] ones and beta[C] zeros for a norm layer on x.
std::pair<TensorId, TensorId> norm_params(Graph& g, std::string_view name, TensorId x) {
  if (!usable(g, name, x)) return {kNoTensor, kNoTensor};
  const Shape& s = g.tensor(x).shape;
  if (s.size() < 2) {
    g.record_error(absl::InvalidArgumentError(
        str_cat("layer '", name, "': input must be [N,C,...], got ", shape_str(s))));
    return {kNoTensor, kNoTensor};
  }
  const int64_t c = s[1];
  TensorId gamma = g.parameter(str_cat(name, "/gamma"), {c}, Init::constant(1.0));
  TensorId beta = g.parameter(str_cat(name, "/beta"), {c}, Init::zeros());
  return {gamma, beta};
}

TensorId pool_nd(Graph& g, std::string_view name, TensorId x, size_t rank, int64_t kernel,
                 int64_t stride, int64_t pad) {
  if (!usable(g, name, x)) return kNoTensor;
  const Shape& s = g.tensor(x).shape;
  if (s.size() != rank) {
    g.record_error(absl::InvalidArgumentError(
        str_cat("node '", name, "' (max_pool): input must be ", rank, "-D (",
                rank == 4 ? "NCHW" : "NCDHW", "), got ", shape_str(s))));
    return kNoTensor;
  }
  const size_t r = rank - 2;
  return max_pool(
      g, name, x,
      {std::vector<int64_t>(r, kernel), std::vector<int64_t>(r, stride == 0 ? kernel : stride),
       std::vector<int64_t>(r, pad)});
}

}  // namespace

TensorId conv(Graph& g, std::string_view name, TensorId x, TensorId w, TensorId b,
              const ConvOptions& o) {
  if (!usable(g, name, x)) return kNoTensor;
  const size_t r = spatial_rank(g, x);
  Attrs a = {{"stride", spatial(o.stride, r, 1)},
             {"pad", spatial(o.pad, r, 0)},
             {"dilation", spatial(o.dilation, r, 1)}};
  // Absent means 1, so ungrouped graphs keep their text form.
  if (o.group != 1) a["group"] = o.group;
  return add_op(g, OpKind::kConv, name, with_bias(x, w, b), std::move(a));
}

TensorId deconv(Graph& g, std::string_view name, TensorId x, TensorId w, TensorId b,
                const DeconvOptions& o) {
  if (!usable(g, name, x)) return kNoTensor;
  const size_t r = spatial_rank(g, x);
  Attrs a = {{"stride", spatial(o.stride, r, 1)}, {"pad", spatial(o.pad, r, 0)}};
  return add_op(g, OpKind::kDeconv, name, with_bias(x, w, b), std::move(a));
}

TensorId conv2d(Graph& g, std::string_view name, TensorId x, int64_t out_channels,
                std::vector<int64_t> kernel, const ConvLayerOptions& options) {
  return conv_layer(g, name, x, out_channels, std::move(kernel), options, 4);
}

TensorId conv3d(Graph& g, std::string_view name, TensorId x, int64_t out_channels,
                std::vector<int64_t> kernel, const ConvLayerOptions& options) {
  return conv_layer(g, name, x, out_channels, std::move(kernel), options, 5);
}

TensorId conv_transpose(Graph& g, std::string_view name, TensorId x, int64_t out_channels,
                        std::vector<int64_t> kernel, const ConvLayerOptions& o) {
  if (!check_layer(g, name, x, 0, out_channels, kernel)) return kNoTensor;
  const Shape s = g.tensor(x).shape;
  const size_t r = s.size() - 2;
  kernel = spatial(std::move(kernel), r, 1, true);
  std::vector<int64_t> stride = spatial(o.stride, r, 1, true);
  Shape w_shape = {s[1], out_channels};
  w_shape.insert(w_shape.end(), kernel.begin(), kernel.end());
  if (!weight_shape_ok(g, name, w_shape)) return kNoTensor;
  // Each output pixel sums C*prod(k)/prod(s) inputs on average (the bounds
  // of w_shape keep C*prod(k) in range; a prod(s) that overflows is huge).
  int64_t per_output = s[1] * num_elements(kernel);
  if (std::all_of(stride.begin(), stride.end(), [](int64_t v) { return v >= 1; })) {
    const std::optional<int64_t> strides = checked_num_elements(stride);
    per_output = strides ? per_output / *strides : 0;
  }
  auto [w, b] = layer_params(g, name, std::move(w_shape), per_output, out_channels, o);
  if (!g.status().ok()) return kNoTensor;
  return deconv(g, name, x, w, b, {stride, spatial(o.pad, r, 0, true)});
}

TensorId upsample(Graph& g, std::string_view name, TensorId x, std::vector<int64_t> scale,
                  std::string_view mode) {
  if (!usable(g, name, x)) return kNoTensor;
  Attrs a = {{"scale", spatial(std::move(scale), spatial_rank(g, x), 1, true)},
             {"mode", std::string(mode)}};
  return add_op(g, OpKind::kUpsample, name, {x}, std::move(a));
}

TensorId clip(Graph& g, std::string_view name, TensorId x, double min, double max) {
  return add_op(g, OpKind::kClip, name, {x}, {{"min", min}, {"max", max}});
}

TensorId tanh(Graph& g, std::string_view name, TensorId x) {
  return add_op(g, OpKind::kTanh, name, {x});
}

TensorId gelu(Graph& g, std::string_view name, TensorId x) {
  return add_op(g, OpKind::kGelu, name, {x});
}

TensorId hard_sigmoid(Graph& g, std::string_view name, TensorId x, double alpha, double beta) {
  return add_op(g, OpKind::kHardSigmoid, name, {x}, {{"alpha", alpha}, {"beta", beta}});
}

TensorId hard_swish(Graph& g, std::string_view name, TensorId x) {
  return add_op(g, OpKind::kHardSwish, name, {x});
}

TensorId reshape(Graph& g, std::string_view name, TensorId x, Shape shape) {
  return add_op(g, OpKind::kReshape, name, {x}, {{"shape", std::move(shape)}});
}

TensorId flatten(Graph& g, std::string_view name, TensorId x, int64_t axis) {
  if (!usable(g, name, x)) return kNoTensor;
  const Shape& s = g.tensor(x).shape;
  if (axis < 0 || axis > static_cast<int64_t>(s.size())) {
    g.record_error(absl::InvalidArgumentError(str_cat("node '", name, "' (flatten): axis ", axis,
                                                      " is out of range [0, ", s.size(), "] for x ",
                                                      shape_str(s))));
    return kNoTensor;
  }
  const auto mid = s.begin() + axis;
  const Shape y = {num_elements(Shape(s.begin(), mid)), num_elements(Shape(mid, s.end()))};
  return reshape(g, name, x, y);
}

TensorId transpose(Graph& g, std::string_view name, TensorId x, std::vector<int64_t> perm) {
  if (!usable(g, name, x)) return kNoTensor;
  if (perm.empty()) {
    const auto rank = static_cast<int64_t>(g.tensor(x).shape.size());
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  return add_op(g, OpKind::kTranspose, name, {x}, {{"perm", std::move(perm)}});
}

TensorId linear(Graph& g, std::string_view name, TensorId x, TensorId w, TensorId b, bool trans_b) {
  return add_op(g, OpKind::kLinear, name, with_bias(x, w, b),
                {{"trans_b", int64_t{trans_b ? 1 : 0}}});
}

TensorId matmul(Graph& g, std::string_view name, TensorId a, TensorId b, bool trans_a,
                bool trans_b) {
  return add_op(g, OpKind::kMatMul, name, {a, b},
                {{"trans_a", int64_t{trans_a ? 1 : 0}}, {"trans_b", int64_t{trans_b ? 1 : 0}}});
}

TensorId relu(Graph& g, std::string_view name, TensorId x) {
  return add_op(g, OpKind::kRelu, name, {x});
}

TensorId leaky_relu(Graph& g, std::string_view name, TensorId x, double alpha) {
  return add_op(g, OpKind::kLeakyRelu, name, {x}, {{"alpha", alpha}});
}

TensorId sigmoid(Graph& g, std::string_view name, TensorId x) {
  return add_op(g, OpKind::kSigmoid, name, {x});
}

TensorId softmax(Graph& g, std::string_view name, TensorId x) {
  return add_op(g, OpKind::kSoftmax, name, {x});
}

TensorId softmax(Graph& g, std::string_view name, TensorId x, int64_t axis) {
  return add_op(g, OpKind::kSoftmax, name, {x}, {{std::string(kAxisAttr), axis}});
}

TensorId add(Graph& g, std::string_view name, TensorId a, TensorId b) {
  return add_op(g, OpKind::kAdd, name, {a, b});
}

TensorId mul(Graph& g, std::string_view name, TensorId a, TensorId b) {
  return add_op(g, OpKind::kMul, name, {a, b});
}

TensorId scale(Graph& g, std::string_view name, TensorId x, double factor) {
  return add_op(g, OpKind::kScale, name, {x}, {{"factor", factor}});
}

TensorId cast(Graph& g, std::string_view name, TensorId x, DType to) {
  return add_op(g, OpKind::kCast, name, {x}, {{"to", std::string(dtype_name(to))}});
}

TensorId dropout(Graph& g, std::string_view name, TensorId x, double ratio, int64_t seed) {
  return add_op(g, OpKind::kDropout, name, {x}, {{"ratio", ratio}, {"seed", seed}});
}

TensorId concat(Graph& g, std::string_view name, const std::vector<TensorId>& xs) {
  return add_op(g, OpKind::kConcat, name, xs);
}

TensorId slice(Graph& g, std::string_view name, TensorId x, int64_t begin, int64_t size) {
  return add_op(g, OpKind::kSlice, name, {x}, {{"begin", begin}, {"size", size}});
}

TensorId concat(Graph& g, std::string_view name, const std::vector<TensorId>& xs, int64_t axis) {
  return add_op(g, OpKind::kConcat, name, xs, {{std::string(kAxisAttr), axis}});
}

TensorId slice(Graph& g, std::string_view name, TensorId x, int64_t begin, int64_t size,
               int64_t axis) {
  return add_op(g, OpKind::kSlice, name, {x},
                {{"begin", begin}, {"size", size}, {std::string(kAxisAttr), axis}});
}

TensorId fill(Graph& g, std::string_view name, Shape shape, double value) {
  return add_op(g, OpKind::kFill, name, {}, {{"shape", std::move(shape)}, {"value", value}});
}

TensorId max_pool(Graph& g, std::string_view name, TensorId x, const PoolOptions& o) {
  if (!usable(g, name, x)) return kNoTensor;
  const size_t r = spatial_rank(g, x);
  Attrs a = {{"kernel", o.kernel},
             {"stride", o.stride.empty() ? o.kernel : o.stride},
             {"pad", spatial(o.pad, r, 0)}};
  if (o.ceil_mode) a["ceil_mode"] = int64_t{1};
  return add_op(g, OpKind::kMaxPool, name, {x}, std::move(a));
}

TensorId avg_pool(Graph& g, std::string_view name, TensorId x, const PoolOptions& o) {
  if (!usable(g, name, x)) return kNoTensor;
  const size_t r = spatial_rank(g, x);
  Attrs a = {{"kernel", o.kernel},
             {"stride", o.stride.empty() ? o.kernel : o.stride},
             {"pad", spatial(o.pad, r, 0)},
             {"count_include_pad", int64_t{o.count_include_pad ? 1 : 0}}};
  if (o.ceil_mode) a["ceil_mode"] = int64_t{1};
  return add_op(g, OpKind::kAvgPool, name, {x}, std::move(a));
}

TensorId global_avg_pool(Graph& g, std::string_view name, TensorId x) {
  if (!usable(g, name, x)) return kNoTensor;
  const Shape& s = g.tensor(x).shape;
  // A rank other than 4 or 5 reaches avg_pool's shape check, which names it.
  const std::vector<int64_t> spatial_dims(s.size() > 2 ? s.begin() + 2 : s.end(), s.end());
  return avg_pool(g, name, x, {.kernel = spatial_dims, .stride = spatial_dims});
}

TensorId max_pool2d(Graph& g, std::string_view name, TensorId x, int64_t kernel, int64_t stride,
                    int64_t pad) {
  return pool_nd(g, name, x, 4, kernel, stride, pad);
}

TensorId max_pool3d(Graph& g, std::string_view name, TensorId x, int64_t kernel, int64_t stride,
                    int64_t pad) {
  return pool_nd(g, name, x, 5, kernel, stride, pad);
}

TensorId instance_norm(Graph& g, std::string_view name, TensorId x, TensorId gamma, TensorId beta,
                       double eps) {
  return add_op(g, OpKind::kInstanceNorm, name, {x, gamma, beta}, {{"eps", eps}});
}

TensorId instance_norm(Graph& g, std::string_view name, TensorId x, double eps) {
  auto [gamma, beta] = norm_params(g, name, x);
  return instance_norm(g, name, x, gamma, beta, eps);
}

TensorId batch_norm(Graph& g, std::string_view name, TensorId x, TensorId gamma, TensorId beta,
                    double eps) {
  return add_op(g, OpKind::kBatchNorm, name, {x, gamma, beta}, {{"eps", eps}});
}

TensorId batch_norm(Graph& g, std::string_view name, TensorId x, double eps) {
  auto [gamma, beta] = norm_params(g, name, x);
  return batch_norm(g, name, x, gamma, beta, eps);
}

TensorId batch_norm(Graph& g, std::string_view name, TensorId x, TensorId gamma, TensorId beta,
                    TensorId running_mean, TensorId running_var, const BatchNormOptions& options) {
  for (TensorId t : {x, gamma, beta, running_mean, running_var}) {
    if (!usable(g, name, t)) return kNoTensor;
  }
  std::vector<TensorId> outs =
      g.add(OpKind::kBatchNorm, name, {x, gamma, beta, running_mean, running_var},
            {{"eps", options.eps},
             {"momentum", options.momentum},
             {"training", int64_t{options.training ? 1 : 0}}});
  return outs.empty() ? kNoTensor : outs[0];
}

TensorId batch_norm(Graph& g, std::string_view name, TensorId x, const BatchNormOptions& options) {
  auto [gamma, beta] = norm_params(g, name, x);
  if (gamma == kNoTensor) return kNoTensor;
  const Shape c = g.tensor(gamma).shape;
  TensorId mean = g.optimizer_state(str_cat(name, "/running_mean"), c, Init::zeros());
  TensorId var = g.optimizer_state(str_cat(name, "/running_var"), c, Init::constant(1.0));
  return batch_norm(g, name, x, gamma, beta, mean, var, options);
}

TensorId layer_norm(Graph& g, std::string_view name, TensorId x, TensorId gamma, TensorId beta,
                    const LayerNormOptions& options) {
  return add_op(g, OpKind::kLayerNorm, name, {x, gamma, beta}, {{"eps", options.eps}});
}

TensorId layer_norm(Graph& g, std::string_view name, TensorId x, const LayerNormOptions& options) {
  if (!usable(g, name, x)) return kNoTensor;
  const Shape& s = g.tensor(x).shape;
  if (s.empty()) {
    g.record_error(absl::InvalidArgumentError(
        str_cat("layer '", name, "': input must be [..., C], got ", shape_str(s))));
    return kNoTensor;
  }
  const int64_t c = s.back();
  TensorId gamma = g.parameter(str_cat(name, "/gamma"), {c}, Init::constant(1.0));
  TensorId beta = g.parameter(str_cat(name, "/beta"), {c}, Init::zeros());
  return layer_norm(g, name, x, gamma, beta, options);
}

TensorId attention(Graph& g, std::string_view name, TensorId q, TensorId k, TensorId v,
                   double softmax_scale, bool causal) {
  for (TensorId t : {q, k, v}) {
    if (!usable(g, name, t)) return kNoTensor;
  }
  std::vector<TensorId> outs =
      g.add(OpKind::kAttention, name, {q, k, v},
            {{"softmax_scale", softmax_scale}, {"causal", int64_t{causal ? 1 : 0}}});
  return outs.empty() ? kNoTensor : outs[0];
}

TensorId mse_loss(Graph& g, std::string_view name, TensorId pred, TensorId target) {
  return add_op(g, OpKind::kMseLoss, name, {pred, target});
}

TensorId soft_dice_loss(Graph& g, std::string_view name, TensorId probs, TensorId target,
                        double eps) {
  return add_op(g, OpKind::kSoftDiceLoss, name, {probs, target}, {{"eps", eps}});
}

TensorId softmax_cross_entropy(Graph& g, std::string_view name, TensorId logits, TensorId labels,
                               int64_t ignore_index) {
  return add_op(g, OpKind::kSoftmaxCrossEntropy, name, {logits, labels},
                {{"ignore_index", ignore_index}});
}

TensorId linear_cross_entropy(Graph& g, std::string_view name, TensorId x, TensorId w,
                              TensorId labels, bool trans_b, int64_t ignore_index) {
  for (TensorId t : {x, w, labels}) {
    if (!usable(g, name, t)) return kNoTensor;
  }
  return g.add1(OpKind::kLinearCrossEntropy, name, {x, w, labels},
                {{"trans_b", int64_t{trans_b ? 1 : 0}}, {"ignore_index", ignore_index}});
}

TensorId reduce_mean(Graph& g, std::string_view name, TensorId x) {
  return add_op(g, OpKind::kReduceMean, name, {x});
}

TensorId reduce_mean(Graph& g, std::string_view name, TensorId x, int64_t axis) {
  return add_op(g, OpKind::kReduceMean, name, {x}, {{std::string(kAxisAttr), axis}});
}

TensorId embedding(Graph& g, std::string_view name, TensorId ids, TensorId table) {
  return add_op(g, OpKind::kEmbedding, name, {ids, table});
}

}  // namespace lms
