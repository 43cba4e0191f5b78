// Shape inference and attribute validation of every op, and the public
// builders of lms/ops.h (parameters, shapes, roles, inits, error recording).
#include "lms/ops.h"

#include <limits>
#include <set>

#include "graph/op_registry.h"
#include "gtest/gtest.h"

namespace lms {
namespace {

using Ints = std::vector<int64_t>;
using Shapes = std::vector<Shape>;

// The registry's shape inference of one node "n" of `op` reading `in`.
absl::StatusOr<Shapes> infer(OpKind op, const Attrs& attrs, const Shapes& in) {
  return op_def(op).infer(OpInstance{"n", op, attrs, in});
}

struct Valid {
  OpKind op;
  Shapes in;
  Attrs attrs;
  Shapes out;
};

struct Invalid {
  OpKind op;
  Shapes in;
  Attrs attrs;
  std::string message;  // expected substring, naming the attr or input
};

Attrs geom2(Ints stride = {1, 1}, Ints pad = {0, 0}, Ints dilation = {1, 1}) {
  return {{"stride", stride}, {"pad", pad}, {"dilation", dilation}};
}

Attrs mm(int64_t trans_a, int64_t trans_b) { return {{"trans_a", trans_a}, {"trans_b", trans_b}}; }

Attrs with(Attrs a, const std::string& key, AttrValue v) {
  a[key] = std::move(v);
  return a;
}

std::vector<Valid> valid_cases() {
  const Shape x4 = {2, 3, 8, 8}, x5 = {1, 2, 4, 6, 6};
  const Attrs pool = {{"kernel", Ints{2, 2}}, {"stride", Ints{2, 2}}, {"pad", Ints{0, 0}}};
  const Attrs adam = {{"lr", 1e-3},  {"beta1", 0.9},        {"beta2", 0.999},
                      {"eps", 1e-8}, {"weight_decay", 0.0}, {"clip_norm", 0.0}};
  const Attrs sgd = {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.0}, {"clip_norm", 1.0}};
  const Attrs amp = {
      {"growth_factor", 2.0}, {"backoff_factor", 0.5}, {"growth_interval", int64_t{2000}}};
  return {
      {OpKind::kConv, {x4, {4, 3, 3, 3}, {4}}, geom2({1, 1}, {1, 1}), {{2, 4, 8, 8}}},
      {OpKind::kConv, {x4, {4, 3, 3, 3}}, geom2({2, 2}, {0, 0}, {2, 2}), {{2, 4, 2, 2}}},
      {OpKind::kConv,
       {x5, {3, 2, 3, 3, 3}},
       {{"stride", Ints{1, 1, 1}}, {"pad", Ints{1, 1, 1}}, {"dilation", Ints{1, 1, 1}}},
       {{1, 3, 4, 6, 6}}},
      {OpKind::kConv,
       {{2, 6, 8, 8}, {4, 3, 3, 3}, {4}},
       with(geom2({1, 1}, {1, 1}), "group", int64_t{2}),
       {{2, 4, 8, 8}}},
      {OpKind::kConv,
       {{2, 6, 8, 8}, {6, 1, 3, 3}},
       with(geom2({2, 2}, {1, 1}), "group", int64_t{6}),
       {{2, 6, 4, 4}}},
      {OpKind::kConvBwdWeights,
       {{2, 6, 8, 8}, {2, 6, 8, 8}},
       with(with(with(geom2({1, 1}, {1, 1}), "weight_shape", Ints{6, 1, 3, 3}), "has_bias",
                 int64_t{0}),
            "group", int64_t{6}),
       {{6, 1, 3, 3}}},
      {OpKind::kConvBwdData,
       {{2, 4, 8, 8}, {4, 3, 3, 3}},
       with(geom2({1, 1}, {1, 1}), "input_shape", Ints{2, 3, 8, 8}),
       {x4}},
      {OpKind::kConvBwdWeights,
       {x4, {2, 4, 8, 8}},
       with(with(geom2({1, 1}, {1, 1}), "weight_shape", Ints{4, 3, 3, 3}), "has_bias", int64_t{1}),
       {{4, 3, 3, 3}, {4}}},
      {OpKind::kDeconv,
       {x4, {3, 5, 2, 2}},
       {{"stride", Ints{2, 2}}, {"pad", Ints{0, 0}}},
       {{2, 5, 16, 16}}},
      {OpKind::kDeconvBwdData,
       {{2, 5, 16, 16}, {3, 5, 2, 2}},
       {{"stride", Ints{2, 2}}, {"pad", Ints{0, 0}}, {"input_shape", Ints{2, 3, 8, 8}}},
       {x4}},
      {OpKind::kDeconvBwdWeights,
       {x4, {2, 5, 16, 16}},
       {{"stride", Ints{2, 2}},
        {"pad", Ints{0, 0}},
        {"weight_shape", Ints{3, 5, 2, 2}},
        {"has_bias", int64_t{0}}},
       {{3, 5, 2, 2}}},
      {OpKind::kUpsample,
       {x5},
       {{"scale", Ints{2, 2, 2}}, {"mode", std::string("linear")}},
       {{1, 2, 8, 12, 12}}},
      {OpKind::kUpsampleBwd,
       {{1, 2, 8, 12, 12}},
       {{"scale", Ints{2, 2, 2}}, {"mode", std::string("nearest")}, {"input_shape", Ints(x5)}},
       {x5}},
      {OpKind::kLinear, {{5, 3}, {7, 3}, {7}}, {{"trans_b", int64_t{1}}}, {{5, 7}}},
      {OpKind::kLinear, {{5, 3}, {3, 7}}, {{"trans_b", int64_t{0}}}, {{5, 7}}},
      {OpKind::kLinearBwdWeights,
       {{5, 3}, {5, 7}},
       {{"trans_b", int64_t{1}}, {"has_bias", int64_t{1}}},
       {{7, 3}, {7}}},
      {OpKind::kLinearBwdWeights,
       {{5, 3}, {5, 7}},
       {{"trans_b", int64_t{0}}, {"has_bias", int64_t{0}}},
       {{3, 7}}},
      {OpKind::kMatMul, {{5, 3}, {3, 7}}, mm(0, 0), {{5, 7}}},
      {OpKind::kMatMul, {{2, 5, 3}, {2, 3, 7}}, mm(0, 0), {{2, 5, 7}}},
      {OpKind::kMatMul, {{2, 3, 5, 4}, {2, 3, 4, 6}}, mm(0, 0), {{2, 3, 5, 6}}},
      {OpKind::kMatMul, {{2, 3, 4, 5}, {2, 3, 6, 4}}, mm(1, 1), {{2, 3, 5, 6}}},
      {OpKind::kMatMul, {{2, 5, 4}, {4, 6}}, mm(0, 0), {{2, 5, 6}}},
      {OpKind::kMatMul, {{2, 5, 4}, {6, 4}}, mm(0, 1), {{2, 5, 6}}},
      {OpKind::kMatMul, {{4, 5}, {2, 3, 4, 6}}, mm(1, 0), {{2, 3, 5, 6}}},
      {OpKind::kMatMul, {{2, 1, 5, 4}, {3, 4, 6}}, mm(0, 0), {{2, 3, 5, 6}}},
      {OpKind::kAvgPool, {x4}, pool, {{2, 3, 4, 4}}},
      {OpKind::kAvgPool,
       {{2, 3, 7, 7}},
       {{"kernel", Ints{3, 3}},
        {"stride", Ints{2, 2}},
        {"pad", Ints{1, 1}},
        {"count_include_pad", int64_t{0}}},
       {{2, 3, 4, 4}}},
      {OpKind::kAvgPool,
       {x5},
       {{"kernel", Ints{4, 6, 6}}, {"stride", Ints{4, 6, 6}}, {"pad", Ints{0, 0, 0}}},
       {{1, 2, 1, 1, 1}}},
      {OpKind::kAvgPoolBwd, {{2, 3, 4, 4}}, with(pool, "input_shape", Ints{2, 3, 8, 8}), {x4}},
      {OpKind::kClip, {x4}, {{"min", 0.0}, {"max", 6.0}}, {x4}},
      {OpKind::kClipBwd, {x4, x4}, {{"min", -1.0}, {"max", 1.0}}, {x4}},
      {OpKind::kGelu, {x5}, {}, {x5}},
      {OpKind::kGeluBwd, {x4, x4}, {}, {x4}},
      {OpKind::kHardSigmoid, {x5}, {{"alpha", 1.0 / 6}, {"beta", 0.5}}, {x5}},
      {OpKind::kHardSigmoidBwd, {x4, x4}, {{"alpha", 0.2}, {"beta", 0.5}}, {x4}},
      {OpKind::kHardSwish, {x5}, {}, {x5}},
      {OpKind::kTanh, {x5}, {}, {x5}},
      {OpKind::kTanhBwd, {x4, x4}, {}, {x4}},
      {OpKind::kHardSwishBwd, {x4, x4}, {}, {x4}},
      {OpKind::kReshape, {x4}, {{"shape", Ints{2, 192}}}, {{2, 192}}},
      {OpKind::kReshape, {{2, 5, 1, 1}}, {{"shape", Ints{2, 5}}}, {{2, 5}}},
      {OpKind::kTranspose, {x4}, {{"perm", Ints{0, 2, 3, 1}}}, {{2, 8, 8, 3}}},
      {OpKind::kTranspose, {{4, 6}}, {{"perm", Ints{1, 0}}}, {{6, 4}}},
      {OpKind::kRelu, {x4}, {}, {x4}},
      {OpKind::kReluBwd, {x4, x4}, {}, {x4}},
      {OpKind::kLeakyRelu, {x4}, {{"alpha", 0.01}}, {x4}},
      {OpKind::kLeakyReluBwd, {x4, x4}, {{"alpha", 0.01}}, {x4}},
      {OpKind::kSigmoid, {x4}, {}, {x4}},
      {OpKind::kSigmoidBwd, {x4, x4}, {}, {x4}},
      {OpKind::kSoftmax, {x5}, {}, {x5}},
      {OpKind::kSoftmaxBwd, {x5, x5}, {}, {x5}},
      {OpKind::kAdd, {x4, x4}, {}, {x4}},
      {OpKind::kMul, {x4, x4}, {}, {x4}},
      {OpKind::kScale, {x4}, {{"factor", -2.0}}, {x4}},
      {OpKind::kDropout, {x5}, {{"ratio", 0.2}, {"seed", int64_t{3}}}, {x5}},
      {OpKind::kDropout, {{}}, {{"ratio", 0.0}, {"seed", int64_t{-1}}}, {{}}},
      {OpKind::kDropoutBwd, {x4}, {{"ratio", 0.5}, {"seed", int64_t{3}}}, {x4}},
      {OpKind::kConcat, {x4, {2, 5, 8, 8}, {2, 1, 8, 8}}, {}, {{2, 9, 8, 8}}},
      {OpKind::kSlice, {x4}, {{"begin", int64_t{1}}, {"size", int64_t{2}}}, {{2, 2, 8, 8}}},
      {OpKind::kSoftmax, {{7}}, {{"axis", int64_t{0}}}, {{7}}},
      {OpKind::kSoftmax, {{2, 3, 4, 5, 6, 7}}, {{"axis", int64_t{-1}}}, {{2, 3, 4, 5, 6, 7}}},
      {OpKind::kSoftmaxBwd, {{2, 3, 4}, {2, 3, 4}}, {{"axis", int64_t{-3}}}, {{2, 3, 4}}},
      {OpKind::kConcat, {{2, 3, 4}, {2, 3, 1}}, {{"axis", int64_t{-1}}}, {{2, 3, 5}}},
      {OpKind::kConcat, {{5}, {2}}, {{"axis", int64_t{0}}}, {{7}}},
      {OpKind::kSlice,
       {{2, 3, 4, 1, 1, 6}},
       {{"begin", int64_t{2}}, {"size", int64_t{4}}, {"axis", int64_t{5}}},
       {{2, 3, 4, 1, 1, 4}}},
      {OpKind::kReduceMean, {{2, 3, 4}}, {{"axis", int64_t{-2}}}, {{2, 1, 4}}},
      {OpKind::kReduceMean, {{}}, {}, {{}}},
      {OpKind::kMul, {{2, 8, 1, 1}, {2, 8, 5, 5}}, {}, {{2, 8, 5, 5}}},
      {OpKind::kAdd, {{2, 8, 5, 5}, {8, 1, 1}}, {}, {{2, 8, 5, 5}}},
      {OpKind::kAdd, {{3}, {}}, {}, {{3}}},
      {OpKind::kSumTo, {{2, 8, 5, 5}}, {{"shape", Ints{2, 8, 1, 1}}}, {{2, 8, 1, 1}}},
      {OpKind::kSumTo, {{2, 8, 5, 5}}, {{"shape", Ints{8, 1, 1}}}, {{8, 1, 1}}},
      {OpKind::kSumTo, {{2, 3}}, {{"shape", Ints{}}}, {{}}},
      {OpKind::kReduceMeanBwd,
       {{2, 1, 4}},
       {{"input_shape", Ints{2, 3, 4}}, {"axis", int64_t{1}}},
       {{2, 3, 4}}},
      {OpKind::kEmbedding, {{2, 5}, {10, 8}}, {}, {{2, 5, 8}}},
      {OpKind::kEmbedding, {{}, {10, 8}}, {}, {{8}}},
      {OpKind::kEmbeddingBwd, {{2, 5}, {2, 5, 8}}, {{"weight_shape", Ints{10, 8}}}, {{10, 8}}},
      {OpKind::kFill, {}, {{"shape", Ints{}}, {"value", 1.0}}, {{}}},
      {OpKind::kFill, {}, {{"shape", Ints{2, 3}}, {"value", 0.0}}, {{2, 3}}},
      {OpKind::kCast, {{2, 3}}, {{"to", std::string("bf16")}}, {{2, 3}}},
      {OpKind::kCast, {{}}, {{"to", std::string("f16")}}, {{}}},
      {OpKind::kMaxPool, {x4}, pool, {{2, 3, 4, 4}}},
      {OpKind::kMaxPoolBwd, {x4, {2, 3, 4, 4}}, pool, {x4}},
      {OpKind::kInstanceNorm, {x5, {2}, {2}}, {{"eps", 1e-5}}, {x5}},
      {OpKind::kInstanceNormBwd, {x5, {2}, x5}, {{"eps", 1e-5}}, {x5, {2}, {2}}},
      {OpKind::kBatchNorm, {x4, {3}, {3}}, {{"eps", 1e-5}}, {x4}},
      {OpKind::kBatchNormBwd, {x4, {3}, x4}, {{"eps", 1e-5}}, {x4, {3}, {3}}},
      {OpKind::kBatchNorm,
       {x4, {3}, {3}, {3}, {3}},
       {{"eps", 1e-5}, {"momentum", 0.1}},
       {x4, {3}, {3}}},
      {OpKind::kBatchNorm,
       {x4, {3}, {3}, {3}, {3}},
       {{"eps", 1e-5}, {"training", int64_t{0}}},
       {x4}},
      {OpKind::kBnStatsUpdate,
       {{3}, {3}, {3}, {3}},
       {{"momentum", 0.1}, {"count", int64_t{32}}},
       {}},
      {OpKind::kLayerNorm, {{4, 16}, {16}, {16}}, {{"eps", 1e-5}}, {{4, 16}}},
      {OpKind::kLayerNorm, {x4, {8}, {8}}, {{"eps", 1e-5}}, {x4}},
      {OpKind::kLayerNormBwd,
       {{2, 5, 16}, {16}, {2, 5, 16}},
       {{"eps", 1e-5}},
       {{2, 5, 16}, {16}, {16}}},
      {OpKind::kAttention,
       {{2, 3, 7, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}},
       {{"softmax_scale", 0.5}, {"causal", int64_t{1}}},
       {{2, 3, 7, 4}, {2, 3, 7}}},
      {OpKind::kAttention,
       {{2, 3, 7, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}},
       {{"softmax_scale", 0.5}, {"causal", int64_t{0}}},
       {{2, 3, 7, 4}, {2, 3, 7}}},
      {OpKind::kAttentionBwd,
       {{2, 3, 7, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7}, {2, 3, 7, 4}},
       {{"softmax_scale", 0.5}, {"causal", int64_t{0}}},
       {{2, 3, 7, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}}},
      {OpKind::kMseLoss, {x4, x4}, {}, {{}}},
      {OpKind::kMseLossBwd, {x4, x4, {}}, {}, {x4}},
      {OpKind::kSoftDiceLoss, {x5, x5}, {{"eps", 1e-5}}, {{}}},
      {OpKind::kSoftDiceLossBwd, {x5, x5, {}}, {{"eps", 1e-5}}, {x5}},
      {OpKind::kSoftmaxCrossEntropy, {{4, 10}, {4}}, {}, {{}}},
      {OpKind::kSoftmaxCrossEntropy, {{1, 1}, {1}}, {{"ignore_index", int64_t{0}}}, {{}}},
      {OpKind::kSoftmaxCrossEntropyBwd,
       {{4, 10}, {4}, {}},
       {{"ignore_index", int64_t{-100}}},
       {{4, 10}}},
      {OpKind::kLinearCrossEntropy, {{2, 5, 8}, {300, 8}, {2, 5}}, {{"trans_b", int64_t{1}}}, {{}}},
      {OpKind::kLinearCrossEntropy,
       {{10, 8}, {8, 300}, {10}},
       {{"trans_b", int64_t{0}}, {"ignore_index", int64_t{-1}}},
       {{}}},
      {OpKind::kLinearCrossEntropyBwd,
       {{2, 5, 8}, {300, 8}, {2, 5}, {}},
       {{"trans_b", int64_t{1}}},
       {{2, 5, 8}, {300, 8}}},
      {OpKind::kReduceMean, {x4}, {}, {{}}},
      {OpKind::kReduceMeanBwd, {{}}, {{"input_shape", Ints(x4)}}, {x4}},
      {OpKind::kGlobalNorm, {{4, 3, 3, 3}, {4}}, {}, {{}}},
      {OpKind::kIncrement, {{}}, {}, {}},
      {OpKind::kIncrement, {{}, {}}, {}, {}},
      {OpKind::kSgdUpdate, {{4}, {4}, {4}, {}}, sgd, {}},
      {OpKind::kSgdUpdate, {{4}, {4}, {4}, {}, {}}, with(sgd, "loss_scaling", int64_t{1}), {}},
      {OpKind::kAdamUpdate, {{4}, {4}, {4}, {4}, {}}, adam, {}},
      {OpKind::kAdamUpdate,
       {{4}, {4}, {4}, {4}, {}, {}, {}},
       with(adam, "loss_scaling", int64_t{1}),
       {}},
      {OpKind::kAmpUpdateScale, {{}, {}, {}}, amp, {}},
      {OpKind::kSwapOut, {x4}, {}, {x4}},
      {OpKind::kSwapIn, {x4}, {}, {x4}},
      {OpKind::kAllReduce, {x4, x5, {1}}, {}, {x4, x5, {1}}},
      {OpKind::kAllReduce, {x4}, {{"release_after", std::string("update/w")}}, {x4}},
  };
}

std::vector<Invalid> invalid_cases() {
  const Shape x4 = {2, 3, 8, 8}, x5 = {1, 2, 4, 6, 6};
  const Attrs adam = {{"lr", 1e-3},  {"beta1", 0.9},        {"beta2", 0.999},
                      {"eps", 1e-8}, {"weight_decay", 0.0}, {"clip_norm", 0.0}};
  const Attrs kAttn = {{"softmax_scale", 0.5}, {"causal", int64_t{0}}};
  const Attrs sgd = {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.0}, {"clip_norm", 1.0}};
  const Attrs amp = {
      {"growth_factor", 2.0}, {"backoff_factor", 0.5}, {"growth_interval", int64_t{2000}}};
  return {
      {OpKind::kConv,
       {x4, {4, 3, 3, 3}},
       geom2({1}),
       "node 'n' (op conv): stride must have 2 entries for a 4-D input (NCHW), got [1]"},
      {OpKind::kConv, {x4, {4, 3, 3, 3}}, geom2({0, 1}), "stride entries must be >= 1"},
      {OpKind::kConv, {x4, {4, 3, 3, 3}}, geom2({1, 1}, {-1, 0}), "pad entries must be >= 0"},
      {OpKind::kConv,
       {x4, {4, 3, 3, 3}},
       geom2({1, 1}, {0, 0}, {1, 0}),
       "dilation entries must be >= 1"},
      {OpKind::kConv, {x4, {4, 2, 3, 3}}, geom2(), "input channels"},
      {OpKind::kConv, {{2, 3, 8}, {4, 3, 3}}, geom2(), "input x must be 4-D (NCHW) or 5-D"},
      {OpKind::kConv, {x4, {4, 3, 3, 3, 3}}, geom2(), "weight must be 4-D"},
      {OpKind::kConv, {x4, {4, 3, 3, 3}, {3}}, geom2(), "bias must have shape [4]"},
      {OpKind::kConv, {x4, {4, 3, 9, 9}}, geom2(), "output size is not positive"},
      {OpKind::kConv,
       {x5, {4, 2, 3, 3, 3}},
       geom2(),
       "stride must have 3 entries for a 5-D input (NCDHW)"},
      {OpKind::kConvBwdData,
       {{2, 4, 7, 7}, {4, 3, 3, 3}},
       with(geom2({1, 1}, {1, 1}), "input_shape", Ints{2, 3, 8, 8}),
       "dy [2,4,7,7] does not match"},
      {OpKind::kConvBwdWeights,
       {x4, {2, 4, 8, 8}},
       with(with(geom2({1, 1}, {1, 1}), "weight_shape", Ints{4, 3, 3, 3}), "has_bias", int64_t{2}),
       "has_bias must be 0 or 1"},
      {OpKind::kDeconv,
       {x4, {4, 5, 2, 2}},
       {{"stride", Ints{2, 2}}, {"pad", Ints{0, 0}}},
       "input channels"},
      {OpKind::kDeconv,
       {x4, {3, 5, 2, 2}},
       {{"stride", Ints{2, 2}}, {"pad", Ints{9, 0}}},
       "output size is not positive"},
      {OpKind::kDeconv, {x4, {3, 5, 2, 2}}, geom2(), "unknown attribute 'dilation'"},
      {OpKind::kUpsample,
       {x4},
       {{"scale", Ints{2, 0}}, {"mode", std::string("nearest")}},
       "scale entries must be >= 1"},
      {OpKind::kUpsample,
       {x4},
       {{"scale", Ints{2, 2}}, {"mode", std::string("cubic")}},
       "mode must be \"nearest\" or \"linear\""},
      {OpKind::kUpsampleBwd,
       {{2, 3, 8, 8}},
       {{"scale", Ints{2, 2}}, {"mode", std::string("nearest")}, {"input_shape", Ints(x4)}},
       "does not match"},
      {OpKind::kReluBwd, {x4, {2, 3, 8, 4}}, {}, "dy [2,3,8,4] must have the shape of y"},
      {OpKind::kLeakyRelu, {x4}, {{"alpha", int64_t{1}}}, "'alpha' must be of type real"},
      {OpKind::kSoftmax, {{5}}, {}, "axis 1 is out of range [-1, 0] for x [5] of rank 1"},
      {OpKind::kAdd, {x4, {2, 3, 8, 4}}, {}, "a [2,3,8,8] and b [2,3,8,4] do not broadcast"},
      {OpKind::kMul, {x4}, {}, "takes 2 inputs, got 1"},
      {OpKind::kScale, {x4}, {}, "missing attribute 'factor'"},
      {OpKind::kDropout, {x4}, {{"ratio", 1.0}, {"seed", int64_t{1}}}, "ratio must be in [0, 1)"},
      {OpKind::kDropoutBwd,
       {x4},
       {{"ratio", -0.5}, {"seed", int64_t{1}}},
       "ratio must be in [0, 1), got -0.5"},
      {OpKind::kDropout, {x4}, {{"ratio", 0.5}, {"seed", 1.0}}, "'seed' must be of type int"},
      {OpKind::kConcat, {x4, {2, 3, 8, 4}}, {}, "outside axis 1"},
      {OpKind::kSlice, {x4}, {{"begin", int64_t{2}}, {"size", int64_t{2}}}, "begin + size <= 3"},
      {OpKind::kSoftmax, {{2, 3}}, {{"axis", int64_t{2}}}, "axis 2 is out of range [-2, 1]"},
      {OpKind::kSoftmax, {{}}, {{"axis", int64_t{0}}}, "scalar (shape []), which has no axis"},
      {OpKind::kSoftmax, {{4}}, {}, "axis 1 is out of range [-1, 0]"},
      {OpKind::kConcat,
       {{2, 3, 4}, {2, 3, 4}},
       {{"axis", int64_t{-4}}},
       "axis -4 is out of range [-3, 2]"},
      {OpKind::kConcat, {{2, 3, 4}, {2, 2, 4}}, {{"axis", int64_t{-1}}}, "outside axis 2"},
      {OpKind::kSlice,
       {{2, 3, 4}},
       {{"begin", int64_t{3}}, {"size", int64_t{2}}, {"axis", int64_t{-1}}},
       "begin + size <= 4 (size of axis 2 of x)"},
      {OpKind::kSlice,
       {{2, 3, 4}},
       {{"begin", int64_t{0}}, {"size", int64_t{1}}, {"axis", 1.0}},
       "attribute 'axis' must be of type int"},
      {OpKind::kReduceMean, {{2, 3}}, {{"axis", int64_t{2}}}, "axis 2 is out of range [-2, 1]"},
      {OpKind::kAdd, {{2, 3}, {4, 3}}, {}, "do not broadcast"},
      {OpKind::kMul, {{2, 1}, {1, 3}}, {}, "one operand must have the output's shape"},
      {OpKind::kSumTo, {{2, 3}}, {{"shape", Ints{3, 1}}}, "must broadcast to x [2,3]"},
      {OpKind::kSumTo, {{2, 3}}, {{"shape", Ints{1, 2, 3}}}, "of no higher rank"},
      {OpKind::kReduceMeanBwd,
       {{2, 3, 4}},
       {{"input_shape", Ints{2, 3, 4}}, {"axis", int64_t{1}}},
       "with axis 1 reduced to 1"},
      {OpKind::kLinear,
       {{5, 3}, {7, 4}},
       {{"trans_b", int64_t{1}}},
       "weight w [7,4] must be [K,C]"},
      {OpKind::kLinear, {{5, 3}, {3, 7}}, {{"trans_b", int64_t{2}}}, "trans_b must be 0 or 1"},
      {OpKind::kMatMul, {{5, 3}, {4, 7}}, mm(0, 0), "has K = 3, b [4,7] (trans_b 0) has K = 4"},
      {OpKind::kMatMul, {{2, 5, 3}, {2, 7, 4}}, mm(0, 1), "inner dimensions disagree"},
      {OpKind::kMatMul, {{3, 5}, {3, 7}}, mm(0, 0), "inner dimensions disagree"},
      {OpKind::kMatMul, {{5}, {5, 7}}, mm(0, 0), "a [5] must have rank 2 to 4"},
      {OpKind::kMatMul, {{1, 2, 2, 5, 3}, {3, 7}}, mm(0, 0), "must have rank 2 to 4"},
      {OpKind::kMatMul, {{5, 3}, {1, 2, 2, 3, 7}}, mm(0, 0), "b [1,2,2,3,7] must have rank 2 to 4"},
      {OpKind::kMatMul,
       {{2, 5, 3}, {4, 3, 7}},
       mm(0, 0),
       "batch dimensions of a [2,5,3] and b [4,3,7] do not broadcast"},
      {OpKind::kMatMul, {{5, 3}, {3, 7}}, mm(2, 0), "trans_a must be 0 or 1"},
      {OpKind::kLinear, {{5, 3, 2}, {7, 3}}, {{"trans_b", int64_t{1}}}, "input x must be 2-D"},
      {OpKind::kLinear, {{5, 3}, {7, 3}, {6}}, {{"trans_b", int64_t{1}}}, "bias b [6] must be [7]"},
      {OpKind::kLinearBwdWeights,
       {{5, 3}, {4, 7}},
       {{"trans_b", int64_t{1}}, {"has_bias", int64_t{0}}},
       "dy [4,7] must have x's 5 rows"},
      {OpKind::kAvgPool,
       {{2, 3, 8, 8}},
       {{"kernel", Ints{2, 2}},
        {"stride", Ints{2, 2}},
        {"pad", Ints{0, 0}},
        {"count_include_pad", int64_t{2}}},
       "count_include_pad must be 0 or 1"},
      {OpKind::kAvgPool,
       {{2, 3, 8, 8}},
       {{"kernel", Ints{2, 2}}, {"stride", Ints{2, 2}}, {"pad", Ints{2, 2}}},
       "pad must be smaller than kernel"},
      {OpKind::kAvgPoolBwd,
       {{2, 3, 5, 4}},
       {{"kernel", Ints{2, 2}},
        {"stride", Ints{2, 2}},
        {"pad", Ints{0, 0}},
        {"input_shape", Ints{2, 3, 8, 8}}},
       "dy [2,3,5,4] does not match the forward output [2,3,4,4]"},
      {OpKind::kClip, {x4}, {{"min", 6.0}, {"max", 0.0}}, "min 6 must not exceed max 0"},
      {OpKind::kClipBwd, {x4, {2, 3}}, {{"min", 0.0}, {"max", 6.0}}, "dy"},
      {OpKind::kGeluBwd, {x4, {2, 3}}, {}, "dy"},
      {OpKind::kHardSwishBwd, {x4, {2, 3}}, {}, "dy"},
      {OpKind::kTanhBwd, {x4, {2, 3}}, {}, "dy"},
      {OpKind::kHardSigmoid, {x4}, {{"alpha", 0.2}}, "beta"},
      {OpKind::kReshape, {x4}, {{"shape", Ints{2, 191}}}, "shape [2,191] has 382 elements"},
      {OpKind::kTranspose, {x4}, {{"perm", Ints{0, 1, 2}}}, "perm has 3 entries but x"},
      {OpKind::kTranspose, {x4}, {{"perm", Ints{0, 1, 1, 2}}}, "is not a permutation of 0..3"},
      {OpKind::kConv,
       {{2, 6, 8, 8}, {4, 3, 3, 3}},
       with(geom2(), "group", int64_t{4}),
       "group 4 must divide the 6 channels of x and the 4 outputs"},
      {OpKind::kConv,
       {{2, 6, 8, 8}, {4, 2, 3, 3}},
       with(geom2(), "group", int64_t{2}),
       "has 2 input channels per group but x [2,6,8,8] has 6 in 2 groups"},
      {OpKind::kConv,
       {{2, 6, 8, 8}, {4, 3, 3, 3}},
       with(geom2(), "group", int64_t{0}),
       "group must be >= 1"},
      {OpKind::kEmbedding, {{2, 5}, {10}}, {}, "table must be 2-D [V,D]"},
      {OpKind::kEmbeddingBwd,
       {{2, 5}, {2, 4, 8}},
       {{"weight_shape", Ints{10, 8}}},
       "dy [2,4,8] must be ids [2,5] + [D]"},
      {OpKind::kFill,
       {},
       {{"shape", Ints{2, 0}}, {"value", 1.0}},
       "shape: every dimension must be positive"},
      {OpKind::kCast,
       {{2, 3}},
       {{"to", std::string("f64")}},
       "attribute 'to' is \"f64\"; allowed: \"f32\", \"bf16\", \"f16\""},
      {OpKind::kCast, {{2, 3}}, {{"to", std::string("i64")}}, "allowed: \"f32\""},
      {OpKind::kMaxPool,
       {x4},
       {{"kernel", Ints{2, 2}}, {"stride", Ints{2, 2}}, {"pad", Ints{2, 0}}},
       "pad must be smaller than kernel"},
      {OpKind::kMaxPool,
       {x4},
       {{"kernel", Ints{2}}, {"stride", Ints{2, 2}}, {"pad", Ints{0, 0}}},
       "kernel must have 2 entries"},
      {OpKind::kInstanceNorm, {x5, {3}, {3}}, {{"eps", 1e-5}}, "gamma must have shape [2]"},
      {OpKind::kInstanceNorm, {x5, {2}, {2}}, {{"eps", 0.0}}, "eps must be in (0"},
      {OpKind::kBatchNorm, {x4, {3}, {4}}, {{"eps", 1e-5}}, "beta must have shape [3]"},
      {OpKind::kBatchNormBwd, {x4, {3}, x5}, {{"eps", 1e-5}}, "dy"},
      {OpKind::kBatchNorm, {x4, {3}, {3}, {3}}, {{"eps", 1e-5}}, "come together"},
      {OpKind::kBatchNorm, {x4, {3}, {3}, {3}, {4}}, {{"eps", 1e-5}}, "running_var must have"},
      {OpKind::kBatchNorm,
       {x4, {3}, {3}},
       {{"eps", 1e-5}, {"training", int64_t{0}}},
       "eval mode) needs running_mean"},
      {OpKind::kBatchNorm, {x4, {3}, {3}}, {{"eps", 1e-5}, {"momentum", 0.1}}, "momentum needs"},
      {OpKind::kBatchNorm,
       {x4, {3}, {3}, {3}, {3}},
       {{"eps", 1e-5}, {"momentum", 1.5}},
       "momentum must be in [0, 1]"},
      {OpKind::kBatchNorm,
       {x4, {3}, {3}, {3}, {3}},
       {{"eps", 1e-5}, {"training", int64_t{2}}},
       "training must be 0"},
      {OpKind::kLayerNorm, {x4, {3}, {8}}, {{"eps", 1e-5}}, "gamma must have shape [8]"},
      {OpKind::kLayerNorm, {x4, {8}, {3}}, {{"eps", 1e-5}}, "beta must have shape [8]"},
      {OpKind::kLayerNorm, {{16}, {16}, {16}}, {{"eps", 1e-5}}, "2 to 4 dims"},
      {OpKind::kLayerNorm, {x5, {8}, {8}}, {{"eps", 1e-5}}, "2 to 4 dims"},
      {OpKind::kLayerNorm, {x4, {8}, {8}}, {{"eps", 0.0}}, "eps must be in (0"},
      {OpKind::kLayerNormBwd, {x4, {8}, {2, 3, 8}}, {{"eps", 1e-5}}, "dy must have shape"},
      {OpKind::kAttention,
       {{3, 7, 4}, {3, 7, 4}, {3, 7, 4}},
       kAttn,
       "q must have 4 dims [N,H,T,D]"},
      {OpKind::kAttention,
       {{2, 3, 7, 4}, {2, 3, 7, 8}, {2, 3, 7, 8}},
       kAttn,
       "k must have shape [2,3,S,4] (q's N, H and D), got [2,3,7,8]"},
      {OpKind::kAttention,
       {{2, 3, 7, 4}, {2, 3, 7}, {2, 3, 7}},
       kAttn,
       "k must have shape [2,3,S,4]"},
      {OpKind::kAttention,
       {{2, 3, 7, 4}, {2, 3, 7, 4}, {2, 3, 6, 4}},
       kAttn,
       "v must have the shape of k [2,3,7,4] (the same S and D), got [2,3,6,4]"},
      {OpKind::kAttention,
       {{2, 3, 7, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}},
       with(kAttn, "causal", int64_t{1}),
       "causal = 1 needs as many queries as keys (T == S), got T = 7, S = 5"},
      {OpKind::kAttention,
       {{2, 3, 7, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}},
       with(kAttn, "causal", int64_t{2}),
       "causal must be 0 or 1, got 2"},
      {OpKind::kAttention,
       {{2, 3, 7, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}},
       with(kAttn, "softmax_scale", 0.0),
       "softmax_scale must be > 0 and finite, got 0"},
      {OpKind::kAttentionBwd,
       {{2, 3, 7, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}},
       kAttn,
       "lse must have shape [2,3,7] [N,H,T], got [2,3,7,4]"},
      {OpKind::kAttentionBwd,
       {{2, 3, 7, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}, {2, 3, 7}, {2, 3, 6, 4}},
       kAttn,
       "dout [2,3,6,4] must have the shape of q [2,3,7,4]"},
      {OpKind::kBnStatsUpdate,
       {{3}, {3}, {3}, {4}},
       {{"momentum", 0.1}, {"count", int64_t{8}}},
       "var [4] must have the shape"},
      {OpKind::kBnStatsUpdate,
       {{3}, {3}, {3}, {3}},
       {{"momentum", 0.1}, {"count", int64_t{1}}},
       "count (elements per channel) must be >= 2"},
      {OpKind::kMseLoss, {x4, x5}, {}, "target"},
      {OpKind::kMseLossBwd, {x4, x4, {1}}, {}, "dloss must be a scalar"},
      {OpKind::kSoftDiceLoss, {{2, 3}, {2, 3}}, {{"eps", 1e-5}}, "at least 3 dims"},
      {OpKind::kSoftDiceLoss, {x5, x5}, {{"eps", -1.0}}, "eps must be in [0"},
      {OpKind::kSoftmaxCrossEntropy,
       {{4, 10, 1, 1}, {4}},
       {},
       "logits [4,10,1,1] have one class on the last axis, where the classes go; flatten an "
       "[N,C,1,...] output first"},
      {OpKind::kSoftmaxCrossEntropy, {{7}, {7}}, {}, "logits must be [..., C] of rank 2 or more"},
      {OpKind::kSoftmaxCrossEntropy,
       {{2, 5, 10}, {2, 4}},
       {},
       "labels [2,4] must be [2,5], one class index per row of logits [2,5,10]"},
      {OpKind::kSoftmaxCrossEntropy,
       {{4, 10}, {4, 10}},
       {},
       "labels [4,10] must be [4], one class index per row of logits [4,10]"},
      {OpKind::kSoftmaxCrossEntropy,
       {{4, 10}, {4}},
       {{"ignore_index", 1.5}},
       "attribute 'ignore_index' must be of type int"},
      {OpKind::kSoftmaxCrossEntropyBwd, {{4, 10}, {4}, {4}}, {}, "dloss must be a scalar"},
      {OpKind::kLinearCrossEntropy,
       {{2, 5, 8}, {300, 7}, {2, 5}},
       {{"trans_b", int64_t{1}}},
       "w must be [V,D] with D = 8 (x's last dim), got [300,7]"},
      {OpKind::kLinearCrossEntropy,
       {{2, 5, 8}, {300, 8}, {2, 4}},
       {{"trans_b", int64_t{1}}},
       "labels [2,4] must be [2,5], one class index per row of x [2,5,8]"},
      {OpKind::kLinearCrossEntropy,
       {{8}, {300, 8}, {1}},
       {{"trans_b", int64_t{1}}},
       "x must be [..., D] of rank 2 or more"},
      {OpKind::kLinearCrossEntropy,
       {{4, 8}, {1, 8}, {4}},
       {{"trans_b", int64_t{1}}},
       "needs at least 2 classes"},
      {OpKind::kLinearCrossEntropyBwd,
       {{4, 8}, {300, 8}, {4}, {4}},
       {{"trans_b", int64_t{1}}},
       "dloss must be a scalar"},
      {OpKind::kReduceMeanBwd, {{2}}, {{"input_shape", Ints(x4)}}, "dy must be a scalar"},
      {OpKind::kGlobalNorm, {}, {}, "takes at least 1 inputs, got 0"},
      {OpKind::kIncrement, {{2}}, {}, "step must be a scalar"},
      {OpKind::kSgdUpdate,
       {{4}, {4}, {3}},
       {{"lr", 0.1}, {"momentum", 1.0}, {"weight_decay", 0.0}, {"clip_norm", 0.0}},
       "velocity [3] must have the shape of param"},
      {OpKind::kSgdUpdate,
       {{4}, {4}, {4}},
       {{"lr", 0.1}, {"momentum", 1.0}, {"weight_decay", 0.0}, {"clip_norm", 0.0}},
       "momentum must be in [0, 1)"},
      {OpKind::kAdamUpdate, {{4}, {4}, {4}, {4}, {1}}, adam, "step must be a scalar"},
      {OpKind::kAdamUpdate, {{4}, {4}, {4}, {4}, {}}, with(adam, "beta2", 1.0), "beta2 must be in"},
      {OpKind::kSgdUpdate,
       {{4}, {4}, {4}, {}},
       with(sgd, "loss_scaling", int64_t{1}),
       "with loss_scaling = 1 the update takes 5 inputs"},
      {OpKind::kIncrement, {{}, {2}}, {}, "norm must be a scalar"},
      {OpKind::kAmpUpdateScale,
       {{}, {}, {}},
       with(amp, "backoff_factor", 1.0),
       "backoff_factor must be in (0, 1)"},
      {OpKind::kAmpUpdateScale,
       {{}, {}, {}},
       with(amp, "growth_interval", int64_t{0}),
       "growth_interval must be an integer in [1, 2^24]"},
      {OpKind::kAmpUpdateScale, {{}, {1}, {}}, amp, "growth_tracker must be a scalar"},
      {OpKind::kSwapIn, {x4, x4}, {}, "takes 1 inputs, got 2"},
      {OpKind::kAllReduce, {}, {}, "takes at least 1 inputs, got 0"},
      {OpKind::kAllReduce,
       {x4},
       {{"release_after", int64_t{3}}},
       "'release_after' must be a node name"},
  };
}

