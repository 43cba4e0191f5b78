// The folding and identity passes of lms::import_onnx on one model
// (tests/onnx/make_error_fixtures.py, folding.onnx): relu(x[:, :C // 2]),
// with C // 2 computed by Shape / Gather / Div / Unsqueeze / Cast and the
// starts by ConstantOfShape, followed by Identity, Dropout (not training),
// an all-zero Pad, a 1x1 AveragePool, a one-input Concat and a float Cast.
// Folded for the batch given, the graph holds just the slice and the relu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "lms/device.h"
#include "lms/onnx.h"
#include "lms/session.h"
#include "reference.h"

namespace lms {
namespace {

constexpr uint64_t kSeed = 99;

TEST(OnnxFolding, ShapeArithmeticFoldsAndIdentitiesDisappear) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  auto m = import_onnx(onnx_test::data_dir() + "/errors/folding.onnx",
                       {.input_shapes = {{"x", {3, 4, 4, 4}}}});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->graph.num_nodes(), 2);
  EXPECT_EQ(m->graph.node(0).op, OpKind::kSlice);
  EXPECT_EQ(m->graph.node(1).op, OpKind::kRelu);
  EXPECT_EQ(m->outputs, std::vector<std::string>{"y"});
  EXPECT_EQ(m->graph.tensor(m->graph.find_tensor("y")).shape, (Shape{3, 2, 4, 4}));

  std::mt19937_64 gen(kSeed);
  std::normal_distribution<float> normal;
  std::vector<float> x(3 * 4 * 4 * 4);
  for (float& v : x) v = normal(gen);
  auto device = make_cpu_device({});
  ASSERT_TRUE(device.ok()) << device.status();
  SessionOptions o;
  o.fetches = m->outputs;
  auto s = Session::create(m->graph, **device, o);
  ASSERT_TRUE(s.ok()) << s.status();
  StepResult r;
  ASSERT_TRUE((*s)->run({{"x", x}}, &r).ok());
  const std::vector<float>& y = r.fetched["y"];
  ASSERT_EQ(y.size(), size_t{3 * 2 * 16});
  for (size_t n = 0; n < 3; ++n) {
    for (size_t k = 0; k < 2 * 16; ++k) {
      EXPECT_EQ(y[n * 32 + k], std::max(0.0f, x[n * 64 + k])) << n << "," << k;
    }
  }
}

TEST(OnnxFolding, AnotherBatchFoldsAgain) {
  auto m = import_onnx(onnx_test::data_dir() + "/errors/folding.onnx",
                       {.input_shapes = {{"x", {1, 8, 2, 2}}}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph.tensor(m->graph.find_tensor("y")).shape, (Shape{1, 4, 2, 2}));
}

}  // namespace
}  // namespace lms
