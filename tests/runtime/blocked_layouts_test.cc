// assign_blocked_layouts: which tensors of a training graph are blocked, the
// agreement of every tensor's producer and consumers, fetched tensors and
// channel counts that keep tensors plain, idempotence, and the op registry's
// check of the "layout" attribute.
#include "runtime/blocked_layouts.h"

#include <set>
#include <string>
#include <vector>

#include "backend/cpu/blocked_layout.h"
#include "graph/op_registry.h"
#include "gtest/gtest.h"
#include "lms/ops.h"
#include "lms/training.h"
#include "runtime/kernel_spec.h"

namespace lms {
namespace {

// x -> c1 -> r1 -> c2 -> r2 -> c3 -> r3 -> concat(r3, r1) -> c4 (1 ch) + x
// -> mse. r1 and r3 feed the concat, which reads plain, so only c2's output,
// r2 and their gradients can stay blocked.
Graph skip_net(int64_t channels) {
  Graph g;
  TensorId x = g.input("x", {2, 1, 8, 8});
  TensorId target = g.input("target", {2, 1, 8, 8});
  TensorId r1 = relu(g, "r1", conv2d(g, "c1", x, channels, {3}, {.pad = {1}, .seed = 1}));
  TensorId r2 = relu(g, "r2", conv2d(g, "c2", r1, channels, {3}, {.pad = {1}, .seed = 2}));
  TensorId r3 = relu(g, "r3", conv2d(g, "c3", r2, channels, {3}, {.pad = {1}, .seed = 3}));
  TensorId cat = concat(g, "cat", {r3, r1});
  TensorId y = add(g, "residual", conv2d(g, "c4", cat, 1, {3}, {.pad = {1}, .seed = 4}), x);
  TensorId loss = mse_loss(g, "loss", y, target);
  return *training_graph(g, loss, Sgd{.lr = 0.1});
}

// The layout character of tensor `t` at slot `i` of node `n`.
char slot_layout(const Node& n, bool input, size_t i) {
  auto it = n.attrs.find(kLayoutAttr);
  if (it == n.attrs.end()) return kLayoutPlain;
  const std::string& s = std::get<std::string>(it->second);
  return input ? s[i] : s[n.inputs.size() + 1 + i];
}

// Property: a tensor's producer and every consumer agree on its layout.
// Returns the names of the blocked tensors.
std::set<std::string> check_agreement(const Graph& g) {
  std::set<std::string> blocked;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const Tensor& tensor = g.tensor(t);
    char layout = kLayoutPlain;
    if (tensor.producer != kNoNode) {
      const Node& p = g.node(tensor.producer);
      for (size_t i = 0; i < p.outputs.size(); ++i) {
        if (p.outputs[i] == t) layout = slot_layout(p, false, i);
      }
    }
    for (NodeId c : tensor.consumers) {
      const Node& n = g.node(c);
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.inputs[i] == t) {
          EXPECT_EQ(slot_layout(n, true, i), layout) << tensor.name;
        }
      }
    }
    if (layout == kLayoutBlocked) blocked.insert(tensor.name);
  }
  return blocked;
}

TEST(BlockedLayoutsTest, BlocksConvReluChainsAndKeepsConcatEdgesPlain) {
  Graph g = skip_net(16);
  auto report = assign_blocked_layouts(g, {});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(verify(g).ok()) << verify(g);
  // grad/c3/data is r2's gradient (c3's conv_bwd_data), grad/r2/data c2's.
  const std::set<std::string> want = {"c2", "r2", "grad/c3/data", "grad/r2/data"};
  EXPECT_EQ(check_agreement(g), want);
  EXPECT_EQ(report->blocked_tensors, 4);
  EXPECT_EQ(report->blocked_bytes, 4u * 2 * 16 * 8 * 8 * 4);
  // The kernels see the layouts by slot: c2's conv reads r1 plain and
  // writes blocked; c3's reads r2 blocked.
  const Node& c2 = g.node(g.tensor(g.find_tensor("c2")).producer);
  EXPECT_EQ(std::get<std::string>(c2.attrs.at(std::string(kLayoutAttr))), "ppp:b");
  const Node& c3 = g.node(g.tensor(g.find_tensor("c3")).producer);
  EXPECT_EQ(std::get<std::string>(c3.attrs.at(std::string(kLayoutAttr))), "bpp:p");
}

