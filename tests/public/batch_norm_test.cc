// batch_norm with running statistics through include/lms only, against
// PyTorch (torch/reference.py) on random data with fixed, printed seeds: a
// conv + BatchNorm2d + relu model trained three steps of SGD with momentum
// (losses, parameters and running mean / variance), then evaluated in eval
// mode (model.eval()); the running statistics are updated at the step
// commit, so a step planned with LMS at a tight budget is bit-identical to
// one without, and a failed step leaves them as they were.
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <random>

#include "budget_check.h"
#include "faulty_device.h"
#include "torch_reference.h"
#include "user_models.h"

namespace lms {
namespace {

using torch_ref::random_values;
using torch_ref::relative_l2;
using torch_ref::TorchTensors;
using user::kMiB;

// Relative L2 error allowed against PyTorch (the brief of this test: the
// same float32 model, its sums in another order).
constexpr double kTolerance = 1e-4;

struct Case {
  int64_t n = 4, c = 3, k = 5, size = 6;
  double lr = 0.1, momentum = 0.9, bn_momentum = 0.1, eps = 1e-5;
  int steps = 3;
  uint64_t seed = 0;
};

const char* const kTrained[] = {"w", "b", "gamma", "beta", "running_mean", "running_var"};

// conv "conv" (3x3, pad 1) -> batch_norm "bn" (persistent running_mean /
// running_var) -> relu "y"; with a loss when training.
Graph conv_bn_relu(const Case& c, bool training) {
  Graph g;
  const TensorId x = g.input("x", {c.n, c.c, c.size, c.size});
  const TensorId w = g.parameter("w", {c.k, c.c, 3, 3}, Init{});
  const TensorId b = g.parameter("b", {c.k}, Init{});
  const TensorId h = conv(g, "conv", x, w, b, {.pad = {1, 1}});
  const TensorId gamma = g.parameter("gamma", {c.k}, Init::constant(1.0));
  const TensorId beta = g.parameter("beta", {c.k}, Init::zeros());
  const TensorId mean = g.optimizer_state("running_mean", {c.k}, Init::zeros());
  const TensorId var = g.optimizer_state("running_var", {c.k}, Init::constant(1.0));
  const TensorId bn = batch_norm(g, "bn", h, gamma, beta, mean, var,
                                 {.eps = c.eps, .momentum = c.bn_momentum, .training = training});
  const TensorId y = relu(g, "y", bn);
  if (training) g.set_loss(mse_loss(g, "loss", y, g.input("target", {c.n, c.k, c.size, c.size})));
  return g;
}

TorchTensors random_case(const Case& c) {
  std::mt19937_64 gen(c.seed);
  TorchTensors in;
  in["x"] = {{c.n, c.c, c.size, c.size}, random_values(c.n * c.c * c.size * c.size, gen)};
  in["target"] = {{c.n, c.k, c.size, c.size}, random_values(c.n * c.k * c.size * c.size, gen)};
  in["w"] = {{c.k, c.c, 3, 3}, random_values(c.k * c.c * 9, gen)};
  in["b"] = {{c.k}, random_values(c.k, gen)};
  in["gamma"] = {{c.k}, random_values(c.k, gen)};
  in["beta"] = {{c.k}, random_values(c.k, gen)};
  in["running_mean"] = {{c.k}, random_values(c.k, gen)};
  std::vector<float> var = random_values(c.k, gen);
  for (float& v : var) v = 0.5f + std::abs(v);
  in["running_var"] = {{c.k}, var};
  return in;
}

void write_state(Session& s, const TorchTensors& values) {
  for (const char* name : kTrained) {
    ASSERT_TRUE(s.write(name, values.at(name).values).ok()) << name;
  }
}

TEST(BatchNorm, RunningStatisticsAndEvalModeMatchPyTorch) {
  for (const Case& c :
       {Case{.seed = 41},
        Case{.n = 2, .c = 4, .k = 3, .size = 5, .bn_momentum = 0.3, .eps = 1e-3, .seed = 42}}) {
    std::printf("conv+bn+relu N %" PRId64 " C %" PRId64 " K %" PRId64 " S %" PRId64
                ", bn momentum %g, seed %" PRIu64 "\n",
                c.n, c.c, c.k, c.size, c.bn_momentum, c.seed);
    const TorchTensors in = random_case(c);
    auto ref = torch_ref::torch_reference("conv_bn_relu",
                                          {{"lr", {c.lr}},
                                           {"momentum", {c.momentum}},
                                           {"bn_momentum", {c.bn_momentum}},
                                           {"eps", {c.eps}},
                                           {"steps", {static_cast<double>(c.steps)}}},
                                          in);
    if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
    ASSERT_TRUE(ref.ok()) << ref.status();

    Graph forward = conv_bn_relu(c, true);
    ASSERT_TRUE(forward.status().ok()) << forward.status();
    auto train = training_graph(forward, forward.loss(), Sgd{.lr = c.lr, .momentum = c.momentum});
    ASSERT_TRUE(train.ok()) << train.status();
    ASSERT_NE(train->find_node("bn_stats/bn"), kNoNode);
    auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = kMiB});
    ASSERT_TRUE(device.ok()) << device.status();
    auto session = Session::create(*train, **device);
    ASSERT_TRUE(session.ok()) << session.status();
    write_state(**session, in);
    const Feeds feeds = {{"x", in.at("x").values}, {"target", in.at("target").values}};
    for (int step = 0; step < c.steps; ++step) {
      StepResult r;
      ASSERT_TRUE((*session)->run(feeds, &r).ok());
      const float want = ref->at("loss").values[step];
      EXPECT_LE(std::abs(r.fetched.at("loss")[0] - want), kTolerance * std::abs(want)) << step;
    }
    TorchTensors trained;
    for (const char* name : kTrained) {
      auto got = (*session)->read(name);
      ASSERT_TRUE(got.ok()) << got.status();
      const double err = relative_l2(*got, ref->at(name).values);
      const double moved = relative_l2(*got, in.at(name).values);
      std::printf("  %-12s relative L2 error %.3g (moved %.3g from its initial value)\n", name, err,
                  moved);
      EXPECT_LE(err, kTolerance) << name;
      if (std::string_view(name) != "b") {  // a bias before batch norm gets no gradient
        EXPECT_GT(moved, 1e-3) << name << " did not train";
      }
      trained[name] = {{}, *got};
    }

