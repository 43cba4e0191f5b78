// GraphPass and PassPipeline (Note [Graph passes]): the check between passes
// catches a pass that drops a tensor's dtype, shape or role, or loses an
// input, and names the pass; a failed pipeline leaves the graph as it was;
// node maps compose; and the conv + relu fusion keeps every tensor of a
// classifier with int64 labels (the CPU device's blocked-layout pass is the
// runtime's, tested with it).
#include "graph/pass.h"

#include <memory>
#include <string>
#include <vector>

#include "graph/fusion.h"
#include "gtest/gtest.h"
#include "lms/ops.h"
#include "lms/training.h"

namespace lms {
namespace {

// conv -> relu -> conv -> relu -> pool -> linear -> cross-entropy over int64
// labels: the graph whose fusion once lost the labels' dtype.
Graph classifier() {
  Graph g;
  const TensorId x = g.input("image", {2, 3, 8, 8});
  const TensorId labels = g.input("labels", {2}, DType::kInt64);
  TensorId y = relu(g, "r1", conv2d(g, "c1", x, 16, {3}, {.pad = {1}, .seed = 1}));
  y = relu(g, "r2", conv2d(g, "c2", y, 16, {3}, {.pad = {1}, .seed = 2}));
  y = flatten(g, "flat", global_avg_pool(g, "pool", y));
  const TensorId w = g.parameter("fc/w", {5, 16}, Init::he_normal(3, 16));
  const TensorId loss = softmax_cross_entropy(g, "loss", linear(g, "fc", y, w), labels);
  EXPECT_TRUE(g.status().ok()) << g.status();
  absl::StatusOr<Graph> train = training_graph(g, loss, Sgd{.lr = 0.1});
  EXPECT_TRUE(train.ok()) << train.status();
  return *std::move(train);
}

// Rebuilds nothing, but turns the int64 labels into float32: the defect the
// check exists for.
class DropsLabelDtype : public GraphPass {
 public:
  std::string_view name() const override { return "drops_label_dtype"; }
  absl::StatusOr<bool> run(Graph& graph) override {
    graph.mutable_tensor(graph.find_tensor("labels")).dtype = DType::kFloat32;
    return true;
  }
};

class ChangesRole : public GraphPass {
 public:
  std::string_view name() const override { return "changes_role"; }
  absl::StatusOr<bool> run(Graph& graph) override {
    graph.mutable_tensor(graph.find_tensor("fc/w")).role = TensorRole::kOptimizerState;
    return true;
  }
};

class Fails : public GraphPass {
 public:
  std::string_view name() const override { return "fails"; }
  absl::StatusOr<bool> run(Graph& graph) override {
    graph.mutable_node(0).name = "renamed_before_failing";
    return absl::InvalidArgumentError("cannot");
  }
};

TEST(PassPipelineTest, CatchesAPassThatDropsADtypeAndNamesIt) {
  Graph g = classifier();
  const std::string before = to_text(g);
  PassPipeline pipeline;
  pipeline.add(std::make_unique<FuseConvReluPass>(std::vector<std::string>{"loss"}));
  pipeline.add(std::make_unique<DropsLabelDtype>());
  absl::StatusOr<PipelineResult> r = pipeline.run(g);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("drops_label_dtype"), absl::string_view::npos) << r.status();
  EXPECT_NE(r.status().message().find("'labels'"), absl::string_view::npos) << r.status();
  EXPECT_NE(r.status().message().find("i64 became f32"), absl::string_view::npos) << r.status();
  EXPECT_EQ(to_text(g), before);  // the fusion before it is not kept either
}

TEST(PassPipelineTest, CatchesARoleChangeAndAFailedPassLeavesTheGraph) {
  Graph g = classifier();
  const std::string before = to_text(g);
  PassPipeline roles;
  roles.add(std::make_unique<ChangesRole>());
  absl::StatusOr<PipelineResult> r = roles.run(g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("changes_role"), absl::string_view::npos) << r.status();
  EXPECT_NE(r.status().message().find("role"), absl::string_view::npos) << r.status();

  PassPipeline failing;
  failing.add(std::make_unique<Fails>());
  r = failing.run(g);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "fails: cannot");
  EXPECT_EQ(to_text(g), before);
}

TEST(PassPipelineTest, TheFusionPassKeepsEveryTensorAndComposesItsNodeMap) {
  Graph g = classifier();
  const Graph original = g;
  const TensorSnapshot snap = snapshot_tensors(g);
  PassPipeline pipeline;
  pipeline.add(std::make_unique<FuseConvReluPass>(std::vector<std::string>{"loss"}));
  absl::StatusOr<PipelineResult> r = pipeline.run(g);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->changed);
  EXPECT_TRUE(check_tensors_kept(snap, g, "cpu passes").ok());
  EXPECT_EQ(g.tensor(g.find_tensor("labels")).dtype, DType::kInt64);
  // Each relu and its conv map to the one fused node, named as the relu.
  ASSERT_EQ(r->node_map.size(), static_cast<size_t>(original.num_nodes()));
  for (const char* relu : {"r1", "r2"}) {
    const NodeId fused = r->node_map[original.find_node(relu)];
    EXPECT_EQ(g.node(fused).name, relu);
  }
  EXPECT_EQ(r->node_map[original.find_node("c1")], r->node_map[original.find_node("r1")]);
  // The fused nodes say so by their origin, every other node is the user's.
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const bool fused = g.node(id).name == "r1" || g.node(id).name == "r2";
    EXPECT_EQ(g.node(id).origin, fused ? NodeOrigin::kFused : NodeOrigin::kOriginal)
        << g.node(id).name;
  }
  EXPECT_EQ(g.find_node("c1"), kNoNode);
  // Every other node keeps its name through the map.
  for (NodeId id = 0; id < original.num_nodes(); ++id) {
    const std::string& name = original.node(id).name;
    if (name == "c1" || name == "c2") continue;
    EXPECT_EQ(g.node(r->node_map[id]).name, name);
  }
  // Run again on the result: nothing more to fuse, and nothing changes.
  const std::string once = to_text(g);
  absl::StatusOr<PipelineResult> again = pipeline.run(g);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->changed);
  EXPECT_EQ(to_text(g), once);
}

TEST(PassPipelineTest, ChecksCanBeTurnedOff) {
  Graph g = classifier();
  PassPipeline unchecked({.check_between_passes = false});
  unchecked.add(std::make_unique<DropsLabelDtype>());
  absl::StatusOr<PipelineResult> r = unchecked.run(g);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(g.tensor(g.find_tensor("labels")).dtype, DType::kFloat32);
}

TEST(GraphTest, LeafLikeCopiesEveryFieldAndRefusesAProducedTensor) {
  const Graph g = classifier();
  Graph copy;
  for (const char* name : {"image", "labels", "fc/w"}) {
    const Tensor& from = g.tensor(g.find_tensor(name));
    const TensorId t = copy.leaf_like(from);
    ASSERT_NE(t, kNoTensor) << copy.status();
    EXPECT_EQ(copy.tensor(t).name, from.name);
    EXPECT_EQ(copy.tensor(t).dtype, from.dtype);
    EXPECT_EQ(copy.tensor(t).shape, from.shape);
    EXPECT_EQ(copy.tensor(t).role, from.role);
    EXPECT_EQ(copy.tensor(t).init.kind, from.init.kind);
  }
  EXPECT_EQ(copy.leaf_like(g.tensor(g.find_tensor("r1"))), kNoTensor);
  EXPECT_EQ(copy.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lms