TEST(OpsShapes, ValidCasesInferTheDocumentedShapes) {
  std::set<OpKind> covered;
  for (const Valid& c : valid_cases()) {
    auto out = infer(c.op, c.attrs, c.in);
    ASSERT_TRUE(out.ok()) << op_name(c.op) << ": " << out.status();
    EXPECT_EQ(*out, c.out) << op_name(c.op);
    covered.insert(c.op);
  }
  for (OpKind op : all_op_kinds()) EXPECT_TRUE(covered.contains(op)) << op_name(op);
}

TEST(OpsShapes, InvalidCasesNameTheProblem) {
  std::set<OpKind> covered;
  for (const Invalid& c : invalid_cases()) {
    auto out = infer(c.op, c.attrs, c.in);
    ASSERT_FALSE(out.ok()) << op_name(c.op) << " accepted an invalid case expecting: " << c.message;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find(c.message), absl::string_view::npos)
        << op_name(c.op) << ": got \"" << out.status().message() << "\", want \"" << c.message
        << "\"";
    covered.insert(c.op);
  }
  // Every op with attributes or shape constraints has at least one invalid case.
  for (OpKind op : all_op_kinds()) {
    if (op == OpKind::kRelu || op == OpKind::kSigmoid || op == OpKind::kGelu ||
        op == OpKind::kHardSwish || op == OpKind::kHardSigmoidBwd || op == OpKind::kTanh ||
        op == OpKind::kReduceMean || op == OpKind::kSwapOut || op == OpKind::kLeakyReluBwd ||
        op == OpKind::kSigmoidBwd || op == OpKind::kSoftmaxBwd || op == OpKind::kDeconvBwdData ||
        op == OpKind::kDeconvBwdWeights || op == OpKind::kMaxPoolBwd ||
        op == OpKind::kInstanceNormBwd || op == OpKind::kSoftDiceLossBwd) {
      continue;  // covered through the shared helpers exercised above
    }
    EXPECT_TRUE(covered.contains(op)) << op_name(op);
  }
}

