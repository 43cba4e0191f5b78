// The graph and the CPU backend share the op schema: a node the graph
// builder refuses is refused by the CPU kernel compile with the same status
// (code and message), because both call the op's one check (op_schema.h).
#include "runtime/kernel_spec.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lms/device.h"
#include "lms/graph.h"

namespace lms {
namespace {

struct Case {
  OpKind op;
  Attrs attrs;
  std::vector<Shape> inputs;
  std::string problem;  // the fragment naming it
};

std::vector<Case> bad_cases() {
  const Shape x = {2, 16, 4, 4}, c = {16}, p = {8};
  const Attrs sgd = {{"lr", 0.1}, {"momentum", 1.5}, {"weight_decay", 0.0}, {"clip_norm", 0.0}};
  const Attrs adam = {{"lr", 0.1},   {"beta1", 0.9},        {"beta2", 1.0},
                      {"eps", 1e-8}, {"weight_decay", 0.0}, {"clip_norm", 0.0}};
  return {
      {OpKind::kSlice, {{"begin", int64_t{10}}, {"size", int64_t{8}}}, {x}, "begin + size <= 16"},
      {OpKind::kSgdUpdate, sgd, {p, p, p}, "momentum must be in [0, 1), got 1.5"},
      {OpKind::kAdamUpdate, adam, {p, p, p, p, {}}, "beta2 must be in [0, 1), got 1"},
      {OpKind::kBatchNorm, {{"eps", 0.0}}, {x, c, c}, "eps must be in (0, 1], got 0"},
      {OpKind::kLayerNorm, {{"eps", 2.0}}, {{4, 8}, {8}, {8}}, "eps must be in (0, 1], got 2"},
      {OpKind::kConv,
       {{"stride", std::vector<int64_t>{1}},
        {"pad", std::vector<int64_t>{0, 0}},
        {"dilation", std::vector<int64_t>{1, 1}}},
       {x, {4, 16, 3, 3}},
       "stride must have 2 entries"},
      {OpKind::kDropout, {{"ratio", 1.0}, {"seed", int64_t{1}}}, {x}, "ratio must be in [0, 1)"},
  };
}

TEST(KernelSpec, GraphBuilderAndCpuKernelCompileReturnTheSameStatus) {
  absl::StatusOr<std::unique_ptr<Device>> device = make_cpu_device({});
  ASSERT_TRUE(device.ok()) << device.status();
  for (const Case& c : bad_cases()) {
    Graph g;
    std::vector<TensorId> inputs;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      inputs.push_back(g.input("in" + std::to_string(i), c.inputs[i]));
    }
    const absl::StatusOr<std::vector<TensorId>> added = g.add_node(c.op, "bad", inputs, c.attrs);
    ASSERT_FALSE(added.ok()) << op_name(c.op) << " was added";
    EXPECT_NE(added.status().message().find(c.problem), absl::string_view::npos) << added.status();
    // The spec the runtime would compile for such a node, with the outputs
    // a kernel would be handed (the first input's shape).
    KernelSpec spec;
    spec.name = "bad";
    spec.op = c.op;
    spec.attrs = c.attrs;
    spec.input_shapes = c.inputs;
    spec.output_shapes = {c.inputs[0]};
    const absl::StatusOr<std::unique_ptr<Kernel>> kernel = (*device)->compile(spec);
    ASSERT_FALSE(kernel.ok()) << op_name(c.op) << " compiled";
    EXPECT_EQ(kernel.status(), added.status()) << op_name(c.op);
  }
}

// A valid node's spec, as the runtime builds it, carries its input dtypes
// and names, so the backend's check sees what the graph saw.
TEST(KernelSpec, SpecOfANodeCarriesDtypesAndNames) {
  Graph g;
  const TensorId ids = g.input("ids", {4}, DType::kInt64);
  const TensorId table = g.parameter("table", {10, 8}, Init::zeros());
  const TensorId y = g.add1(OpKind::kEmbedding, "emb", {ids, table}, {});
  ASSERT_TRUE(g.status().ok()) << g.status();
  const KernelSpec spec = kernel_spec(g, g.node(g.tensor(y).producer));
  EXPECT_EQ(spec.input_dtypes, (std::vector<DType>{DType::kInt64, DType::kFloat32}));
  EXPECT_EQ(spec.input_names, (std::vector<std::string>{"ids", "table"}));
  EXPECT_EQ(spec.output_shapes, (std::vector<Shape>{{4, 8}}));
}

}  // namespace
}  // namespace lms
