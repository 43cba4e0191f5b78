// cast and the 2-byte float dtypes (bf16, f16) through include/lms only:
// - values rounded as PyTorch's Tensor.to rounds (torch/reference.py's
//   "cast"), bit for bit, on ties, past f16's range and in the subnormals,
//   both by the device's cast kernel and by feeding a bf16 / f16 input;
// - the gradient through a cast pair against PyTorch's autograd;
// - the errors a user gets for an op that does not read bf16, a cast of an
//   int64 tensor and a graph text naming an unknown dtype;
// - bf16 skip tensors swapped out and back by lms::rewrite: bit-identical
//   steps at the predicted peak, with half the bytes of float32 moved.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>

#include "budget_check.h"
#include "torch_compare.h"
#include "torch_reference.h"

namespace lms {
namespace {

using torch_ref::random_values;
using torch_ref::TorchTensors;
using user::kMiB;

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Values whose rounding is easy to get wrong: ties (to even, both ways),
// f16's largest value and its rounding to infinity, f16's and f32's
// subnormals, bf16's largest finite values, signs and zeros.
std::vector<float> edge_values() {
  return {0.0f,         -0.0f,   1.0f,
          1.00390625f,  // 1 + 2^-8: a bf16 tie, to even (down)
          1.01171875f,  // 1 + 3 * 2^-8: a bf16 tie, to even (up)
          1.00048828f,  // about 1 + 2^-11: an f16 tie
          -3.14159265f,
          65504.0f,  // f16's largest
          65519.0f,  // rounds to 65504 in f16
          65520.0f,  // an f16 tie between 65504 and 2^16: to inf
          -1.0e6f,   // -inf in f16
          6.0e-8f,   // f16's smallest subnormal, about
          2.0e-8f,   // to 0 in f16
          1.0e-40f,  // an f32 subnormal
          3.3e38f,   // rounds past bf16's largest finite value
          1.0e-3f,      -7.77e4f};
}

// A graph of x (f32 input) -> cast to `dtype` -> cast to f32, fetched
// (no training): the device's cast kernel both ways.
TEST(Cast, RoundsAsPyTorchBitForBit) {
  for (const DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<float> xs = edge_values();
    std::mt19937_64 gen(91);
    std::printf("cast %s seed 91\n", dtype_name(dtype));
    for (float v : random_values(200, gen, 1000.0f)) xs.push_back(v);
    const Shape shape = {static_cast<int64_t>(xs.size())};
    Graph g;
    const TensorId x = g.input("x", shape);
    const TensorId h = cast(g, "h", x, dtype);
    cast(g, "y", h, DType::kFloat32);
    ASSERT_TRUE(g.status().ok()) << g.status();
    EXPECT_EQ(g.tensor(h).dtype, dtype);
    EXPECT_EQ(g.tensor(h).bytes(), 2 * xs.size());

    TorchTensors in;
    in["x"] = {shape, xs};
    in["target"] = {shape, std::vector<float>(xs.size(), 0.0f)};
    auto ref =
        torch_ref::torch_reference("cast", {{"f16", {dtype == DType::kFloat16 ? 1.0 : 0.0}}}, in);
    if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
    ASSERT_TRUE(ref.ok()) << ref.status();

    auto device = make_cpu_device({.capacity_bytes = 16 * kMiB, .host_pool_bytes = kMiB});
    ASSERT_TRUE(device.ok()) << device.status();
    auto session = Session::create(g, **device, {.fetches = {"h", "y"}});
    ASSERT_TRUE(session.ok()) << session.status();
    StepResult step;
    ASSERT_TRUE((*session)->run({{"x", xs}}, &step).ok());
    const std::vector<float>& y = step.fetched.at("y");
    const std::vector<float>& want = ref->at("y").values;
    const std::vector<float>& want_bits = ref->at("h_bits").values;
    ASSERT_EQ(y.size(), want.size());
    for (size_t i = 0; i < y.size(); ++i) {
      EXPECT_EQ(bits_of(y[i]), bits_of(want[i]))
          << "x = " << xs[i] << ": " << y[i] << " vs " << want[i] << " (torch's bits 0x" << std::hex
          << static_cast<uint32_t>(want_bits[i]) << ")";
      // A fetched bf16 / f16 tensor is widened exactly.
      EXPECT_EQ(bits_of(step.fetched.at("h")[i]), bits_of(y[i]));
      if (dtype == DType::kBFloat16) {
        EXPECT_EQ(bits_of(y[i]) >> 16, static_cast<uint32_t>(want_bits[i]));
      }
    }
  }
}

// A bf16 / f16 graph input fed as float32 is rounded on the host as the cast
// kernel rounds on the device (and as PyTorch does).
TEST(Cast, HalfInputsAreFedAndFetchedAsFloat32) {
  for (const DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<float> xs = edge_values();
    const Shape shape = {static_cast<int64_t>(xs.size())};
    Graph g;
    const TensorId x = g.input("x", shape, DType::kFloat32);
    cast(g, "y", cast(g, "h", x, dtype), DType::kFloat32);
    const TensorId fed = g.input("fed", shape, dtype);
    cast(g, "fed_y", fed, DType::kFloat32);
    ASSERT_TRUE(g.status().ok()) << g.status();
    auto device = make_cpu_device({.capacity_bytes = 16 * kMiB, .host_pool_bytes = kMiB});
    ASSERT_TRUE(device.ok()) << device.status();
    auto session = Session::create(g, **device, {.fetches = {"y", "fed", "fed_y"}});
    ASSERT_TRUE(session.ok()) << session.status();
    StepResult step;
    ASSERT_TRUE((*session)->run({{"x", xs}, {"fed", xs}}, &step).ok());
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_EQ(bits_of(step.fetched.at("fed")[i]), bits_of(step.fetched.at("y")[i]))
          << "x = " << xs[i];
      EXPECT_EQ(bits_of(step.fetched.at("fed_y")[i]), bits_of(step.fetched.at("y")[i]));
    }
  }
}

// The gradient of x through x -> bf16 -> f32 -> mse: PyTorch's autograd
// casts dy to bf16 and back, as cast's gradient does.
TEST(Cast, GradientMatchesPyTorch) {
  for (const DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Shape shape = {3, 4, 5};
    std::mt19937_64 gen(92);
    std::printf("cast gradient %s seed 92\n", dtype_name(dtype));
    Graph g;
    const TensorId x = g.parameter("x", shape, Init{});
    const TensorId y = cast(g, "y", cast(g, "h", x, dtype), DType::kFloat32);
    g.set_loss(mse_loss(g, "loss", y, g.input("target", shape)));
    ASSERT_TRUE(g.status().ok()) << g.status();
    // f16 trains with loss scaling; a scale of 1 leaves the gradients as
    // they are.
    TrainingOptions options;
    if (dtype == DType::kFloat16) options.loss_scaling = LossScaling{.init_scale = 1};
    auto train = training_graph(g, g.loss(), Sgd{.lr = 0.0}, options);
    ASSERT_TRUE(train.ok()) << train.status();
    TorchTensors in;
    in["x"] = {shape, random_values(num_elements(shape), gen, 2.0f)};
    in["target"] = {shape, random_values(num_elements(shape), gen, 1.0f)};
    auto ref =
        torch_ref::torch_reference("cast", {{"f16", {dtype == DType::kFloat16 ? 1.0 : 0.0}}}, in);
    if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
    ASSERT_TRUE(ref.ok()) << ref.status();
    const std::optional<StepResult> r = torch_ref::one_step(
        *train, in, {.written = {"x"}, .fed = {"target"}, .fetches = {"y", "loss", "x/grad"}});
    ASSERT_TRUE(r.has_value());
    // y is the rounded x, exactly; the loss and gradient within a rounding of
    // the 2-byte float (the gradient passes through it).
    torch_ref::expect_close_to_torch(*r, *ref, {"y"}, 0.0);
    torch_ref::expect_close_to_torch(*r, *ref, {"loss"}, 1e-6);
    torch_ref::expect_close_to_torch(*r, *ref, {"x/grad"}, dtype == DType::kBFloat16 ? 4e-3 : 5e-4);
  }
}

TEST(Cast, BadInputIsAClearError) {
  {
    Graph g;
    const TensorId ids = g.input("ids", {4}, DType::kInt64);
    cast(g, "c", ids, DType::kBFloat16);
    EXPECT_TRUE(absl::IsInvalidArgument(g.status())) << g.status();
    EXPECT_NE(g.status().message().find("'c'"), std::string_view::npos) << g.status();
    EXPECT_NE(g.status().message().find("i64"), std::string_view::npos) << g.status();
  }
  {
    Graph g;
    cast(g, "c", g.input("x", {4}), DType::kInt64);
    EXPECT_TRUE(absl::IsInvalidArgument(g.status())) << g.status();
    EXPECT_NE(g.status().message().find("\"i64\""), std::string_view::npos) << g.status();
  }
  {
    // An op that computes in float32 only names the input and its dtype.
    Graph g;
    const TensorId h = cast(g, "h", g.input("x", {2, 3, 4, 4}), DType::kBFloat16);
    mse_loss(g, "loss", h, g.input("target", {2, 3, 4, 4}));
    EXPECT_TRUE(absl::IsInvalidArgument(g.status())) << g.status();
    EXPECT_NE(g.status().message().find("'loss'"), std::string_view::npos) << g.status();
    EXPECT_NE(g.status().message().find("bf16"), std::string_view::npos) << g.status();
  }
  {
    // An op that follows its inputs' dtype takes one float dtype.
    Graph g;
    const TensorId x = g.input("x", {2, 3});
    add(g, "sum", x, cast(g, "h", x, DType::kFloat16));
    EXPECT_TRUE(absl::IsInvalidArgument(g.status())) << g.status();
    EXPECT_NE(g.status().message().find("'sum'"), std::string_view::npos) << g.status();
    EXPECT_NE(g.status().message().find("f16"), std::string_view::npos) << g.status();
  }
  {
    auto parsed = parse_graph("input x f8[2]\n");
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.status().message().find("bf16[...]"), std::string_view::npos)
        << parsed.status();
  }
}