    // Eval mode: the forward graph with training = false, given the state
    // lms trained, normalises with the running statistics.
    Graph eval = conv_bn_relu(c, false);
    ASSERT_TRUE(eval.status().ok()) << eval.status();
    auto eval_device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = kMiB});
    ASSERT_TRUE(eval_device.ok()) << eval_device.status();
    auto eval_session = Session::create(eval, **eval_device, {.fetches = {"y"}});
    ASSERT_TRUE(eval_session.ok()) << eval_session.status();
    write_state(**eval_session, trained);
    StepResult r;
    ASSERT_TRUE((*eval_session)->run({{"x", in.at("x").values}}, &r).ok());
    const double err = relative_l2(r.fetched.at("y"), ref->at("y_eval").values);
    std::printf("  %-12s relative L2 error %.3g\n", "y (eval)", err);
    EXPECT_LE(err, kTolerance);
  }
}

TEST(BatchNorm, EvalModeHasNoGradient) {
  Graph g = conv_bn_relu(Case{}, false);
  const TensorId loss = mse_loss(g, "loss", g.find_tensor("y"), g.input("target", {4, 5, 6, 6}));
  auto train = training_graph(g, loss, Sgd{});
  ASSERT_FALSE(train.ok());
  EXPECT_NE(train.status().message().find("eval mode"), std::string_view::npos) << train.status();
}

// Two conv + batch_norm (+ relu) blocks, big enough for the planner to swap.
absl::StatusOr<Graph> two_blocks(int64_t n, int64_t size, const Optimizer& opt) {
  Graph g;
  TensorId h = g.input("x", {n, 4, size, size});
  for (int i = 1; i <= 2; ++i) {
    const std::string name = "block" + std::to_string(i);
    h = conv2d(g, name + "/conv", h, 16, {3, 3}, {.pad = {1, 1}, .seed = static_cast<uint64_t>(i)});
    h = batch_norm(g, name + "/bn", h, BatchNormOptions{});
    // Block 2's output goes straight into the head convolution, whose weight
    // gradient reads it again: a candidate for swapping or recomputation.
    if (i == 1) h = relu(g, name + "/relu", h);
  }
  h = conv2d(g, "head", h, 1, {3, 3}, {.pad = {1, 1}, .seed = 3});
  g.set_loss(mse_loss(g, "loss", h, g.input("target", {n, 1, size, size})));
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, g.loss(), opt);
}

Feeds two_block_feeds(int64_t n, int64_t size, uint64_t seed) {
  std::mt19937_64 gen(seed);
  return {{"x", random_values(n * 4 * size * size, gen)},
          {"target", random_values(n * size * size, gen)}};
}