// Arithmetic of shape inference that overflows int64 (a pad of 2^62, dims of
// 2^40 x 2^40): each is an error naming the attribute or input, never a
// wrapped-around shape. Several of these used to be accepted with a garbage
// (even zero or negative) output dim.
TEST(OpsShapes, OverflowIsAnErrorNamingTheAttributeOrInput) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t k62 = int64_t{1} << 62, k40 = int64_t{1} << 40;
  const Shape x4 = {2, 3, 8, 8};
  const std::string conv_room = "input + 2*pad - dilation*(kernel-1) - 1 overflows int64";
  const std::string too_large = "is too large: a tensor may have at most 2^63 - 1 bytes";
  const std::string nearest = "nearest";
  const Invalid cases[] = {
      {OpKind::kConv, {x4, {4, 3, 3, 3}}, geom2({1, 1}, {k62, 0}), conv_room},
      {OpKind::kConv, {x4, {4, 3, 3, 3}}, geom2({1, 1}, {0, kMax}), conv_room},
      {OpKind::kConv, {x4, {4, 3, 3, 3}}, geom2({1, 1}, {0, 0}, {k62, 1}), conv_room},
      {OpKind::kConv,
       {x4, {4, 3, kMax, 3}},
       geom2(),
       "input 1: [4,3,9223372036854775807,3] " + too_large},
      // Every dim fits, their product does not.
      {OpKind::kConv, {{1, 1, 1, 1}, {1, 1, 1, 1}}, geom2({1, 1}, {k40, k40}), "output 0: "},
      {OpKind::kConvBwdData,
       {{2, 4, 8, 8}, {4, 3, 3, 3}},
       with(geom2({1, 1}, {1, 1}), "input_shape", Ints{k40, k40, 8, 8}),
       "input_shape: [1099511627776,1099511627776,8,8] " + too_large},
      {OpKind::kDeconv,
       {{1, 1, k40, 1}, {1, 1, 1, 1}},
       {{"stride", Ints{(int64_t{1} << 24) + 3, 1}}, {"pad", Ints{0, 0}}},
       "(input-1)*stride - 2*pad + kernel overflows int64 in spatial dim 0"},
      {OpKind::kDeconv,
       {x4, {3, 5, 2, 2}},
       {{"stride", Ints{1, 1}}, {"pad", Ints{0, kMax}}},
       "(input-1)*stride - 2*pad + kernel overflows int64 in spatial dim 1"},
      {OpKind::kDeconvBwdWeights,
       {x4, {2, 5, 9, 9}},
       {{"stride", Ints{1, 1}},
        {"pad", Ints{0, 0}},
        {"weight_shape", Ints{3, kMax, 2, 2}},
        {"has_bias", int64_t{0}}},
       "weight_shape: [3,9223372036854775807,2,2] " + too_large},
      {OpKind::kUpsample,
       {{1, 1, int64_t{1} << 31, 1}},
       {{"scale", Ints{int64_t{1} << 33, 1}}, {"mode", nearest}},
       "input*scale overflows int64 in spatial dim 0"},
      {OpKind::kUpsample,
       {{1, 1, 1 << 20, 1 << 20}},
       {{"scale", Ints{1 << 20, 1 << 20}}, {"mode", nearest}},
       "output 0: [1,1,1099511627776,1099511627776] " + too_large},
      {OpKind::kMaxPool,
       {x4},
       {{"kernel", Ints{kMax, 1}}, {"stride", Ints{1, 1}}, {"pad", Ints{k62, 0}}},
       "input + 2*pad - kernel overflows int64 in spatial dim 0"},
      {OpKind::kConcat,
       Shapes(8, Shape{1, int64_t{1} << 60}),
       {},
       "the size of axis 1 overflows int64 at input 7"},
      {OpKind::kSlice, {x4}, {{"begin", kMax}, {"size", int64_t{1}}}, "begin + size <= 3"},
      {OpKind::kFill,
       {},
       {{"shape", Ints{k40, k40}}, {"value", 1.0}},
       "shape: [1099511627776,1099511627776] " + too_large},
      {OpKind::kFill, {}, {{"shape", Ints{int64_t{1} << 61}}, {"value", 1.0}}, too_large},
      {OpKind::kReduceMeanBwd, {{}}, {{"input_shape", Ints{kMax, 2}}}, "input_shape: "},
      {OpKind::kRelu, {{k40, k40}}, {}, "input 0: [1099511627776,1099511627776] " + too_large},
      {OpKind::kAdd, {{2}, {-3}}, {}, "input 1: every dimension must be positive, got [-3]"},
  };
  for (const Invalid& c : cases) {
    auto out = infer(c.op, c.attrs, c.in);
    ASSERT_FALSE(out.ok()) << op_name(c.op)
                           << " accepted an overflowing case expecting: " << c.message;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find(c.message), absl::string_view::npos)
        << op_name(c.op) << ": got \"" << out.status().message() << "\", want \"" << c.message
        << "\"";
  }
  // The largest tensor that fits: 2^61 - 1 floats, just under 2^63 bytes.
  auto fits = infer(OpKind::kFill, {{"shape", Ints{(int64_t{1} << 61) - 1}}, {"value", 0.0}}, {});
  EXPECT_TRUE(fits.ok()) << fits.status();
}

