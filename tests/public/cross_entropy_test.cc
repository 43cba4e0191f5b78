// softmax_cross_entropy through include/lms only: the loss and the gradient
// of the logits against PyTorch's F.cross_entropy (torch/reference.py) on
// random data with fixed, printed seeds, with and without ignored rows; a
// small classifier (linear -> relu -> linear, lms::attach_loss with
// CrossEntropy) trained 3 SGD steps with momentum against torch.optim.SGD;
// that classifier planned with LMS at a tight budget, bit-identical to the
// step without LMS at the predicted peak; and the op's errors (shapes,
// dtype, labels out of range at run time).
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "budget_check.h"
#include "lms/loss.h"
#include "torch_compare.h"
#include "torch_reference.h"
#include "user_models.h"

namespace lms {
namespace {

using torch_ref::random_values;
using torch_ref::relative_l2;
using torch_ref::TorchTensors;
using user::kMiB;

// Relative L2 error allowed against PyTorch for one op: the same float32
// inputs, sums in double here and in another order there.
constexpr double kOpTolerance = 1e-5;
// After three SGD steps through two linear layers (the brief's bound).
constexpr double kTrainTolerance = 1e-4;

struct XentCase {
  int64_t n, c;
  int64_t ignore_index;
  double ignored_fraction;  // rows whose label is ignore_index
  float logit_scale;        // logits uniform in [-scale, scale)
  uint64_t seed;
  int64_t t = 0;  // > 0: logits [n, t, c] with labels [n, t] (a sequence model's)

