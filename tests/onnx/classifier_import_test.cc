// A MobileNet-like PyTorch classifier (conv, depthwise and grouped conv,
// batch norm in training mode, ReLU6, AvgPool2d, AdaptiveAvgPool2d(1),
// Flatten, nn.Linear, clamp, reshape(-1, F), x @ w.t()), exported by
// scripts/export_onnx.py (tests/onnx/make_classifier_fixture.py, seed 4242)
// and imported through lms/onnx.h: its nodes become lms's classifier ops,
// one training step on the CPU device matches PyTorch's autograd, and the
// imported model trained with LMS at a tight budget gives the same bits as
// without LMS.
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>

#include "lms/config.h"
#include "lms/device.h"
#include "lms/onnx.h"
#include "lms/ops.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/training.h"
#include "reference.h"

namespace lms {
namespace {

using onnx_test::data_dir;
using onnx_test::read_reference;
using onnx_test::rel_l2;

constexpr double kTolerance = 1e-4;     // relative L2 error, as the brief of the importer asks
constexpr double kZeroGradient = 1e-7;  // L2 norm of a PyTorch gradient that is 0 but round-off
// The L2 norm of lms's value of such a gradient, relative to the largest
// gradient's: float32 round-off of sums over the batch, not a signal.
constexpr double kRoundOff = 1e-5;
constexpr int64_t kClasses = 10;
const Shape kShape = {4, 3, 8, 8};

std::string fixture() { return data_dir() + "/classifier_small.onnx"; }

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

// The imported forward graph with an MSE loss against a [N, classes] target.
absl::StatusOr<Graph> with_loss(ImportedModel m, int64_t batch) {
  Graph g = std::move(m.graph);
  const TensorId target = g.input("target", {batch, kClasses});
  if (mse_loss(g, "loss", g.find_tensor("output"), target) == kNoTensor) return g.status();
  return g;
}

const Node* producer(const Graph& g, std::string_view tensor) {
  const TensorId t = g.find_tensor(tensor);
  if (t == kNoTensor || g.tensor(t).producer == kNoNode) return nullptr;
  return &g.node(g.tensor(t).producer);
}

int64_t int_attr(const Node& n, const std::string& name) {
  auto it = n.attrs.find(name);
  return it == n.attrs.end() ? -1 : std::get<int64_t>(it->second);
}

TEST(ClassifierImport, EachLayerBecomesOneClassifierOp) {
  auto m = import_onnx(fixture());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->parameters.size(), 15u);  // metadata_props lms.trainable
  EXPECT_EQ(m->state.size(), 6u);        // running mean and variance of three BNs
  const Graph& g = m->graph;
  EXPECT_EQ(g.tensor(g.find_tensor("output")).shape, (Shape{4, kClasses}));
  std::map<OpKind, int> count;
  for (NodeId id = 0; id < g.num_nodes(); ++id) ++count[g.node(id).op];
  EXPECT_EQ(count[OpKind::kConv], 3);
  EXPECT_EQ(count[OpKind::kClip], 4);     // three ReLU6 and the clamp
  EXPECT_EQ(count[OpKind::kAvgPool], 2);  // AvgPool2d and GlobalAveragePool
  EXPECT_EQ(count[OpKind::kReshape], 2);  // Flatten and Reshape
  EXPECT_EQ(count[OpKind::kLinear], 2);   // Gemm and MatMul
  const Node* depthwise = producer(g, "/features/features.3/Conv_output_0");
  ASSERT_NE(depthwise, nullptr);
  EXPECT_EQ(int_attr(*depthwise, "group"), 8);
  const Node* grouped = producer(g, "/features/features.6/Conv_output_0");
  ASSERT_NE(grouped, nullptr);
  EXPECT_EQ(int_attr(*grouped, "group"), 2);
  const Node* dense = producer(g, "/features/features.0/Conv_output_0");
  ASSERT_NE(dense, nullptr);
  EXPECT_EQ(int_attr(*dense, "group"), -1);  // absent: the ungrouped kernels
  // nn.Linear is Gemm with transB = 1; x @ proj.t() reads proj itself.
  const Node* fc = producer(g, "/fc/Gemm_output_0");
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(int_attr(*fc, "trans_b"), 1);
  EXPECT_EQ(g.tensor(fc->inputs[1]).name, "fc.weight");
  const Node* proj = producer(g, "output");
  ASSERT_NE(proj, nullptr);
  EXPECT_EQ(proj->op, OpKind::kLinear);
  EXPECT_EQ(int_attr(*proj, "trans_b"), 1);
  EXPECT_EQ(g.tensor(proj->inputs[1]).name, "proj");
  EXPECT_EQ(g.tensor(proj->inputs[1]).role, TensorRole::kParameter);
  const Node* pool = producer(g, "/features/features.10/GlobalAveragePool_output_0");
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(g.tensor(pool->outputs[0]).shape, (Shape{4, 16, 1, 1}));
  EXPECT_TRUE(verify(g).ok());
}

TEST(ClassifierImport, AnotherInputSizeResolvesTheReshapeForIt) {
  auto m = import_onnx(fixture(), {.input_shapes = {{"input", {6, 3, 16, 12}}}});
  ASSERT_TRUE(m.ok()) << m.status();
  const Graph& g = m->graph;
  EXPECT_EQ(g.tensor(g.find_tensor("/Reshape_output_0")).shape, (Shape{6, 32}));
  EXPECT_EQ(g.tensor(g.find_tensor("output")).shape, (Shape{6, kClasses}));
}

TEST(ClassifierImport, OneTrainingStepMatchesPyTorch) {
  std::printf("fixture seed 4242 (tests/onnx/make_classifier_fixture.py)\n");
  auto ref = read_reference(data_dir() + "/classifier_small_ref.txt");
  auto m = import_onnx(fixture());
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<std::string> parameters = m->parameters;
  auto g = with_loss(std::move(*m), kShape[0]);
  ASSERT_TRUE(g.ok()) << g.status();
  auto train = training_graph(*g, g->find_tensor("loss"), Sgd{.lr = 0});
  ASSERT_TRUE(train.ok()) << train.status();
  SessionOptions options;
  options.fetches = {"output", "loss"};
  for (const std::string& p : parameters) options.fetches.push_back(p + "/grad");
  auto device = make_cpu_device({});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session = Session::create(*train, **device, options);
  ASSERT_TRUE(session.ok()) << session.status();
  StepResult step;
  ASSERT_TRUE((*session)->run({{"input", ref["input"]}, {"target", ref["target"]}}, &step).ok());
  EXPECT_LE(rel_l2(step.fetched["output"], ref["output"]), kTolerance);
  EXPECT_LE(rel_l2(step.fetched["loss"], ref["loss"]), kTolerance);
  // A conv bias read only by a training-mode batch norm has gradient 0
  // exactly (the norm subtracts the batch mean): both frameworks return
  // round-off (PyTorch ~1e-16 here), checked against the gradients' scale
  // instead (unet_import_test.cc).
  double scale = 0;
  for (const std::string& p : parameters) scale = std::max(scale, norm(ref[p + "/grad"]));
  double worst = 0;
  for (const std::string& p : parameters) {
    const std::vector<float>& got = step.fetched[p + "/grad"];
    const std::vector<float>& want = ref[p + "/grad"];
    ASSERT_FALSE(want.empty()) << p << " has no PyTorch gradient";
    if (norm(want) < kZeroGradient) {
      EXPECT_LT(norm(got), kRoundOff * scale) << p;
      continue;
    }
    const double e = rel_l2(got, want);
    EXPECT_LE(e, kTolerance) << p;
    worst = std::max(worst, e);
  }
  std::printf(
      "loss %.7g (PyTorch %.7g), output error %.3g, worst gradient relative L2 error %.3g\n",
      double(step.fetched["loss"][0]), double(ref["loss"][0]),
      rel_l2(step.fetched["output"], ref["output"]), worst);
}

// The running statistics are persistent tensors under their ONNX names,
// updated at each step as PyTorch updates them: after three SGD steps from
// the file's values, parameters and running statistics match PyTorch, and
// the model imported in eval mode, given the trained state, gives PyTorch's
// model.eval() output.
TEST(ClassifierImport, RunningStatisticsAndEvalModeMatchPyTorch) {
  std::printf("fixture seed 4242 (tests/onnx/make_classifier_fixture.py)\n");
  auto ref = read_reference(data_dir() + "/classifier_small_ref.txt");
  auto m = import_onnx(fixture());
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<std::string> trained = m->parameters;
  for (const ImportedState& s : m->state) {
    EXPECT_TRUE(s.in_graph) << s.name;
    trained.push_back(s.name);
  }
  ASSERT_TRUE(std::count(trained.begin(), trained.end(), "features.4.running_var") == 1);
  auto g = with_loss(std::move(*m), kShape[0]);
  ASSERT_TRUE(g.ok()) << g.status();
  // make_classifier_fixture.py: STEPS, LR, MOMENTUM.
  auto train = training_graph(*g, g->find_tensor("loss"), Sgd{.lr = 0.05, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_NE(train->find_node("bn_stats//features/features.1/BatchNormalization_output_0"), kNoNode);
  auto device = make_cpu_device({});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session = Session::create(*train, **device);
  ASSERT_TRUE(session.ok()) << session.status();
  const Feeds feeds = {{"input", ref["input"]}, {"target", ref["target"]}};
  for (int step = 0; step < 3; ++step) {
    StepResult r;
    ASSERT_TRUE((*session)->run(feeds, &r).ok());
  }
  std::map<std::string, std::vector<float>> state;
  double worst = 0;
  for (const std::string& name : trained) {
    auto got = (*session)->read(name);
    ASSERT_TRUE(got.ok()) << got.status();
    const std::vector<float>& want = ref["trained/" + name];
    ASSERT_FALSE(want.empty()) << name << " has no PyTorch value";
    const double e = rel_l2(*got, want);
    EXPECT_LE(e, kTolerance) << name;
    worst = std::max(worst, e);
    state[name] = *got;
  }
  std::printf("after 3 steps, worst relative L2 error of a parameter or running statistic %.3g\n",
              worst);

  auto eval = import_onnx(fixture(), {.eval_mode = true});
  ASSERT_TRUE(eval.ok()) << eval.status();
  // ONNX momentum 0.9 (the old value's weight) is PyTorch's and lms's 0.1.
  for (const Graph* graph : {&*g, &eval->graph}) {
    const NodeId id = graph->find_node("/features/features.1/BatchNormalization_output_0");
    ASSERT_NE(id, kNoNode);
    const Node* bn = &graph->node(id);
    ASSERT_EQ(bn->inputs.size(), 5u);
    EXPECT_EQ(graph->tensor(bn->inputs[3]).name, "features.1.running_mean");
    EXPECT_NEAR(std::get<double>(bn->attrs.at("momentum")), 0.1, 1e-7);
    EXPECT_EQ(int_attr(*bn, "training"), graph == &*g ? 1 : 0);
  }
  auto eval_device = make_cpu_device({});
  ASSERT_TRUE(eval_device.ok()) << eval_device.status();
  auto eval_session = Session::create(eval->graph, **eval_device, {.fetches = {"output"}});
  ASSERT_TRUE(eval_session.ok()) << eval_session.status();
  for (const auto& [name, values] : state) {
    ASSERT_TRUE((*eval_session)->write(name, values).ok()) << name;
  }
  StepResult r;
  ASSERT_TRUE((*eval_session)->run({{"input", ref["input"]}}, &r).ok());
  const double e = rel_l2(r.fetched["output"], ref["eval_output"]);
  std::printf("eval-mode output relative L2 error %.3g\n", e);
  EXPECT_LE(e, kTolerance);
}

// ---- The imported model trained with LMS ----

constexpr uint64_t kSeed = 31337;
constexpr uint64_t kMiBytes = uint64_t{1} << 20;
constexpr int kSteps = 2;
const Shape kLmsShape = {8, 3, 32, 32};

Feeds random_feeds() {
  std::mt19937_64 gen(kSeed);
  std::normal_distribution<float> normal;
  std::vector<float> x(8 * 3 * 32 * 32), t(8 * kClasses);
  for (float& v : x) v = normal(gen);
  for (float& v : t) v = normal(gen);
  return {{"input", x}, {"target", t}};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct StepsRun {
  std::vector<std::vector<float>> fetched;  // loss and output of each step
  std::vector<std::vector<float>> state;    // every persistent tensor after the last
  uint64_t peak = 0;
};

StepsRun run_steps(const Graph& g, Device& device) {
  StepsRun out;
  SessionOptions o;
  o.fetches = {"loss", "output"};
  auto s = Session::create(g, device, o);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return out;
  const Feeds feeds = random_feeds();
  for (int step = 0; step < kSteps; ++step) {
    StepResult r;
    EXPECT_TRUE((*s)->run(feeds, &r).ok());
    out.fetched.push_back(r.fetched["loss"]);
    out.fetched.push_back(r.fetched["output"]);
    out.peak = std::max(out.peak, r.peak_device_bytes);
  }
  for (const std::string& name : (*s)->persistent_tensors()) {
    auto v = (*s)->read(name);
    EXPECT_TRUE(v.ok()) << name;
    out.state.push_back(v.ok() ? *v : std::vector<float>{});
  }
  return out;
}

// The first budget between the working-set limit and the no-LMS peak (in
// sixteenths) at which the plan swaps or recomputes a tensor and fits
// trains bit-identically to the no-LMS run, at the predicted peak.
TEST(ClassifierImport, TightBudgetIsBitIdenticalAtThePredictedPeak) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  auto m = import_onnx(fixture(), {.input_shapes = {{"input", kLmsShape}}});
  ASSERT_TRUE(m.ok()) << m.status();
  auto g = with_loss(std::move(*m), kLmsShape[0]);
  ASSERT_TRUE(g.ok()) << g.status();
  auto train = training_graph(*g, g->find_tensor("loss"), Sgd{.lr = 0.05, .momentum = 0.9});
  ASSERT_TRUE(train.ok()) << train.status();
  RewriteOptions fetched;
  fetched.fetched = {"loss", "output"};
  auto big = make_cpu_device({.capacity_bytes = 256 * kMiBytes, .host_pool_bytes = 256 * kMiBytes});
  ASSERT_TRUE(big.ok()) << big.status();
  LmsConfig off;
  off.enabled = false;
  Graph plain = *train;
  auto none = rewrite(plain, off, **big, fetched);
  ASSERT_TRUE(none.ok()) << none.status();
  const StepsRun reference = run_steps(plain, **big);
  ASSERT_EQ(reference.fetched.size(), size_t{2 * kSteps});
  EXPECT_NE(reference.fetched[0][0], reference.fetched[2][0]);  // the step trains

  const uint64_t low = none->working_set_limit_bytes, high = none->peak_bytes_after;
  std::printf("working-set limit %" PRIu64 " bytes, no-LMS peak %" PRIu64 " bytes\n", low, high);
  ASSERT_LT(low, high);
  bool checked = false;
  for (int i = 0; i < 16 && !checked; ++i) {
    const uint64_t budget = low + (high - low) * i / 16;
    auto device = make_cpu_device({.capacity_bytes = budget, .host_pool_bytes = 256 * kMiBytes});
    ASSERT_TRUE(device.ok()) << device.status();
    LmsConfig cfg;
    cfg.time_model = TimeModel::kRoofline;
    Graph planned = *train;
    auto rep = rewrite(planned, cfg, **device, fetched);
    if (!rep.ok() || !rep->fits || (rep->swapped.empty() && rep->recomputed.empty())) continue;
    SCOPED_TRACE(::testing::Message() << "budget " << budget);
    std::printf("budget %" PRIu64 ": peak %" PRIu64 ", %zu swapped, %zu recomputed\n", budget,
                rep->peak_bytes_after, rep->swapped.size(), rep->recomputed.size());
    EXPECT_LE(rep->peak_bytes_after, budget);
    const StepsRun lms = run_steps(planned, **device);
    EXPECT_EQ(lms.peak, rep->peak_bytes_after);
    ASSERT_EQ(lms.fetched.size(), reference.fetched.size());
    for (size_t k = 0; k < lms.fetched.size(); ++k) {
      EXPECT_TRUE(same_bits(lms.fetched[k], reference.fetched[k])) << "fetch " << k;
    }
    ASSERT_EQ(lms.state.size(), reference.state.size());
    for (size_t k = 0; k < lms.state.size(); ++k) {
      EXPECT_TRUE(same_bits(lms.state[k], reference.state[k])) << "persistent tensor " << k;
    }
    checked = true;
  }
  EXPECT_TRUE(checked) << "no budget in [" << low << ", " << high
                       << ") planned to fit with a tensor swapped or recomputed";
}

}  // namespace
}  // namespace lms