// One rule on both sides (backend/cpu/blocked_layout.h): every layout the
// pass assigns is one the CPU kernels accept, and a tensor of channels the
// block does not divide is refused there as it is left plain here.
TEST(BlockedLayoutsTest, EveryAssignedLayoutIsOneTheCpuKernelsAccept) {
  Graph g = skip_net(16);
  ASSERT_TRUE(assign_blocked_layouts(g, {}).ok());
  int with_layout = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (!n.attrs.contains(kLayoutAttr) || !has_kernel(n.op)) continue;
    ++with_layout;
    EXPECT_TRUE(cpu::check_blocked_layout(kernel_spec(g, n)).ok()) << n.name;
  }
  EXPECT_GT(with_layout, 0);
  KernelSpec relu;
  relu.name = "r";
  relu.op = OpKind::kRelu;
  relu.attrs = {{std::string(kLayoutAttr), std::string("b:b")}};
  relu.input_shapes = relu.output_shapes = {{2, cpu::kBlockChannels + 8, 4, 4}};
  EXPECT_EQ(cpu::check_blocked_layout(relu).code(), absl::StatusCode::kInvalidArgument);
  relu.input_shapes = relu.output_shapes = {{2, cpu::kBlockChannels, 4, 4}};
  EXPECT_TRUE(cpu::check_blocked_layout(relu).ok());
}

TEST(BlockedLayoutsTest, FetchedTensorsAndTheirElementwiseNeighboursStayPlain) {
  Graph g = skip_net(16);
  ASSERT_TRUE(assign_blocked_layouts(g, {"r2"}).ok());
  // r2 is fetched; relu r2 then keeps c2 plain, and relu_bwd its gradients.
  EXPECT_EQ(check_agreement(g), std::set<std::string>{});
}

TEST(BlockedLayoutsTest, ChannelsThatWouldPadStayPlain) {
  Graph g = skip_net(24);
  auto report = assign_blocked_layouts(g, {});
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->blocked_tensors, 0);
  EXPECT_EQ(check_agreement(g), std::set<std::string>{});
}

// c1 -> r1 -> c2 -> r2, then r2 times a [N,16,1,1] gate (squeeze-excitation)
// -> c3. The broadcasting mul indexes its gate by dimension, not as a flat
// array, so its tensors (r2, the gate, the product and their gradients)
// stay plain while c1 -> r1 -> c2 stays blocked.
TEST(BlockedLayoutsTest, BroadcastingMulKeepsItsTensorsPlain) {
  Graph g;
  TensorId x = g.input("x", {2, 1, 8, 8});
  TensorId r1 = relu(g, "r1", conv2d(g, "c1", x, 16, {3}, {.pad = {1}, .seed = 1}));
  TensorId r2 = relu(g, "r2", conv2d(g, "c2", r1, 16, {3}, {.pad = {1}, .seed = 2}));
  TensorId gate = sigmoid(g, "gate", g.parameter("g", {2, 16, 1, 1}, Init{}));
  TensorId y = conv2d(g, "c3", mul(g, "excite", r2, gate), 1, {3}, {.pad = {1}, .seed = 3});
  auto train =
      training_graph(g, mse_loss(g, "loss", y, g.input("target", {2, 1, 8, 8})), Sgd{.lr = 0.1});
  ASSERT_TRUE(train.ok()) << train.status();
  auto report = assign_blocked_layouts(*train, {});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(verify(*train).ok()) << verify(*train);
  const std::set<std::string> blocked = check_agreement(*train);
  EXPECT_TRUE(blocked.contains("r1")) << "the chain before the mul is blocked";
  for (const char* plain : {"r2", "excite", "gate"}) EXPECT_FALSE(blocked.contains(plain)) << plain;
  for (NodeId id = 0; id < train->num_nodes(); ++id) {
    const Node& n = train->node(id);
    if (n.op != OpKind::kMul && n.op != OpKind::kSumTo) continue;
    EXPECT_FALSE(n.attrs.contains(kLayoutAttr)) << n.name;
  }
}

TEST(BlockedLayoutsTest, RunningTwiceGivesTheSameGraph) {
  Graph g = skip_net(32);
  ASSERT_TRUE(assign_blocked_layouts(g, {}).ok());
  const std::string once = to_text(g);
  ASSERT_TRUE(assign_blocked_layouts(g, {}).ok());
  EXPECT_EQ(to_text(g), once);
  auto parsed = parse_graph(once);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(to_text(*parsed), once);
}

TEST(BlockedLayoutsTest, UnknownFetchIsInvalidArgument) {
  Graph g = skip_net(16);
  EXPECT_EQ(assign_blocked_layouts(g, {"nope"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BlockedLayoutsTest, VerifyRejectsMalformedLayoutAttribute) {
  Graph g = skip_net(16);
  Node& c2 = g.mutable_node(g.tensor(g.find_tensor("c2")).producer);
  for (const char* bad : {"pp:b", "ppp:bb", "pppb", "ppx:b"}) {
    c2.attrs[std::string(kLayoutAttr)] = std::string(bad);
    absl::Status s = verify(g);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("layout"), std::string::npos) << s;
  }
  c2.attrs[std::string(kLayoutAttr)] = std::string("ppp:b");
  EXPECT_TRUE(verify(g).ok());
}

}  // namespace
}  // namespace lms
