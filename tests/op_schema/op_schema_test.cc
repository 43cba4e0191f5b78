// The op schema's checks (op_schema.h): each bad instance is refused with
// InvalidArgument "node '<name>' (op <op>): <msg>", the msg naming what was
// wrong and what is allowed; the good ones give the documented outputs.
#include "op_schema/op_schema.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "op_schema/op_dims.h"

namespace lms {
namespace {

using Ints = std::vector<int64_t>;
using Shapes = std::vector<Shape>;

struct Bad {
  OpInstance inst;
  std::string message;  // a fragment of the message after "node 'n' (op <op>): "
};

Attrs sgd_attrs(double momentum) {
  return {{"lr", 0.1}, {"momentum", momentum}, {"weight_decay", 0.0}, {"clip_norm", 0.0}};
}

Attrs adam_attrs() {
  return {{"lr", 0.1},   {"beta1", 0.9},        {"beta2", 0.999},
          {"eps", 1e-8}, {"weight_decay", 0.0}, {"clip_norm", 0.0}};
}

Attrs with(Attrs a, const std::string& key, AttrValue v) {
  a[key] = std::move(v);
  return a;
}

Attrs without(Attrs a, const std::string& key) {
  a.erase(key);
  return a;
}

std::vector<Bad> bad_instances() {
  const Shape x = {2, 3, 4, 4}, c = {3}, p = {4};
  const Shapes adam_in = {p, p, p, p, {}};
  return {
      // slice: the bounds and the axis.
      {{"n", OpKind::kSlice, {{"begin", int64_t{3}}, {"size", int64_t{2}}}, {{2, 4}}},
       "begin 3 and size 2 must satisfy 0 <= begin, 1 <= size, begin + size <= 4 (size of axis 1 "
       "of x)"},
      {{"n", OpKind::kSlice, {{"begin", int64_t{-1}}, {"size", int64_t{1}}}, {{2, 4}}},
       "0 <= begin"},
      {{"n", OpKind::kSlice, {{"begin", int64_t{0}}, {"size", int64_t{0}}}, {{2, 4}}}, "1 <= size"},
      {{"n",
        OpKind::kSlice,
        {{"begin", int64_t{0}}, {"size", int64_t{1}}, {"axis", int64_t{2}}},
        {{2, 4}}},
       "axis 2 is out of range [-2, 1] for x [2,4] of rank 2"},
      {{"n", OpKind::kSlice, {{"begin", 0.0}, {"size", int64_t{1}}}, {{2, 4}}},
       "attribute 'begin' must be of type int"},
      // The optimizer updates: hyper-parameters and state shapes.
      {{"n", OpKind::kSgdUpdate, sgd_attrs(1.0), {p, p, p}}, "momentum must be in [0, 1), got 1"},
      {{"n", OpKind::kSgdUpdate, with(sgd_attrs(0.9), "lr", -0.1), {p, p, p}},
       "lr must be in [0, inf), got -0.1"},
      {{"n", OpKind::kSgdUpdate, with(sgd_attrs(0.9), "lr", std::nan("")), {p, p, p}},
       "lr must be finite"},
      {{"n", OpKind::kSgdUpdate, sgd_attrs(0.9), {p, p, {3}}},
       "velocity [3] must have the shape of param [4]"},
      {{"n", OpKind::kSgdUpdate, sgd_attrs(0.9), {p, p, p, {1}}},
       "norm must be a scalar (shape []), got [1]"},
      {{"n", OpKind::kAdamUpdate, with(adam_attrs(), "beta2", 1.0), adam_in},
       "beta2 must be in [0, 1), got 1"},
      {{"n", OpKind::kAdamUpdate, with(adam_attrs(), "eps", 0.0), adam_in},
       "eps must be in (0, inf), got 0"},
      {{"n", OpKind::kAdamUpdate, with(adam_attrs(), "decay_steps", int64_t{10}), adam_in},
       "decay_steps and decay_power come together"},
      {{"n", OpKind::kAdamUpdate,
        with(with(adam_attrs(), "decay_steps", int64_t{0}), "decay_power", 0.9), adam_in},
       "decay_steps must be an integer >= 1, got 0"},
      {{"n", OpKind::kAdamUpdate, without(adam_attrs(), "beta1"), adam_in},
       "missing attribute 'beta1' (required: beta1, beta2, clip_norm, eps, lr, weight_decay)"},
      // The norms: eps, the channel shapes, the running statistics.
      {{"n", OpKind::kBatchNorm, {{"eps", 0.0}}, {x, c, c}}, "eps must be in (0, 1], got 0"},
      {{"n", OpKind::kBatchNorm, {{"eps", 1e-5}}, {x, {4}, c}},
       "gamma must have shape [3] (channels of x), got [4]"},
      {{"n", OpKind::kBatchNorm, {{"eps", 1e-5}}, {x, c, c, c}},
       "running_mean and running_var come together"},
      {{"n", OpKind::kBatchNorm, {{"eps", 1e-5}, {"training", int64_t{0}}}, {x, c, c}},
       "training = 0 (eval mode) needs running_mean and running_var inputs"},
      {{"n", OpKind::kBatchNormBwd, {{"eps", -1.0}}, {x, c, x}}, "eps must be in (0, 1]"},
      {{"n", OpKind::kInstanceNorm, {{"eps", 1e-5}}, {{2, 3}, c, c}},
       "input x must have at least 3 dims [N,C,...], got [2,3]"},
      {{"n", OpKind::kLayerNorm, {{"eps", 2.0}}, {{2, 8}, {8}, {8}}},
       "eps must be in (0, 1], got 2"},
      {{"n", OpKind::kLayerNorm, {{"eps", 1e-5}}, {{2, 8}, {8}, {7}}},
       "beta must have shape [8], got [7]"},
      {{"n", OpKind::kBnStatsUpdate, {{"momentum", 0.1}, {"count", int64_t{1}}}, {c, c, c, c}},
       "count (elements per channel) must be >= 2, got 1"},
      // What every op shares: arity, attribute names, dtypes, dimensions.
      {{"n", OpKind::kRelu, {}, {x, x}}, "takes 1 inputs, got 2"},
      {{"n", OpKind::kRelu, {{"alpha", 0.1}}, {x}}, "unknown attribute 'alpha' (allowed: none)"},
      {{"n", OpKind::kRelu, {}, {{2, 0}}}, "input 0: every dimension must be positive, got [2,0]"},
      {{"n",
        OpKind::kEmbedding,
        {},
        {{4}, {10, 8}},
        {},
        {DType::kFloat32, DType::kFloat32},
        {"ids", "table"}},
       "input 0 'ids' has dtype f32, the op takes i64 there"},
      {{"n",
        OpKind::kConv,
        {{"stride", Ints{1}}, {"pad", Ints{0, 0}}, {"dilation", Ints{1, 1}}},
        {x, {4, 3, 3, 3}}},
       "stride must have 2 entries for a 4-D input (NCHW), got [1]"},
      {{"n", OpKind::kRelu, {{"layout", std::string("b:")}}, {x}},
       "attribute 'layout' must be a string of 1 characters 'p' or 'b' (one per input), ':', and "
       "1 more (one per output)"},
  };
}

TEST(OpSchema, BadInstancesAreRefusedNamingTheProblem) {
  for (const Bad& b : bad_instances()) {
    const absl::StatusOr<Shapes> out = infer_outputs(b.inst);
    const std::string prefix = "node 'n' (op " + std::string(op_name(b.inst.op)) + "): ";
    ASSERT_FALSE(out.ok()) << prefix << "accepted, expected: " << b.message;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
    const std::string message(out.status().message());
    EXPECT_EQ(message.rfind(prefix, 0), 0u) << message;
    EXPECT_NE(message.find(b.message), std::string::npos)
        << "got \"" << message << "\", want \"" << b.message << "\"";
    // A backend's check_spec refuses it with the same status, outputs or not.
    OpInstance spec = b.inst;
    spec.output_shapes = {Shape{1}};
    EXPECT_EQ(check_spec(spec), out.status());
  }
}

TEST(OpSchema, GoodInstancesGiveTheirOutputs) {
  const Shape x = {2, 3, 4, 4}, c = {3}, p = {4};
  const struct {
    OpInstance inst;
    Shapes outputs;
  } good[] = {
      {{"n", OpKind::kSlice, {{"begin", int64_t{1}}, {"size", int64_t{2}}}, {x}}, {{2, 2, 4, 4}}},
      {{"n", OpKind::kSgdUpdate, sgd_attrs(0.9), {p, p, p, {}}}, {}},
      {{"n", OpKind::kBatchNorm, {{"eps", 1e-5}}, {x, c, c, c, c}}, {x, c, c}},
      {{"n", OpKind::kBatchNorm, {{"eps", 1e-5}, {"training", int64_t{0}}}, {x, c, c, c, c}}, {x}},
      {{"n", OpKind::kLayerNorm, {{"eps", 1e-5}}, {{2, 5, 8}, {8}, {8}}}, {{2, 5, 8}}},
      {{"n", OpKind::kLayerNormBwd, {{"eps", 1e-5}}, {{2, 8}, {8}, {2, 8}}}, {{2, 8}, {8}, {8}}},
  };
  for (const auto& g : good) {
    const absl::StatusOr<Shapes> out = infer_outputs(g.inst);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, g.outputs) << op_name(g.inst.op);
    OpInstance spec = g.inst;
    spec.output_shapes = g.outputs;
    EXPECT_TRUE(check_spec(spec).ok()) << check_spec(spec);
  }
}

TEST(OpSchema, CheckSpecRefusesOutputsTheInputsDoNotGive) {
  OpInstance spec{"n", OpKind::kSlice, {{"begin", int64_t{1}}, {"size", int64_t{2}}}, {{2, 4}}};
  spec.output_shapes = {{2, 3}};
  EXPECT_EQ(check_spec(spec).message(),
            "node 'n' (op slice): output 0 has shape [2,3]; its inputs and attributes give [2,2]");
  spec.output_shapes = {};
  EXPECT_EQ(check_spec(spec).message(), "node 'n' (op slice): has 0 outputs; the op gives 1");
}

TEST(OpSchema, KernelDimsComeFromTheSameRule) {
  const OpInstance adam{"n",
                        OpKind::kAdamUpdate,
                        with(with(adam_attrs(), "decay_steps", int64_t{100}), "decay_power", 0.9),
                        {{4}, {4}, {4}, {4}, {}}};
  const absl::StatusOr<UpdateAttrs> a = update_attrs(adam);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->beta2, 0.999);
  EXPECT_EQ(a->decay_steps, 100);
  const OpInstance slice{"n",
                         OpKind::kSlice,
                         {{"begin", int64_t{1}}, {"size", int64_t{2}}, {"axis", int64_t{-1}}},
                         {{2, 4}}};
  const absl::StatusOr<SliceDims> d = slice_dims(slice);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->axis, 1u);
  EXPECT_EQ(d->begin, 1);
  EXPECT_EQ(d->size, 2);
}

TEST(OpSchema, OpsWithoutAKernelHaveNoRule) {
  for (OpKind op : {OpKind::kSwapOut, OpKind::kSwapIn, OpKind::kAllReduce}) {
    EXPECT_FALSE(has_schema_rule(op)) << op_name(op);
    EXPECT_TRUE(check_spec(OpInstance{"n", op, {}, {{2}}, {{2}}}).ok());
    EXPECT_EQ(infer_outputs(OpInstance{"n", op, {}, {{2}}}).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  for (size_t k = 0; k < kNumOpKinds; ++k) {
    const auto op = static_cast<OpKind>(k);
    if (op == OpKind::kSwapOut || op == OpKind::kSwapIn || op == OpKind::kAllReduce) continue;
    EXPECT_TRUE(has_schema_rule(op)) << op_name(op);
  }
}

}  // namespace
}  // namespace lms