// ---- Builders ----

TEST(Builders, Conv2dCreatesParametersWithHeInit) {
  Graph g;
  TensorId x = g.input("x", {4, 3, 16, 16});
  TensorId y = conv2d(g, "conv1", x, 8, {3, 3}, {.pad = {1}, .seed = 42});
  ASSERT_TRUE(g.status().ok()) << g.status();
  EXPECT_EQ(g.tensor(y).shape, (Shape{4, 8, 16, 16}));
  const Tensor& w = g.tensor(g.find_tensor("conv1/w"));
  EXPECT_EQ(w.shape, (Shape{8, 3, 3, 3}));
  EXPECT_EQ(w.role, TensorRole::kParameter);
  EXPECT_EQ(w.init.kind, Init::Kind::kHeNormal);
  EXPECT_EQ(w.init.fan_in, 27);
  EXPECT_EQ(w.init.seed, 42u);
  const Tensor& b = g.tensor(g.find_tensor("conv1/b"));
  EXPECT_EQ(b.shape, (Shape{8}));
  EXPECT_EQ(b.init.kind, Init::Kind::kZeros);
  const Node& n = g.node(g.find_node("conv1"));
  EXPECT_EQ(n.op, OpKind::kConv);
  EXPECT_EQ(n.inputs.size(), 3u);
  EXPECT_EQ(std::get<Ints>(n.attrs.at("pad")), (Ints{1, 1}));
  EXPECT_EQ(std::get<Ints>(n.attrs.at("stride")), (Ints{1, 1}));
  EXPECT_EQ(std::get<Ints>(n.attrs.at("dilation")), (Ints{1, 1}));
}