  Shape logits_shape() const { return t > 0 ? Shape{n, t, c} : Shape{n, c}; }
  Shape labels_shape() const { return t > 0 ? Shape{n, t} : Shape{n}; }
  int64_t rows() const { return t > 0 ? n * t : n; }
};

std::vector<int64_t> random_labels(const XentCase& xc, std::mt19937_64& gen) {
  std::uniform_int_distribution<int64_t> label(0, xc.c - 1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int64_t> labels(static_cast<size_t>(xc.rows()));
  for (int64_t& l : labels) l = u(gen) < xc.ignored_fraction ? xc.ignore_index : label(gen);
  return labels;
}

std::vector<float> as_floats(const std::vector<int64_t>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// loss = softmax_cross_entropy(logits, labels), logits a parameter so that
// it gets a gradient; SGD with lr 0 leaves it as written.
absl::StatusOr<Graph> xent_graph(const XentCase& xc) {
  Graph g;
  const TensorId logits = g.parameter("logits", xc.logits_shape(), Init{});
  const TensorId labels = g.input("labels", xc.labels_shape(), DType::kInt64);
  g.set_loss(softmax_cross_entropy(g, "loss", logits, labels, xc.ignore_index));
  LMS_RETURN_IF_ERROR(g.status());
  return training_graph(g, g.loss(), Sgd{.lr = 0.0});
}

void check_against_torch(const XentCase& xc) {
  const std::string shape = torch_ref::shape_string(xc.logits_shape());
  SCOPED_TRACE(testing::Message() << "logits " << shape << " ignore_index " << xc.ignore_index
                                  << " seed " << xc.seed);
  std::printf("cross_entropy %s, ignore_index %" PRId64 ", seed %" PRIu64 "\n", shape.c_str(),
              xc.ignore_index, xc.seed);
  std::mt19937_64 gen(xc.seed);
  std::vector<float> logits = random_values(xc.rows() * xc.c, gen);
  for (float& v : logits) v *= xc.logit_scale;
  const std::vector<int64_t> labels = random_labels(xc, gen);
  TorchTensors in = {{"logits", {xc.logits_shape(), logits}},
                     {"labels", {xc.labels_shape(), as_floats(labels)}}};
  auto ref = torch_ref::torch_reference(
      "cross_entropy", {{"ignore_index", {static_cast<double>(xc.ignore_index)}}}, in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();

  auto train = xent_graph(xc);
  ASSERT_TRUE(train.ok()) << train.status();
  const std::optional<StepResult> r = torch_ref::one_step(*train, in,
                                                          {.written = {"logits"},
                                                           .fetches = {"loss", "logits/grad"},
                                                           .int64_feeds = {{"labels", labels}}});
  ASSERT_TRUE(r.has_value());
  const float want_loss = ref->at("loss").values.at(0);
  if (std::isnan(want_loss)) {  // every row ignored: 0/0 in PyTorch too
    EXPECT_TRUE(std::isnan(r->fetched.at("loss")[0])) << r->fetched.at("loss")[0];
  } else {
    std::printf("  loss %.9g (PyTorch %.9g)\n", r->fetched.at("loss")[0], want_loss);
    torch_ref::expect_close_to_torch(*r, *ref, {"loss"}, kOpTolerance);
  }
  torch_ref::expect_close_to_torch(*r, *ref, {"logits/grad"}, kOpTolerance);
}

TEST(CrossEntropy, MatchesPyTorch) {
  check_against_torch({4, 10, -100, 0.0, 1.0f, 61});
  check_against_torch({33, 7, -100, 0.3, 1.0f, 62});
  // ignore_index a valid class: its rows do not count.
  check_against_torch({16, 5, 2, 0.0, 3.0f, 63});
  // Logits up to +-80: exp would overflow float without the row maximum.
  check_against_torch({8, 1000, -1, 0.25, 80.0f, 64});
  check_against_torch({1, 1, -100, 0.0, 1.0f, 65});
  // Classes on the last axis of [N,T,C], a language model's next-token loss
  // (F.cross_entropy(logits.view(-1, C), labels.view(-1))), with padding
  // positions ignored.
  check_against_torch({2, 50, -100, 0.2, 2.0f, 66, 7});
  check_against_torch({3, 256, 0, 0.1, 1.0f, 67, 5});
}

// Every row ignored: the loss is NaN and the gradient zero, as PyTorch's.
TEST(CrossEntropy, EveryRowIgnoredGivesNanLossAndZeroGradientAsPyTorch) {
  check_against_torch({5, 3, -100, 1.0, 1.0f, 66});
}

// ---- A classifier trained as a user would: attach_loss(CrossEntropy) ----

struct MlpDims {
  int64_t n, c, hidden, k;
};

// fc2(relu(fc1(x))) with nn.Linear's weight layout; parameters from the
// model's own initialisation (overwritten by the test where it compares).
absl::StatusOr<Graph> mlp_forward(const MlpDims& d) {
  Graph g;
  const TensorId x = g.input("x", {d.n, d.c});
  const TensorId w1 = g.parameter("fc1/w", {d.hidden, d.c}, Init::he_normal(1, d.c));
  const TensorId b1 = g.parameter("fc1/b", {d.hidden}, Init::constant(0.01));
  const TensorId w2 = g.parameter("fc2/w", {d.k, d.hidden}, Init::he_normal(2, d.hidden));
  const TensorId b2 = g.parameter("fc2/b", {d.k}, Init::constant(0.01));
  const TensorId h = relu(g, "fc1/relu", linear(g, "fc1", x, w1, b1));
  linear(g, "logits", h, w2, b2);
  LMS_RETURN_IF_ERROR(g.status());
  return g;
}

absl::StatusOr<Graph> mlp_training(const MlpDims& d, const Sgd& sgd) {
  LMS_ASSIGN_OR_RETURN(Graph g, mlp_forward(d));
  LMS_ASSIGN_OR_RETURN(TensorId loss, attach_loss(g, "logits", CrossEntropy{.labels = "labels"}));
  return training_graph(g, loss, sgd);
}

TEST(CrossEntropy, ClassifierTrainedThreeStepsMatchesPyTorch) {
  constexpr uint64_t kSeed = 67;
  constexpr int kSteps = 3;
  const MlpDims d = {.n = 12, .c = 20, .hidden = 32, .k = 6};
  const Sgd sgd = {.lr = 0.1, .momentum = 0.9};
  std::printf("seed %" PRIu64 "\n", kSeed);
  std::mt19937_64 gen(kSeed);
  TorchTensors in;
  in["x"] = {{d.n, d.c}, random_values(d.n * d.c, gen)};
  in["fc1/w"] = {{d.hidden, d.c}, random_values(d.hidden * d.c, gen)};
  in["fc1/b"] = {{d.hidden}, random_values(d.hidden, gen)};
  in["fc2/w"] = {{d.k, d.hidden}, random_values(d.k * d.hidden, gen)};
  in["fc2/b"] = {{d.k}, random_values(d.k, gen)};
  const std::vector<int64_t> labels = random_labels({d.n, d.k, -100, 0.0, 1.0f, kSeed}, gen);
  in["labels"] = {{d.n}, as_floats(labels)};
  auto ref = torch_ref::torch_reference(
      "mlp_cross_entropy_sgd",
      {{"lr", {sgd.lr}}, {"momentum", {sgd.momentum}}, {"steps", {double{kSteps}}}}, in);
  if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status().message();
  ASSERT_TRUE(ref.ok()) << ref.status();

  auto train = mlp_training(d, sgd);
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session = Session::create(*train, **device, {.fetches = {"loss"}});
  ASSERT_TRUE(session.ok()) << session.status();
  const std::vector<std::string> params = {"fc1/w", "fc1/b", "fc2/w", "fc2/b"};
  for (const std::string& p : params) ASSERT_TRUE((*session)->write(p, in.at(p).values).ok()) << p;
  std::vector<float> losses;
  for (int s = 0; s < kSteps; ++s) {
    StepResult r;
    ASSERT_TRUE((*session)->run({{"x", in.at("x").values}}, {{"labels", labels}}, &r).ok());
    losses.push_back(r.fetched.at("loss")[0]);
  }
  const double loss_err = relative_l2(losses, ref->at("losses").values);
  std::printf("  losses %.7g %.7g %.7g, relative L2 error %.3g\n", losses[0], losses[1], losses[2],
              loss_err);
  EXPECT_LE(loss_err, kTrainTolerance);
  EXPECT_LT(losses.back(), losses.front());  // it learns
  for (const std::string& p : params) {
    auto got = (*session)->read(p);
    ASSERT_TRUE(got.ok()) << got.status();
    const double err = relative_l2(*got, ref->at(p).values);
    std::printf("  %-6s relative L2 error %.3g\n", p.c_str(), err);
    EXPECT_LE(err, kTrainTolerance) << p;
  }
}

TEST(CrossEntropy, ClassifierWithLmsIsBitIdenticalAtThePredictedPeak) {
  constexpr uint64_t kSeed = 68;
  const MlpDims d = {.n = 64, .c = 96, .hidden = 384, .k = 10};
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto train = mlp_training(d, Sgd{.lr = 0.05, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  std::mt19937_64 gen(kSeed);
  const Feeds feeds = {{"x", random_values(d.n * d.c, gen)}};
  const Int64Feeds labels = {{"labels", random_labels({d.n, d.k, -100, 0.1, 1.0f, kSeed}, gen)}};
  user::expect_lms_steps_bit_identical(*train, feeds, 3, labels);
}

// ---- Errors ----

std::string recorded_error(const std::function<void(Graph&)>& build) {
  Graph g;
  build(g);
  return std::string(g.status().message());
}

TEST(CrossEntropy, ShapeAndDtypeErrorsNameTheNodeAndTheInput) {
  const std::string rank4 = recorded_error([](Graph& g) {
    softmax_cross_entropy(g, "xent", g.input("logits", {4, 10, 1, 1}),
                          g.input("labels", {4}, DType::kInt64));
  });
  EXPECT_NE(rank4.find("node 'xent'"), std::string::npos) << rank4;
  EXPECT_NE(rank4.find("logits [4,10,1,1] have one class on the last axis, where the classes "
                       "go; flatten an [N,C,1,...] output first (lms::flatten)"),
            std::string::npos)
      << rank4;
  const std::string rows = recorded_error([](Graph& g) {
    softmax_cross_entropy(g, "xent", g.input("logits", {4, 10}),
                          g.input("labels", {5}, DType::kInt64));
  });
  EXPECT_NE(rows.find("labels [5] must be [4], one class index per row of logits [4,10]"),
            std::string::npos)
      << rows;
  const std::string dtype = recorded_error([](Graph& g) {
    softmax_cross_entropy(g, "xent", g.input("logits", {4, 10}), g.input("labels", {4}));
  });
  EXPECT_NE(dtype.find("node 'xent'"), std::string::npos) << dtype;
  EXPECT_NE(dtype.find("f32"), std::string::npos) << dtype;
  EXPECT_NE(dtype.find("i64"), std::string::npos) << dtype;
}

// A label outside [0, C) that is not ignore_index fails the step, naming
// the node, the label, its position and what is allowed; the session stays
// usable and the next good step runs.
TEST(CrossEntropy, LabelOutOfRangeFailsTheStepNamingIt) {
  const XentCase xc = {3, 10, -100, 0.0, 1.0f, 69};
  auto train = xent_graph(xc);
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = kMiB});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session = Session::create(*train, **device, {.fetches = {"loss"}});
  ASSERT_TRUE(session.ok()) << session.status();
  StepResult r;
  for (int64_t bad : {int64_t{10}, int64_t{-1}}) {
    const absl::Status s = (*session)->run({}, {{"labels", {0, 9, bad}}}, &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    const std::string want = "label " + std::to_string(bad) +
                             " at position 2 is out of range [0, 10) of the 10 classes and is "
                             "not ignore_index -100";
    EXPECT_NE(s.message().find("node 'loss' (op softmax_cross_entropy)"), std::string::npos) << s;
    EXPECT_NE(s.message().find(want), std::string::npos) << s;
  }
  EXPECT_TRUE((*session)->run({}, {{"labels", {0, 9, -100}}}, &r).ok());
}

}  // namespace
}  // namespace lms
