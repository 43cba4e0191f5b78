// A user's classifier built from everyday PyTorch idioms (conv feeding a
// ReLU, pooling with ceil_mode, average pooling with counted padding,
// Hardswish and Hardsigmoid, a channel shuffle, x.mean(dim=(2, 3)) without
// keepdim, a trainable table indexed by a constant buffer, attention with
// torch.einsum over five dims, tanh), exported by tests/onnx/make_idioms_model.py at test
// time and trained through the public API alone:
//  - one step matches PyTorch's loss and every parameter's gradient;
//  - under LMS, at the first budget of a sweep whose plan swaps or
//    recomputes a tensor, three steps are bit-identical to the steps without
//    LMS and the measured peak is the predicted one.
// Skipped where Debian's /usr/bin/python3 lacks torch or onnx.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "../onnx/reference.h"
#include "budget_check.h"
#include "lms/device.h"
#include "lms/loss.h"
#include "lms/onnx.h"
#include "lms/session.h"
#include "lms/training.h"

namespace lms {
namespace {

constexpr uint64_t kMiBytes = uint64_t{1} << 20;
// The same float32 model with sums in another order.
constexpr double kTolerance = 1e-5;

struct Imported {
  Graph train;
  std::vector<std::string> parameters;
  std::string input;
  std::map<std::string, std::vector<float>> ref;
};

// Imports the model, checks that every idiom became the op it should, and
// builds its training graph (cross-entropy on the logits, SGD).
void import_idioms(double lr, Imported* out) {
  const onnx_test::ScriptFixture f = onnx_test::run_fixture_script("make_idioms_model.py");
  if (!f.failed && f.dir.empty()) GTEST_SKIP() << f.why;
  ASSERT_FALSE(f.failed) << f.why;
  out->ref = onnx_test::read_reference(f.dir + "/idioms_ref.txt");
  auto m = import_onnx(f.dir + "/idioms.onnx");
  std::error_code ignored;
  std::filesystem::remove_all(f.dir, ignored);
  ASSERT_TRUE(m.ok()) << m.status();
  Graph g = std::move(m->graph);
  std::map<OpKind, int> count;
  for (NodeId n = 0; n < g.num_nodes(); ++n) ++count[g.node(n).op];
  EXPECT_EQ(count[OpKind::kHardSwish], 1);
  EXPECT_EQ(count[OpKind::kHardSigmoid], 1);
  EXPECT_EQ(count[OpKind::kTanh], 1);
  EXPECT_EQ(count[OpKind::kMaxPool], 1);
  EXPECT_EQ(count[OpKind::kAvgPool], 2);  // one of them a Pad + AveragePool
  // The table's rows by a one-hot product, and the two einsums.
  EXPECT_EQ(count[OpKind::kMatMul], 3);
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (node.op == OpKind::kMaxPool) {
      EXPECT_TRUE(node.attrs.contains("ceil_mode")) << node.name;
    }
  }
  // ceil_mode: 10 -> 5 (floor mode: 4), then 5 -> 3 (floor mode: 2).
  const TensorId pooled = g.find_tensor("/pool1/MaxPool_output_0");
  ASSERT_NE(pooled, kNoTensor);
  EXPECT_EQ(g.tensor(pooled).shape, (Shape{4, 8, 5, 5}));
  ASSERT_EQ(m->outputs.size(), 1u);
  const TensorId logits = g.find_tensor(m->outputs[0]);
  ASSERT_NE(logits, kNoTensor);
  EXPECT_EQ(g.tensor(logits).shape, (Shape{4, 5}));
  auto loss = attach_loss(g, logits, CrossEntropy{.labels = "labels"});
  ASSERT_TRUE(loss.ok()) << loss.status();
  auto train = training_graph(g, *loss, Sgd{.lr = lr});
  ASSERT_TRUE(train.ok()) << train.status();
  out->train = *std::move(train);
  out->parameters = m->parameters;
  out->input = m->inputs[0];
}

std::vector<int64_t> labels_of(const std::map<std::string, std::vector<float>>& ref) {
  const std::vector<float>& v = ref.at("labels");
  return std::vector<int64_t>(v.begin(), v.end());
}

TEST(IdiomsImport, OneStepMatchesPyTorch) {
  Imported m;
  import_idioms(0.0, &m);
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return;
  std::vector<std::string> fetches = {"loss"};
  for (const std::string& p : m.parameters) fetches.push_back(p + "/grad");
  ASSERT_EQ(m.parameters.size(), 11u);  // 4 convs, fc (weights and biases), the table
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiBytes, .host_pool_bytes = kMiBytes});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session = Session::create(m.train, **device, {.fetches = fetches});
  ASSERT_TRUE(session.ok()) << session.status();
  StepResult r;
  ASSERT_TRUE(
      (*session)->run({{m.input, m.ref.at("input")}}, {{"labels", labels_of(m.ref)}}, &r).ok());
  for (const std::string& name : fetches) {
    const double err = onnx_test::rel_l2(r.fetched.at(name), m.ref.at(name));
    std::printf("%-22s relative L2 error %.3g\n", name.c_str(), err);
    EXPECT_LE(err, kTolerance) << name;
  }
}

TEST(IdiomsImport, LmsStepsAreBitIdenticalAtThePredictedPeak) {
  Imported m;
  import_idioms(0.05, &m);
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return;
  user::expect_lms_steps_bit_identical(m.train, {{m.input, m.ref.at("input")}}, 3,
                                       {{"labels", labels_of(m.ref)}});
}

}  // namespace
}  // namespace lms