TEST(Cast, TextFormKeepsHalfDtypes) {
  Graph g;
  const TensorId h = cast(g, "h", g.input("x", {2, 3}), DType::kFloat16);
  cast(g, "y", cast(g, "b", h, DType::kBFloat16), DType::kFloat32);
  g.input("fed", {4}, DType::kBFloat16);
  ASSERT_TRUE(g.status().ok()) << g.status();
  const std::string text = to_text(g);
  auto back = parse_graph(text);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
  EXPECT_EQ(to_text(*back), text);
  EXPECT_EQ(back->tensor(back->find_tensor("h")).dtype, DType::kFloat16);
  EXPECT_EQ(back->tensor(back->find_tensor("b")).dtype, DType::kBFloat16);
  EXPECT_EQ(back->tensor(back->find_tensor("fed")).dtype, DType::kBFloat16);
}

// conv -> relu -> (bf16 skip) ... conv chain ... -> + skip -> mse: the
// skips live across the chain in bf16, the tensors a swap-only plan moves
// first. Swapped, the steps are bit-identical to those without LMS at the
// predicted peak, and each swapped skip moves 2 bytes an element.
TEST(Cast, SwappedBf16SkipsAreBitIdenticalAtThePredictedPeak) {
  constexpr uint64_t kSeed = 93;
  constexpr int64_t kN = 2, kC = 8, kSize = 24;
  std::printf("seed %" PRIu64 "\n", kSeed);
  Graph g;
  const TensorId x = g.input("x", {kN, 3, kSize, kSize});
  TensorId h = relu(g, "relu0", conv2d(g, "conv0", x, kC, {3}, {.pad = {1}, .seed = 1}));
  std::vector<TensorId> skips;
  for (int i = 1; i <= 3; ++i) {
    skips.push_back(cast(g, "skip" + std::to_string(i), h, DType::kBFloat16));
    h = relu(g, "relu" + std::to_string(i),
             conv2d(g, "conv" + std::to_string(i), h, kC, {3},
                    {.pad = {1}, .seed = uint64_t{1} + static_cast<uint64_t>(i)}));
  }
  for (size_t i = skips.size(); i-- > 0;) {
    h = add(g, "merge" + std::to_string(i), h,
            cast(g, "wide" + std::to_string(i), skips[i], DType::kFloat32));
    h = conv2d(g, "out" + std::to_string(i), h, kC, {3}, {.pad = {1}, .seed = 10 + i});
  }
  g.set_loss(mse_loss(g, "loss", h, g.input("target", {kN, kC, kSize, kSize})));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.01, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(kN * 3 * kSize * kSize, gen, 2.0f)},
                       {"target", random_values(kN * kC * kSize * kSize, gen, 1.0f)}};
  const user::NoLmsReference ref = user::no_lms_reference(*train, feeds, 3);
  ASSERT_TRUE(ref.ok);
  LmsConfig config;
  config.auto_actions = AutoActions::kSwap;
  const std::optional<user::BudgetPlan> plan =
      user::first_plan_in_sweep(*train, ref, config, 32, [&](const Graph&, const RewriteReport& r) {
        for (const std::string& name : r.swapped) {
          const TensorId t = train->find_tensor(name);
          if (t != kNoTensor && train->tensor(t).dtype == DType::kBFloat16) return true;
        }
        return false;
      });
  ASSERT_TRUE(plan.has_value()) << "no budget swapped a bf16 skip";
  uint64_t bf16_bytes = 0;
  for (const std::string& name : plan->report.swapped) {
    const Tensor& t = train->tensor(train->find_tensor(name));
    if (t.dtype == DType::kBFloat16) bf16_bytes += t.bytes();
  }
  EXPECT_EQ(bf16_bytes % (2 * kN * kC * kSize * kSize), 0u);
  EXPECT_GT(bf16_bytes, 0u);
  user::expect_steps_bit_identical(*plan, feeds, ref);
}

}  // namespace
}  // namespace lms
