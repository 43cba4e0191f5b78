// A classifier exported from PyTorch, imported with lms::import_onnx and
// given its loss with lms::attach_loss, as a user would: the [N,C,1,1]
// output is refused by CrossEntropy with the advice to flatten it, then
// flattened and trained one step; the loss and every parameter's gradient
// match PyTorch's F.cross_entropy (one row ignored). The model and its
// reference are written at test time by tests/onnx/make_pooled_classifier.py
// (Debian's /usr/bin/python3 with torch and onnx; skipped without them).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "lms/device.h"
#include "lms/loss.h"
#include "lms/onnx.h"
#include "lms/ops.h"
#include "lms/session.h"
#include "lms/training.h"
#include "reference.h"

namespace lms {
namespace {

constexpr uint64_t kMiBytes = uint64_t{1} << 20;
// The same float32 model in another order of sums (the U-Net fixture
// matches to 3e-6).
constexpr double kTolerance = 1e-5;

TEST(PooledClassifierLoss, ImportedClassifierWithAttachedCrossEntropyMatchesPyTorch) {
  const onnx_test::ScriptFixture f = onnx_test::run_fixture_script("make_pooled_classifier.py");
  if (!f.failed && f.dir.empty()) GTEST_SKIP() << f.why;
  ASSERT_FALSE(f.failed) << f.why;
  const std::string& dir = f.dir;
  const auto ref = onnx_test::read_reference(dir + "/pooled_classifier_ref.txt");
  auto m = import_onnx(dir + "/pooled_classifier.onnx");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  ASSERT_TRUE(m.ok()) << m.status();
  Graph g = std::move(m->graph);
  ASSERT_EQ(m->outputs.size(), 1u);
  const TensorId output = g.find_tensor(m->outputs[0]);
  ASSERT_NE(output, kNoTensor);
  ASSERT_EQ(g.tensor(output).shape, (Shape{6, 5, 1, 1}));

  // The pooled [N,C,1,1] output: refused, saying how to flatten it.
  auto refused = attach_loss(g, output, CrossEntropy{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("flatten it first"), absl::string_view::npos)
      << refused.status();
  const TensorId logits = flatten(g, "logits", output);
  auto loss = attach_loss(g, logits, CrossEntropy{.labels = "labels"});
  ASSERT_TRUE(loss.ok()) << loss.status();
  auto train = training_graph(g, *loss, Sgd{.lr = 0.0});
  ASSERT_TRUE(train.ok()) << train.status();

  std::vector<std::string> fetches = {"loss"};
  for (const std::string& p : m->parameters) fetches.push_back(p + "/grad");
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiBytes, .host_pool_bytes = kMiBytes});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session = Session::create(*train, **device, {.fetches = fetches});
  ASSERT_TRUE(session.ok()) << session.status();
  const std::vector<float>& label_values = ref.at("labels");
  const std::vector<int64_t> labels(label_values.begin(), label_values.end());
  StepResult r;
  ASSERT_TRUE((*session)->run({{m->inputs[0], ref.at("input")}}, {{"labels", labels}}, &r).ok());
  ASSERT_EQ(m->parameters.size(), 4u);
  for (const std::string& name : fetches) {
    const double err = onnx_test::rel_l2(r.fetched.at(name), ref.at(name));
    std::printf("%-17s relative L2 error %.3g\n", name.c_str(), err);
    EXPECT_LE(err, kTolerance) << name;
  }
}

}  // namespace
}  // namespace lms