TEST(Builders, Conv3dNoBiasAndRankCheck) {
  Graph g;
  TensorId x = g.input("x", {1, 2, 8, 8, 8});
  TensorId y = conv3d(g, "c", x, 4, {3}, {.stride = {2}, .pad = {1}, .bias = false, .seed = 7});
  ASSERT_TRUE(g.status().ok()) << g.status();
  EXPECT_EQ(g.tensor(y).shape, (Shape{1, 4, 4, 4, 4}));
  EXPECT_EQ(g.tensor(g.find_tensor("c/w")).shape, (Shape{4, 2, 3, 3, 3}));
  EXPECT_EQ(g.tensor(g.find_tensor("c/w")).init.fan_in, 54);
  EXPECT_EQ(g.find_tensor("c/b"), kNoTensor);
  // conv2d on a 5-D input is an error naming the layer; later builders propagate.
  TensorId bad = conv2d(g, "c2", x, 4, {3});
  EXPECT_EQ(bad, kNoTensor);
  ASSERT_FALSE(g.status().ok());
  EXPECT_NE(g.status().message().find("'c2'"), absl::string_view::npos) << g.status();
  EXPECT_NE(g.status().message().find("4-D"), absl::string_view::npos) << g.status();
  EXPECT_EQ(relu(g, "r", bad), kNoTensor);
  EXPECT_EQ(g.find_node("r"), kNoNode);
}

