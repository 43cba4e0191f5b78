// lms::autocast through include/lms only, on random data with fixed, printed
// seeds:
// - a small CNN (conv, batch norm, max pool, a residual add, global average
//   pool, linear, cross-entropy) trained in bf16 against PyTorch's
//   torch.autocast("cpu", bfloat16) (torch/reference.py "autocast_cnn"):
//   the first step's loss and gradients, and 20 steps' losses; a float64
//   run shows how far each is from exact;
// - where the casts go (per torch.autocast's op lists), the shared cast of a
//   parameter, a folded cast of a cast, and the errors of bad input, after
//   which the graph is unchanged;
// - a model autocast was not written for (a user's U-Net, with concat skips,
//   upsample and sigmoid) in bf16 and in f16 with loss scaling: steps
//   planned with LMS (swap and recompute) are bit-identical to those
//   without at the predicted peak.
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <random>
#include <string_view>

#include "budget_check.h"
#include "torch_compare.h"
#include "torch_reference.h"

namespace lms {
namespace {

using torch_ref::random_values;
using torch_ref::relative_l2;
using torch_ref::TorchTensors;
using user::kMiB;

constexpr int64_t kN = 4, kC = 3, kSize = 8, kHidden = 8, kClasses = 5;

const char* const kParams[] = {"conv1/w", "conv1/b", "bn/gamma", "bn/beta",
                               "conv2/w", "conv2/b", "fc/w",     "fc/b"};

// torch/reference.py's small_cnn, forward only, ending in the loss.
Graph small_cnn() {
  Graph g;
  const TensorId x = g.input("x", {kN, kC, kSize, kSize});
  const TensorId labels = g.input("labels", {kN}, DType::kInt64);
  auto param = [&](const char* name, Shape shape) { return g.parameter(name, shape, Init{}); };
  TensorId h = conv(g, "conv1", x, param("conv1/w", {kHidden, kC, 3, 3}),
                    param("conv1/b", {kHidden}), {.pad = {1, 1}});
  h = relu(g, "relu1",
           batch_norm(g, "bn", h, param("bn/gamma", {kHidden}), param("bn/beta", {kHidden})));
  const TensorId skip = max_pool2d(g, "pool", h, 2);
  h = relu(g, "relu2",
           conv(g, "conv2", skip, param("conv2/w", {kHidden, kHidden, 3, 3}),
                param("conv2/b", {kHidden}), {.pad = {1, 1}}));
  h = flatten(g, "flat", global_avg_pool(g, "gap", add(g, "res", h, skip)));
  const TensorId logits =
      linear(g, "fc", h, param("fc/w", {kClasses, kHidden}), param("fc/b", {kClasses}), true);
  g.set_loss(softmax_cross_entropy(g, "loss", logits, labels));
  return g;
}

struct CnnCase {
  TorchTensors in;
  Feeds feeds;
  Int64Feeds labels;
};

CnnCase random_cnn_case(uint64_t seed) {
  std::mt19937_64 gen(seed);
  CnnCase c;
  auto add = [&](const char* name, Shape shape, float scale) {
    c.in[name] = {shape, random_values(num_elements(shape), gen, scale)};
  };
  add("x", {kN, kC, kSize, kSize}, 2.0f);
  add("conv1/w", {kHidden, kC, 3, 3}, 0.4f);
  add("conv1/b", {kHidden}, 0.1f);
  add("conv2/w", {kHidden, kHidden, 3, 3}, 0.2f);
  add("conv2/b", {kHidden}, 0.1f);
  add("fc/w", {kClasses, kHidden}, 0.5f);
  add("fc/b", {kClasses}, 0.1f);
  c.in["bn/gamma"] = {{kHidden}, std::vector<float>(kHidden, 1.0f)};
  for (float& v : c.in["bn/gamma"].values) v += random_values(1, gen, 0.2f)[0];
  add("bn/beta", {kHidden}, 0.1f);
  std::vector<int64_t> labels(kN);
  std::vector<float> label_values(kN);
  for (int64_t i = 0; i < kN; ++i) {
    labels[i] = static_cast<int64_t>(gen() % kClasses);
    label_values[i] = static_cast<float>(labels[i]);
  }
  c.in["labels"] = {{kN}, label_values};
  c.feeds = {{"x", c.in.at("x").values}};
  c.labels = {{"labels", labels}};
  return c;
}

// The first step's loss and gradients and 20 steps' losses against
// torch.autocast; the distance of both to the float64 step, printed.
TEST(Autocast, Bf16StepsMatchTorchAutocast) {
  constexpr uint64_t kSeed = 2027;
  constexpr int kSteps = 20;
  constexpr double kLr = 0.05, kMomentum = 0.9;
  std::printf("small CNN, seed %" PRIu64 "\n", kSeed);
  const CnnCase c = random_cnn_case(kSeed);
  auto ref = torch_ref::torch_reference(
      "autocast_cnn",
      {{"lr", {kLr}}, {"momentum", {kMomentum}}, {"steps", {static_cast<double>(kSteps)}}}, c.in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();

  Graph forward = small_cnn();
  ASSERT_TRUE(forward.status().ok()) << forward.status();
  auto report = autocast(forward, {.dtype = DType::kBFloat16});
  ASSERT_TRUE(report.ok()) << report.status();
  auto train = training_graph(forward, forward.loss(), Sgd{.lr = kLr, .momentum = kMomentum});
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  std::vector<std::string> fetches = {"loss"};
  for (const char* p : kParams) fetches.push_back(std::string(p) + "/grad");
  auto session = Session::create(*train, **device, {.fetches = fetches});
  ASSERT_TRUE(session.ok()) << session.status();
  for (const char* p : kParams) ASSERT_TRUE((*session)->write(p, c.in.at(p).values).ok()) << p;

  // bf16 keeps 8 bits of mantissa: a relative error of 2^-8 per rounding,
  // several roundings deep. The 20-step curve drifts a little further.
  constexpr double kGradTolerance = 3e-2, kLossTolerance = 1e-2, kCurveTolerance = 3e-2;
  std::vector<float> losses;
  for (int step = 0; step < kSteps; ++step) {
    StepResult r;
    ASSERT_TRUE((*session)->run(c.feeds, c.labels, &r).ok());
    losses.push_back(r.fetched.at("loss")[0]);
    if (step > 0) continue;
    const float exact = ref->at("loss/exact").values[0];
    std::printf("step 1 loss: lms %.6f, torch autocast %.6f, float64 %.6f\n", losses[0],
                ref->at("losses").values[0], exact);
    EXPECT_LE(std::abs(losses[0] - ref->at("losses").values[0]), kLossTolerance * exact);
    for (const char* p : kParams) {
      const std::string name = std::string(p) + "/grad";
      const std::vector<float>& got = r.fetched.at(name);
      if (std::string_view(p) == "conv1/b") {
        // A bias before batch norm gets no gradient: zero up to rounding.
        double largest = 0;
        for (float v : got) largest = std::max(largest, std::abs(static_cast<double>(v)));
        std::printf("  %-14s largest %.3g (exact: 0)\n", name.c_str(), largest);
        EXPECT_LE(largest, 1e-3) << name;
        continue;
      }
      const double vs_torch = relative_l2(got, ref->at(name).values);
      const double lms_exact = relative_l2(got, ref->at(name + "/exact").values);
      const double torch_exact = relative_l2(ref->at(name).values, ref->at(name + "/exact").values);
      std::printf("  %-14s vs torch autocast %.3g; from float64: lms %.3g, torch %.3g\n",
                  name.c_str(), vs_torch, lms_exact, torch_exact);
      EXPECT_LE(vs_torch, kGradTolerance) << name;
      EXPECT_LE(lms_exact, kGradTolerance) << name;
    }
  }
  for (int step = 0; step < kSteps; ++step) {
    const float want = ref->at("losses").values[step];
    EXPECT_LE(std::abs(losses[step] - want), kCurveTolerance * std::abs(want)) << "step " << step;
  }
  std::printf("loss after %d steps: lms %.5f, torch autocast %.5f (from %.5f)\n", kSteps,
              losses.back(), ref->at("losses").values[kSteps - 1], losses.front());
  EXPECT_LT(losses.back(), 0.5f * losses.front()) << "did not train";
}

// Casts where torch.autocast places them; names kept; one cast per
// parameter; the loss float32.
TEST(Autocast, PlacesCastsAsTorchAutocast) {
  Graph g = small_cnn();
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto report = autocast(g, {.dtype = DType::kFloat16});
  ASSERT_TRUE(report.ok()) << report.status();
  auto dtype_of = [&](const char* name) {
    const TensorId t = g.find_tensor(name);
    EXPECT_NE(t, kNoTensor) << name;
    return t == kNoTensor ? DType::kInt64 : g.tensor(t).dtype;
  };
  // conv and linear compute in f16 and the loss in float32; batch norm,
  // the pointwise ops and pooling follow their inputs, batch norm's scale
  // and shift staying float32.
  for (const char* name : {"conv1", "bn", "relu1", "pool", "conv2", "relu2", "res", "fc"}) {
    EXPECT_EQ(dtype_of(name), DType::kFloat16) << name;
  }
  EXPECT_EQ(dtype_of("loss"), DType::kFloat32);
  EXPECT_EQ(dtype_of("conv1/w"), DType::kFloat32);  // the master weight
  EXPECT_EQ(dtype_of("conv1/w/f16"), DType::kFloat16);
  EXPECT_EQ(g.node(g.find_node("bn")).inputs[1], g.find_tensor("bn/gamma"));
  // Casts: the 6 parameters of conv1, conv2 and fc; x into conv1; fc's
  // output into the loss.
  EXPECT_EQ(report->casts_added, 8);
  EXPECT_EQ(report->casts_folded, 0);
  // conv1, bn, relu1, pool, conv2, relu2, res, gap, flat, fc.
  EXPECT_EQ(report->low_precision_nodes, 10);
  int casts = 0;
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    if (g.node(n).op != OpKind::kCast) continue;
    ++casts;
    EXPECT_EQ(g.node(n).origin, NodeOrigin::kCast);
  }
  EXPECT_EQ(casts, 8);
  auto train = training_graph(g, g.loss(), Adam{}, {.loss_scaling = LossScaling{}});
  ASSERT_TRUE(train.ok()) << train.status();
  // The optimizer reads float32 gradients of the float32 parameters.
  EXPECT_EQ(train->tensor(train->find_tensor("conv1/w/grad")).dtype, DType::kFloat32);
}

// A parameter read by two convs is cast once; the user's cast of a cast
// widened exactly is read through.
TEST(Autocast, SharesParameterCastsAndFoldsCastsOfCasts) {
  Graph g;
  const TensorId x = g.input("x", {2, 4, 6, 6});
  const TensorId w = g.parameter("w", {4, 4, 3, 3}, Init{});
  const TensorId h = cast(g, "h", x, DType::kBFloat16);
  const TensorId wide = cast(g, "wide", h, DType::kFloat32);  // exact: bf16 in f32
  const TensorId a = conv(g, "a", wide, w, kNoTensor, {.pad = {1, 1}});
  const TensorId b = conv(g, "b", relu(g, "r", a), w, kNoTensor, {.pad = {1, 1}});
  g.set_loss(mse_loss(g, "loss", b, g.input("target", {2, 4, 6, 6})));
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto report = autocast(g);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->casts_folded, 1);
  // conv a reads h itself: the cast to bf16 of "wide" is h.
  EXPECT_EQ(g.node(g.find_node("a")).inputs[0], g.find_tensor("h"));
  const TensorId w16 = g.find_tensor("w/bf16");
  ASSERT_NE(w16, kNoTensor);
  EXPECT_EQ(g.node(g.find_node("a")).inputs[1], w16);
  EXPECT_EQ(g.node(g.find_node("b")).inputs[1], w16);
  // w's cast, and b's output into the loss; relu follows a (bf16).
  EXPECT_EQ(report->casts_added, 2);
  EXPECT_EQ(g.tensor(g.find_tensor("r")).dtype, DType::kBFloat16);
  auto train = training_graph(g, g.loss(), Sgd{.lr = 0.1});
  ASSERT_TRUE(train.ok()) << train.status();  // w/bf16's two gradients are summed
  auto device = make_cpu_device({.capacity_bytes = 16 * kMiB, .host_pool_bytes = kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session = Session::create(*train, **device);
  ASSERT_TRUE(session.ok()) << session.status();
  std::mt19937_64 gen(7);
  std::printf("seed 7\n");
  StepResult r;
  ASSERT_TRUE(
      (*session)
          ->run({{"x", random_values(288, gen, 1.0f)}, {"target", random_values(288, gen, 1.0f)}},
                &r)
          .ok());
  EXPECT_TRUE(std::isfinite(r.fetched.at("loss")[0]));
}

TEST(Autocast, BadInputIsAClearErrorAndChangesNothing) {
  Graph g = small_cnn();
  ASSERT_TRUE(g.status().ok()) << g.status();
  const std::string before = to_text(g);
  auto wrong = autocast(g, {.dtype = DType::kFloat32});
  ASSERT_TRUE(absl::IsInvalidArgument(wrong.status())) << wrong.status();
  EXPECT_NE(wrong.status().message().find("bf16, f16"), std::string_view::npos) << wrong.status();
  EXPECT_EQ(to_text(g), before);

  auto train = training_graph(g, g.loss(), Sgd{});
  ASSERT_TRUE(train.ok()) << train.status();
  const std::string train_before = to_text(*train);
  auto late = autocast(*train);
  ASSERT_TRUE(absl::IsInvalidArgument(late.status())) << late.status();
  EXPECT_NE(late.status().message().find("before lms::training_graph"), std::string_view::npos)
      << late.status();
  EXPECT_EQ(to_text(*train), train_before);
}

// The U-Net of user_models.h in bf16 and f16, planned with swaps and with
// recomputation: bit-identical to the run without LMS at the predicted peak.
TEST(Autocast, LmsStepsOfAnAutocastUnetAreBitIdentical) {
  constexpr uint64_t kSeed = 31;
  for (const DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::printf("user U-Net in %s, seed %" PRIu64 "\n", dtype_name(dtype), kSeed);
    // f16 trains with loss scaling (PyTorch's GradScaler).
    TrainingOptions options;
    if (dtype == DType::kFloat16) options.loss_scaling = LossScaling{};
    auto train = user::user_unet(2, 32, Sgd{.lr = 0.05, .momentum = 0.9}, options,
                                 AutocastOptions{.dtype = dtype});
    ASSERT_TRUE(train.ok()) << train.status();
    const Feeds feeds = user::user_unet_feeds(2, 32, kSeed);
    const user::NoLmsReference ref = user::no_lms_reference(*train, feeds, 3);
    ASSERT_TRUE(ref.ok);
    for (const AutoActions actions : {AutoActions::kSwap, AutoActions::kRecompute}) {
      LmsConfig config;
      config.auto_actions = actions;
      config.time_model = TimeModel::kRoofline;
      const std::optional<user::BudgetPlan> plan = user::first_plan_in_sweep(
          *train, ref, config, 16, [&](const Graph&, const RewriteReport& r) {
            return actions == AutoActions::kSwap ? !r.swapped.empty() : !r.recomputed.empty();
          });
      ASSERT_TRUE(plan.has_value())
          << "no budget planned with auto_actions " << static_cast<int>(actions);
      user::expect_steps_bit_identical(*plan, feeds, ref);
    }
  }
}

}  // namespace
}  // namespace lms
