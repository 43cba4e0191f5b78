// Dropout imported from PyTorch exports in training mode: an MLP with
// nn.Dropout(0.2) (tests/onnx/make_dropout_model.py) imports onto an lms
// dropout with ratio 0.2 and a seed from the node name, and trains; and
// torchvision's mobilenet_v2 (its classifier's Dropout(0.2)), exported by
// scripts/export_torchvision.py, imports. Both are written at test time by
// Debian's /usr/bin/python3 (skipped, saying why, without torch, onnx or
// torchvision). PyTorch's generator cannot be reproduced, so no values are
// compared with PyTorch.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <variant>

#include "lms/device.h"
#include "lms/loss.h"
#include "lms/onnx.h"
#include "lms/ops.h"
#include "lms/session.h"
#include "lms/training.h"

namespace lms {
namespace {

constexpr uint64_t kMiBytes = uint64_t{1} << 20;

// Runs `command_prefix DIR/suffix` (`suffix` may be empty or name the
// output file and further arguments) in a fresh folder DIR and returns DIR;
// empty when it cannot run (exit 77 or 127: torch or onnx missing), with
// `why` set.
std::string run_script(const std::string& command_prefix, const std::string& suffix,
                       std::string* why) {
  std::string dir = (std::filesystem::temp_directory_path() / "lms_dropout.XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    *why = "mkdtemp failed";
    return "";
  }
  const std::string command = command_prefix + " " + (suffix.empty() ? dir : dir + "/" + suffix);
  const int status = std::system(command.c_str());
  if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return dir;
  *why = "/usr/bin/python3 with torch, onnx (and torchvision) is needed to write the model (" +
         command + ")";
  if (!(WIFEXITED(status) && (WEXITSTATUS(status) == 77 || WEXITSTATUS(status) == 127))) {
    *why = "failed: " + command;
  }
  return "";
}

bool have_torchvision() {
  return std::system("/usr/bin/python3 -c 'import torch, torchvision, onnx' 2>/dev/null") == 0;
}

std::vector<NodeId> dropout_nodes(const Graph& g) {
  std::vector<NodeId> found;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (g.node(id).op == OpKind::kDropout) found.push_back(id);
  }
  return found;
}

TEST(DropoutImport, PyTorchMlpWithDropoutImportsAndTrains) {
  std::string why;
  const std::string dir = run_script(
      "/usr/bin/python3 " + std::string(LMS_SOURCE_DIR) + "/tests/onnx/make_dropout_model.py", "",
      &why);
  if (dir.empty() && why.rfind("failed", 0) != 0) GTEST_SKIP() << why;
  ASSERT_FALSE(dir.empty()) << why;
  auto m = import_onnx(dir + "/dropout_mlp.onnx");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  ASSERT_TRUE(m.ok()) << m.status();
  Graph g = std::move(m->graph);
  const std::vector<NodeId> drops = dropout_nodes(g);
  ASSERT_EQ(drops.size(), 1u);
  const Attrs& a = g.node(drops[0]).attrs;
  EXPECT_NEAR(std::get<double>(a.at("ratio")), 0.2, 1e-7);
  std::printf("imported dropout '%s': ratio %.9g, seed %lld\n", g.node(drops[0]).name.c_str(),
              std::get<double>(a.at("ratio")),
              static_cast<long long>(std::get<int64_t>(a.at("seed"))));

  const TensorId output = g.find_tensor(m->outputs[0]);
  ASSERT_NE(output, kNoTensor);
  auto loss = attach_loss(g, output, CrossEntropy{.labels = "labels"});
  ASSERT_TRUE(loss.ok()) << loss.status();
  auto train = training_graph(g, *loss, Sgd{.lr = 0.1});
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiBytes, .host_pool_bytes = kMiBytes});
  ASSERT_TRUE(device.ok()) << device.status();
  auto session = Session::create(*train, **device, {.fetches = {"loss"}});
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<float> x(8 * 16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  const std::vector<int64_t> labels = {0, 1, 2, 3, 0, 1, 2, 3};
  std::vector<float> losses;
  for (int step = 0; step < 5; ++step) {
    StepResult r;
    absl::Status s = (*session)->run({{m->inputs[0], x}}, {{"labels", labels}}, &r);
    ASSERT_TRUE(s.ok()) << s;
    losses.push_back(r.fetched.at("loss")[0]);
    std::printf("step %d loss %.6f\n", step, losses.back());
    EXPECT_TRUE(std::isfinite(losses.back()));
  }
  EXPECT_LT(losses.back(), losses.front());
}

// torch.onnx.export writes nn.Dropout(0) in training mode as a Dropout of
// ratio 0 whose mask output nothing reads: the identity, removed.
TEST(DropoutImport, PyTorchDropoutOfRatioZeroIsRemoved) {
  std::string why;
  const std::string dir = run_script(
      "/usr/bin/python3 " + std::string(LMS_SOURCE_DIR) + "/tests/onnx/make_dropout_model.py",
      ". 0", &why);
  if (dir.empty() && why.rfind("failed", 0) != 0) GTEST_SKIP() << why;
  ASSERT_FALSE(dir.empty()) << why;
  auto m = import_onnx(dir + "/dropout_mlp.onnx");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(dropout_nodes(m->graph).empty());
}

TEST(DropoutImport, TorchvisionMobilenetV2Imports) {
  if (!have_torchvision()) {
    GTEST_SKIP() << "/usr/bin/python3 with torch, torchvision and onnx is needed to export "
                    "mobilenet_v2";
  }
  std::string why;
  const std::string dir = run_script("/usr/bin/python3 " + std::string(LMS_SOURCE_DIR) +
                                         "/scripts/export_torchvision.py mobilenet_v2 1,3,64,64",
                                     "mobilenet_v2.onnx --classes 10", &why);
  ASSERT_FALSE(dir.empty()) << why;
  auto m = import_onnx(dir + "/mobilenet_v2.onnx");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<NodeId> drops = dropout_nodes(m->graph);
  ASSERT_EQ(drops.size(), 1u);
  EXPECT_NEAR(std::get<double>(m->graph.node(drops[0]).attrs.at("ratio")), 0.2, 1e-7);
}

}  // namespace
}  // namespace lms
