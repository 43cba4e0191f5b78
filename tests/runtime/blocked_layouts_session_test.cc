// Blocked activation layouts end to end on the CPU device
// (Note [Blocked layouts]): lms::rewrite with the device, with LMS off or
// on, stores conv -> relu -> conv chains blocked, and the losses, gradients
// and weights are bit-identical to those of the graph without a rewrite
// (every tensor plain) and with swaps of blocked tensors.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_device.h"
#include "lms/config.h"
#include "lms/ops.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/training.h"
#include "models.h"
#include "runtime/blocked_layouts.h"

namespace lms {
namespace {

constexpr uint64_t kMiB = 1 << 20;

std::unique_ptr<cpu::CpuDevice> make_device(uint64_t capacity) {
  auto d = cpu::CpuDevice::create({.capacity_bytes = capacity, .host_pool_bytes = 256 * kMiB});
  EXPECT_TRUE(d.ok()) << d.status();
  return std::move(d).value();
}

struct Case {
  Graph train;
  std::vector<std::string> params;  // compared: gradient (fetched) and weight
  Feeds feeds;
  std::vector<std::string> fetches() const {
    std::vector<std::string> f = {train.tensor(train.loss()).name};
    for (const std::string& p : params) f.push_back(p + "/grad");
    return f;
  }
};

struct StepRun {
  std::vector<std::vector<float>> values;  // per step the fetches, then the weights
  uint64_t workspace_bytes = 0;            // of all kernels
  uint64_t peak = 0;
};

StepRun train_steps(const Case& c, const Graph& graph, Device& device, int steps) {
  StepRun run;
  auto session = Session::create(graph, device, {.fetches = c.fetches()});
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return run;
  for (uint64_t w : (*session)->workspace_bytes()) run.workspace_bytes += w;
  for (int i = 0; i < steps; ++i) {
    StepResult r;
    absl::Status s = (*session)->run(c.feeds, &r);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return run;
    for (const std::string& f : c.fetches()) run.values.push_back(r.fetched.at(f));
    run.peak = std::max(run.peak, r.peak_device_bytes);
  }
  for (const std::string& p : c.params) run.values.push_back(*(*session)->read(p));
  return run;
}

void expect_identical(const StepRun& a, const StepRun& b, const char* what) {
  ASSERT_EQ(a.values.size(), b.values.size()) << what;
  for (size_t i = 0; i < a.values.size(); ++i) {
    ASSERT_EQ(a.values[i].size(), b.values[i].size()) << what;
    EXPECT_EQ(0, std::memcmp(a.values[i].data(), b.values[i].data(), a.values[i].size() * 4))
        << what << ": value " << i << " differs";
  }
}

std::vector<float> random_values(int64_t n, std::mt19937_64& gen) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

Case vdsr_case(uint64_t seed) {
  std::printf("vdsr: feeds seed %llu\n", static_cast<unsigned long long>(seed));
  Case c;
  Graph g;
  auto m =
      models::build_vdsr(g, {.batch = 2, .height = 20, .width = 20, .depth = 6, .channels = 32});
  c.train = *training_graph(g, m.loss, Adam{.lr = 1e-3});
  c.params = {"conv1/w", "conv3/w", "conv6/b"};
  std::mt19937_64 gen(seed);
  c.feeds = {{"lr", random_values(2 * 20 * 20, gen)}, {"hr", random_values(2 * 20 * 20, gen)}};
  return c;
}

// A two-level U-Net without normalisation: blocked conv -> relu chains meet
// max-pool, upsample and a concat skip, which read and write plain.
Case unet_case(uint64_t seed) {
  std::printf("unet: feeds seed %llu\n", static_cast<unsigned long long>(seed));
  Case c;
  Graph g;
  const ConvLayerOptions same{.pad = {1}};
  auto layer = [&](const char* name, TensorId x, int64_t k, uint64_t s) {
    ConvLayerOptions o = same;
    o.seed = s;
    return relu(g, std::string(name) + "/relu", conv2d(g, name, x, k, {3}, o));
  };
  TensorId x = g.input("image", {2, 2, 16, 16});
  TensorId target = g.input("target", {2, 1, 16, 16});
  TensorId skip = layer("enc1b", layer("enc1a", x, 16, 1), 16, 2);
  TensorId low = layer("enc2b", layer("enc2a", max_pool2d(g, "pool", skip, 2), 32, 3), 32, 4);
  TensorId up = layer("up", upsample(g, "upsample", low, {2, 2}), 16, 5);
  TensorId dec = layer("dec", concat(g, "skip", {up, skip}), 16, 6);
  TensorId y = conv2d(g, "head", dec, 1, {1}, {.seed = 7});
  c.train = *training_graph(g, mse_loss(g, "loss", y, target), Adam{.lr = 1e-3});
  c.params = {"enc1a/w", "enc2b/w", "dec/w", "head/b"};
  std::mt19937_64 gen(seed);
  c.feeds = {{"image", random_values(2 * 2 * 16 * 16, gen)},
             {"target", random_values(2 * 16 * 16, gen)}};
  return c;
}

// The graph rewritten for `device` with LMS off: layouts only.
Graph laid_out_graph(const Case& c, Device& device) {
  Graph g = c.train;
  LmsConfig off;
  off.enabled = false;
  auto report = rewrite(g, off, device, {.fetched = c.fetches()});
  EXPECT_TRUE(report.ok()) << report.status();
  return g;
}

// Swap-outs whose tensor its producer writes blocked.
int blocked_swap_outs(const Graph& g) {
  int n = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& swap = g.node(id);
    if (swap.op != OpKind::kSwapOut) continue;
    const Tensor& t = g.tensor(swap.inputs[0]);
    const Node& p = g.node(t.producer);
    auto it = p.attrs.find(kLayoutAttr);
    if (it == p.attrs.end()) continue;
    const std::string& layout = std::get<std::string>(it->second);
    for (size_t i = 0; i < p.outputs.size(); ++i) {
      if (p.outputs[i] == swap.inputs[0] && layout[p.inputs.size() + 1 + i] == kLayoutBlocked) ++n;
    }
  }
  return n;
}

void check_blocked_equals_plain(const Case& c, const char* name) {
  Graph counted = c.train;
  auto report = assign_blocked_layouts(counted, c.fetches());
  ASSERT_TRUE(report.ok()) << report.status();
  std::printf("%s: %d tensors blocked (%llu bytes)\n", name, report->blocked_tensors,
              static_cast<unsigned long long>(report->blocked_bytes));
  EXPECT_GT(report->blocked_tensors, 0);
  auto device = make_device(256 * kMiB);
  const Graph rewritten = laid_out_graph(c, *device);
  StepRun blocked = train_steps(c, rewritten, *device, 3);
  StepRun plain = train_steps(c, c.train, *device, 3);
  expect_identical(blocked, plain, name);
  // The blocked session reorders less, so its kernels need less workspace.
  EXPECT_LT(blocked.workspace_bytes, plain.workspace_bytes) << name;
}

TEST(BlockedLayoutsSessionTest, VdsrBlockedIsBitIdenticalToPlain) {
  check_blocked_equals_plain(vdsr_case(51), "vdsr");
}

TEST(BlockedLayoutsSessionTest, UnetWithConcatSkipIsBitIdenticalToPlain) {
  check_blocked_equals_plain(unet_case(52), "unet");
}

// lms::rewrite with the device lays the graph out before planning: the swaps
// copy blocked tensors byte for byte, and the run equals the unswapped one.
TEST(BlockedLayoutsSessionTest, SwappedBlockedTensorsStayBitIdentical) {
  Case c = vdsr_case(53);
  StepRun baseline;
  uint64_t limit = 0;
  {
    auto big = make_device(256 * kMiB);
    baseline = train_steps(c, laid_out_graph(c, *big), *big, 3);
    Graph dry = c.train;
    LmsConfig probe;
    probe.policy = SwapPolicy::kAuto;
    probe.time_model = TimeModel::kRoofline;
    probe.device_memory_limit = baseline.peak;
    auto info = rewrite(dry, probe, *big, {.fetched = c.fetches()});
    ASSERT_TRUE(info.ok()) << info.status();
    limit = info->working_set_limit_bytes;
  }
  const uint64_t budget = (limit + baseline.peak) / 2;
  std::printf("vdsr: unswapped peak %llu, working-set limit %llu, budget %llu\n",
              static_cast<unsigned long long>(baseline.peak),
              static_cast<unsigned long long>(limit), static_cast<unsigned long long>(budget));
  ASSERT_LT(budget, baseline.peak);
  auto small = make_device(budget);
  Graph swapped = c.train;
  LmsConfig cfg;
  cfg.policy = SwapPolicy::kAuto;
  cfg.time_model = TimeModel::kRoofline;
  auto report = rewrite(swapped, cfg, *small, {.fetched = c.fetches()});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->swapped.empty());
  EXPECT_GT(blocked_swap_outs(swapped), 0);
  StepRun with = train_steps(c, swapped, *small, 3);
  expect_identical(baseline, with, "vdsr swapped");
  EXPECT_LE(with.peak, budget);
}

}  // namespace
}  // namespace lms