TEST(Builders, ConvTransposeNormsAndPools) {
  Graph g;
  TensorId x = g.input("x", {2, 8, 4, 4, 4});
  TensorId up = conv_transpose(g, "up", x, 4, {2}, {.stride = {2}, .seed = 3});
  TensorId n = instance_norm(g, "in", up, 1e-5);
  TensorId a = leaky_relu(g, "act", n, 0.01);
  TensorId p = max_pool3d(g, "pool", a, 2);
  TensorId b = batch_norm(g, "bn", p);
  ASSERT_TRUE(g.status().ok()) << g.status();
  EXPECT_EQ(g.tensor(up).shape, (Shape{2, 4, 8, 8, 8}));
  EXPECT_EQ(g.tensor(g.find_tensor("up/w")).shape, (Shape{8, 4, 2, 2, 2}));
  EXPECT_EQ(g.tensor(g.find_tensor("up/w")).init.fan_in, 8);  // 8*8/8
  const Tensor& gamma = g.tensor(g.find_tensor("in/gamma"));
  EXPECT_EQ(gamma.shape, (Shape{4}));
  EXPECT_EQ(gamma.init.kind, Init::Kind::kConstant);
  EXPECT_EQ(gamma.init.value, 1.0);
  EXPECT_EQ(g.tensor(g.find_tensor("in/beta")).init.kind, Init::Kind::kZeros);
  EXPECT_EQ(g.tensor(p).shape, (Shape{2, 4, 4, 4, 4}));
  EXPECT_EQ(g.tensor(b).shape, (Shape{2, 4, 4, 4, 4}));
  EXPECT_EQ(g.tensor(g.find_tensor("bn/gamma")).role, TensorRole::kParameter);
}

