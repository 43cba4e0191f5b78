// Batched MatMul imported from a PyTorch export at opset 14
// (tests/onnx/make_matmul_model.py, written at test time by Debian's
// /usr/bin/python3; skipped, saying why, without torch or onnx): a rank-4 by
// rank-4 MatMul and a rank-4 by a rank-2 initializer each become one matmul
// node, nn.Linear on the rank-4 product (MatMul by Transpose(lin.weight),
// Add(lin.bias)) a matmul with trans_b reading lin.weight itself and an add;
// the MatMul weights are the trainable parameters, and one training step
// matches PyTorch's output, loss and gradients.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <variant>

#include "lms/device.h"
#include "lms/loss.h"
#include "lms/onnx.h"
#include "lms/session.h"
#include "lms/training.h"
#include "reference.h"

namespace lms {
namespace {

using onnx_test::read_reference;
using onnx_test::rel_l2;

constexpr double kTolerance = 1e-5;  // relative L2 error against PyTorch

// Writes the model into a fresh folder and returns it; empty with `why` set
// when it cannot (exit 77 or 127: torch or onnx missing, or "failed: ...").
std::string write_model(std::string* why) {
  std::string dir = (std::filesystem::temp_directory_path() / "lms_matmul.XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    *why = "failed: mkdtemp";
    return "";
  }
  const std::string command =
      "/usr/bin/python3 " + std::string(LMS_SOURCE_DIR) + "/tests/onnx/make_matmul_model.py " + dir;
  const int status = std::system(command.c_str());
  if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return dir;
  *why = "/usr/bin/python3 with torch and onnx is needed to write the model (" + command + ")";
  if (!(WIFEXITED(status) && (WEXITSTATUS(status) == 77 || WEXITSTATUS(status) == 127))) {
    *why = "failed: " + command;
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return "";
}

TEST(MatMulImport, BatchedMatMulsTrainAsPyTorch) {
  std::string why;
  const std::string dir = write_model(&why);
  if (dir.empty() && why.rfind("failed", 0) != 0) GTEST_SKIP() << why;
  ASSERT_FALSE(dir.empty()) << why;
  auto m = import_onnx(dir + "/matmul.onnx");
  auto ref = read_reference(dir + "/matmul_ref.txt");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->opset, 14);

  const Graph& g = m->graph;
  std::vector<NodeId> products;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (g.node(id).op == OpKind::kMatMul) products.push_back(id);
  }
  ASSERT_EQ(products.size(), 3u);
  ASSERT_EQ(g.num_nodes(), 4);  // and the bias add: no transpose node
  for (size_t i = 0; i < products.size(); ++i) {
    const Node& n = g.node(products[i]);
    EXPECT_EQ(std::get<int64_t>(n.attrs.at("trans_a")), 0) << n.name;
    EXPECT_EQ(std::get<int64_t>(n.attrs.at("trans_b")), i == 2 ? 1 : 0) << n.name;
  }
  const Node& shared = g.node(products[1]);
  EXPECT_EQ(g.tensor(shared.inputs[1]).name, "w");
  EXPECT_EQ(g.tensor(shared.outputs[0]).shape, (Shape{2, 3, 5, 7}));
  const Node& lin = g.node(products[2]);
  EXPECT_EQ(g.tensor(lin.inputs[1]).name, "lin.weight");
  EXPECT_EQ(g.tensor(lin.inputs[1]).shape, (Shape{3, 7}));
  for (const Node* n : {&shared, &lin}) {
    EXPECT_EQ(g.tensor(n->inputs[1]).role, TensorRole::kParameter);
  }
  // The default trainable rule (lms/onnx.h) takes MatMul's B, not Add's
  // operands: lin.bias stays a constant unless the user names it.
  EXPECT_EQ(m->parameters, (std::vector<std::string>{"w", "lin.weight"}));
  const std::vector<std::string> parameters = m->parameters;

  Graph fwd = std::move(m->graph);
  ASSERT_TRUE(attach_loss(fwd, "output", Mse{.target = "target"}).ok());
  auto train = training_graph(fwd, fwd.loss(), Sgd{.lr = 0});
  ASSERT_TRUE(train.ok()) << train.status();
  SessionOptions options;
  options.fetches = {"output", "loss"};
  for (const std::string& p : parameters) options.fetches.push_back(p + "/grad");
  auto device = make_cpu_device({});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session = Session::create(*train, **device, options);
  ASSERT_TRUE(session.ok()) << session.status();
  StepResult step;
  ASSERT_TRUE(
      (*session)->run({{"a", ref["a"]}, {"b", ref["b"]}, {"target", ref["target"]}}, &step).ok());
  for (const std::string& name : options.fetches) {
    ASSERT_FALSE(ref[name].empty()) << name << " has no PyTorch reference";
    const double e = rel_l2(step.fetched[name], ref[name]);
    std::printf("%-16s relative L2 error %.3g\n", name.c_str(), e);
    EXPECT_LE(e, kTolerance) << name;
  }
}

}  // namespace
}  // namespace lms
