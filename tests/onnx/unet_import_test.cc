// A 2-D U-Net-like PyTorch model (conv, batch norm in training mode, relu,
// leaky relu, max pool, nearest Resize, transposed conv, concat, sigmoid),
// exported by scripts/export_onnx.py (tests/onnx/make_unet_fixture.py, seed
// 1234), imported, extended with an MSE loss and trained for one step on the
// CPU device: output, loss and every parameter gradient match PyTorch's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "lms/device.h"
#include "lms/onnx.h"
#include "lms/ops.h"
#include "lms/session.h"
#include "lms/training.h"
#include "reference.h"

namespace lms {
namespace {

using onnx_test::data_dir;
using onnx_test::read_reference;
using onnx_test::rel_l2;

constexpr double kTolerance = 1e-4;     // relative L2 error, as the brief of the importer asks
constexpr double kZeroGradient = 1e-7;  // L2 norm of a gradient that is 0 but for round-off
const Shape kShape = {2, 1, 16, 16};

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

TEST(UnetImport, SplitsInitializersAndNamesInputsAndOutputs) {
  auto m = import_onnx(data_dir() + "/unet_small.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->inputs, std::vector<std::string>{"input"});
  EXPECT_EQ(m->outputs, std::vector<std::string>{"output"});
  EXPECT_EQ(m->opset, 14);
  EXPECT_EQ(m->parameters.size(), 16u);  // metadata_props lms.trainable
  EXPECT_EQ(m->parameters.front(), "enc1.0.weight");
  ASSERT_EQ(m->state.size(), 6u);  // running mean and variance of three BNs
  for (const ImportedState& s : m->state) {
    EXPECT_NE(s.name.find("running_"), std::string::npos) << s.name;
    EXPECT_TRUE(s.in_graph) << s.name;  // read by batch_norm, updated at the commit
  }
  EXPECT_EQ(m->graph.tensor(m->graph.find_tensor("output")).shape, kShape);
  EXPECT_TRUE(verify(m->graph).ok());
}

TEST(UnetImport, AnotherBatchSizeFoldsTheShapeArithmeticForIt) {
  auto m =
      import_onnx(data_dir() + "/unet_small.onnx", {.input_shapes = {{"input", {5, 1, 16, 16}}}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph.tensor(m->graph.find_tensor("output")).shape, (Shape{5, 1, 16, 16}));
}

TEST(UnetImport, TheTrainableOptionOverridesTheMetadata) {
  auto m = import_onnx(data_dir() + "/unet_small.onnx",
                       {.trainable = std::vector<std::string>{"head.weight"}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->parameters, std::vector<std::string>{"head.weight"});
  const TensorId bias = m->graph.find_tensor("head.bias");
  ASSERT_NE(bias, kNoTensor);
  EXPECT_EQ(m->graph.tensor(bias).role, TensorRole::kOptimizerState);
}

TEST(UnetImport, OneTrainingStepMatchesPyTorch) {
  std::printf("fixture seed 1234 (tests/onnx/make_unet_fixture.py)\n");
  auto ref = read_reference(data_dir() + "/unet_small_ref.txt");
  auto m = import_onnx(data_dir() + "/unet_small.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  Graph g = std::move(m->graph);
  const TensorId target = g.input("target", kShape);
  const TensorId loss = mse_loss(g, "loss", g.find_tensor("output"), target);
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto train = training_graph(g, loss, Sgd{.lr = 0});
  ASSERT_TRUE(train.ok()) << train.status();
  SessionOptions options;
  options.fetches = {"output", "loss"};
  for (const std::string& p : m->parameters) options.fetches.push_back(p + "/grad");
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
  // round-off (PyTorch ~1e-10 here), whose relative error means nothing, so
  // such a gradient is checked to be round-off against the weight
  // gradients' scale (~1e-3) instead.
  double worst = 0;
  for (const std::string& p : m->parameters) {
    const std::vector<float>& got = step.fetched[p + "/grad"];
    const std::vector<float>& want = ref[p + "/grad"];
    if (norm(want) < kZeroGradient) {
      EXPECT_LT(norm(got), kZeroGradient) << p;
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

}  // namespace
}  // namespace lms