TEST(Builders, PointwiseLossesAndErrors) {
  Graph g;
  TensorId x = g.input("x", {2, 3, 4, 4});
  TensorId t = g.input("t", {2, 3, 4, 4});
  TensorId s = softmax(g, "sm", sigmoid(g, "sig", x));
  TensorId c = concat(g, "cat", {s, x});
  TensorId sl = slice(g, "sl", c, 3, 3);
  TensorId m = mul(g, "m", scale(g, "sc", sl, 0.5), add(g, "a", x, t));
  TensorId u = upsample(g, "up", m, {2}, "linear");
  TensorId l1 = soft_dice_loss(g, "dice", s, t);
  TensorId l2 = mse_loss(g, "mse", m, t);
  TensorId l3 = reduce_mean(g, "rm", u);
  TensorId f = fill(g, "one", {}, 1.0);
  ASSERT_TRUE(g.status().ok()) << g.status();
  EXPECT_EQ(g.tensor(c).shape, (Shape{2, 6, 4, 4}));
  EXPECT_EQ(g.tensor(sl).shape, (Shape{2, 3, 4, 4}));
  EXPECT_EQ(g.tensor(u).shape, (Shape{2, 3, 8, 8}));
  for (TensorId l : {l1, l2, l3, f}) EXPECT_TRUE(g.tensor(l).shape.empty());
  // A bad attribute is recorded with the node name and the attribute.
  EXPECT_EQ(max_pool(g, "pool", x, {.kernel = {2}}), kNoTensor);
  EXPECT_NE(g.status().message().find("'pool'"), absl::string_view::npos) << g.status();
  EXPECT_NE(g.status().message().find("kernel must have 2 entries"), absl::string_view::npos);
}