TEST(BatchNorm, LmsIsBitIdenticalIncludingRunningStatistics) {
  constexpr uint64_t kSeed = 43;
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto train = two_blocks(4, 24, Sgd{.lr = 0.05, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(train->find_tensor("block1/bn/running_var") != kNoTensor);
  // expect_lms_steps_bit_identical compares every persistent tensor, the
  // running statistics among them.
  user::expect_lms_steps_bit_identical(*train, two_block_feeds(4, 24, kSeed), 3);
}

// A batch_norm straight on the input (which its gradient keeps live) whose
// output the first convolution's weight gradient reads at the end of the
// backward pass: recomputing it costs one batch_norm.
absl::StatusOr<Graph> input_norm_net(int64_t n, int64_t size, const Optimizer& opt) {
  Graph g;
  TensorId h = batch_norm(g, "in/bn", g.input("x", {n, 16, size, size}), BatchNormOptions{});
  h = conv2d(g, "conv1", h, 16, {3, 3}, {.pad = {1, 1}, .seed = 1});
  h = relu(g, "relu1", batch_norm(g, "bn1", h, BatchNormOptions{}));
  h = conv2d(g, "head", h, 1, {3, 3}, {.pad = {1, 1}, .seed = 2});
  g.set_loss(mse_loss(g, "loss", h, g.input("target", {n, 1, size, size})));
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, g.loss(), opt);
}

// The planner may run a training-mode batch_norm again (a recomputed chain
// through it): the clone recomputes the batch statistics of the same
// bytes, so steps stay bit-identical, running statistics included.
TEST(BatchNorm, RecomputedBatchNormIsBitIdentical) {
  constexpr uint64_t kSeed = 45;
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto train = input_norm_net(4, 24, Sgd{.lr = 0.05, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(4 * 16 * 24 * 24, gen)},
                       {"target", random_values(4 * 24 * 24, gen)}};
  const user::NoLmsReference ref = user::no_lms_reference(*train, feeds, 3);
  ASSERT_TRUE(ref.ok);
  const std::optional<user::BudgetPlan> plan =
      user::first_plan_recomputing(*train, ref, OpKind::kBatchNorm, 2);
  ASSERT_TRUE(plan.has_value()) << "no budget planned to run a batch_norm again";
  user::expect_steps_bit_identical(*plan, feeds, ref);
}

// transactional_step_test.cc's technique: the k-th allocation of a swapped
// step fails, for every k; the running statistics must be as before.
TEST(BatchNorm, FailedStepLeavesRunningStatisticsUnchanged) {
  constexpr uint64_t kSeed = 44;
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto train = two_blocks(2, 16, Adam{.lr = 1e-2});
  ASSERT_TRUE(train.ok()) << train.status();
  const Feeds feeds = two_block_feeds(2, 16, kSeed);
  auto inner = make_cpu_device({.capacity_bytes = 256 * kMiB, .host_pool_bytes = 64 * kMiB});
  ASSERT_TRUE(inner.ok()) << inner.status();
  user::FaultyDevice device(std::move(*inner));
  Graph swapped = *train;
  LmsConfig config;
  config.policy = SwapPolicy::kTflms;  // swaps by rule: every far consumer
  config.swapout_threshold = 2;
  auto report = rewrite(swapped, config, device);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_FALSE(report->swapped.empty());
  auto session = Session::create(swapped, device);
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  StepResult r;
  ASSERT_TRUE(s.run(feeds, &r).ok());
  const auto before = user::persistent_state(s);
  device.arm(0);
  ASSERT_TRUE(s.run(feeds, &r).ok());
  device.disarm();
  const int64_t allocations = device.allocations();
  const auto after = user::persistent_state(s);
  const std::vector<std::string> changed_by_step = user::differing(before, after);
  for (const char* name : {"block1/bn/running_mean", "block1/bn/running_var",
                           "block2/bn/running_mean", "block2/bn/running_var"}) {
    EXPECT_NE(std::find(changed_by_step.begin(), changed_by_step.end(), name),
              changed_by_step.end())
        << name << " not updated by a step";
  }
  ASSERT_GT(allocations, 0);
  int surfaced = 0;
  for (int64_t k = 1; k <= allocations; ++k) {
    SCOPED_TRACE(testing::Message() << "failing allocation " << k << " of " << allocations);
    for (const auto& [name, values] : before) ASSERT_TRUE(s.write(name, values).ok()) << name;
    device.arm(k);
    absl::Status failed = s.run(feeds, &r);
    device.disarm();
    if (failed.ok()) continue;  // a pinned-host allocation retried within the step
    ++surfaced;
    const std::vector<std::string> changed = user::differing(before, user::persistent_state(s));
    ASSERT_TRUE(changed.empty()) << "the failed step changed '" << changed[0] << "'";
    ASSERT_TRUE(s.run(feeds, &r).ok());
    EXPECT_EQ(user::differing(after, user::persistent_state(s)), std::vector<std::string>{});
  }
  EXPECT_GT(surfaced, 0);
}

}  // namespace
}  // namespace lms