TEST(Builders, MatMulShapesAndErrorsNameTheNode) {
  Graph g;
  TensorId a = g.input("a", {2, 3, 5, 4});
  TensorId b = g.input("b", {2, 3, 4, 6});
  TensorId w = g.input("w", {6, 4});
  EXPECT_EQ(g.tensor(matmul(g, "mm", a, b)).shape, (Shape{2, 3, 5, 6}));
  EXPECT_EQ(g.tensor(matmul(g, "mm_w", a, w, false, true)).shape, (Shape{2, 3, 5, 6}));
  EXPECT_EQ(g.tensor(matmul(g, "mm_t", b, a, true, true)).shape, (Shape{2, 3, 6, 5}));
  ASSERT_TRUE(g.status().ok()) << g.status();
  EXPECT_EQ(matmul(g, "bad_k", a, w), kNoTensor);
  EXPECT_NE(g.status().message().find("'bad_k'"), absl::string_view::npos) << g.status();
  EXPECT_NE(g.status().message().find("inner dimensions disagree"), absl::string_view::npos)
      << g.status();
}

TEST(Builders, LayerWithAnAbsurdWeightShapeIsRecorded) {
  Graph g;
  TensorId x = g.input("x", {1, int64_t{1} << 30, 1, 1});
  ASSERT_TRUE(g.status().ok()) << g.status();
  // [2^40, 2^30, 3, 3]: fan_in and the weight's bytes would overflow.
  EXPECT_EQ(conv2d(g, "c", x, int64_t{1} << 40, {3}, {.pad = {1}}), kNoTensor);
  ASSERT_FALSE(g.status().ok());
  EXPECT_NE(g.status().message().find("layer 'c'"), absl::string_view::npos) << g.status();
  EXPECT_NE(g.status().message().find("too large"), absl::string_view::npos) << g.status();
  EXPECT_EQ(g.find_tensor("c/w"), kNoTensor);
  Graph h;
  TensorId y = h.input("y", {1, 4, 8, 8});
  EXPECT_EQ(conv_transpose(h, "t", y, 2, {int64_t{1} << 62}), kNoTensor);
  EXPECT_NE(h.status().message().find("layer 't'"), absl::string_view::npos) << h.status();
  // Huge strides whose product overflows only lower fan_in to 1.
  Graph k;
  TensorId z = k.input("z", {1, 2, 4, 4});
  conv_transpose(k, "t", z, 2, {1}, {.stride = {int64_t{1} << 40, int64_t{1} << 40}});
  EXPECT_FALSE(k.status().ok());  // the output shape is too large
  EXPECT_NE(k.status().message().find("too large"), absl::string_view::npos) << k.status();
}

TEST(Builders, ForeignTensorIdIsRecorded) {
  Graph g;
  EXPECT_EQ(relu(g, "r", 5), kNoTensor);
  ASSERT_FALSE(g.status().ok());
  EXPECT_NE(g.status().message().find("'r'"), absl::string_view::npos);
}

}  // namespace
}  // namespace lms
