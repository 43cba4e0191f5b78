// LMS on a CUDA GPU, as a user's program runs it: include/lms and the
// example model builders only, the GPU from lms::make_cuda_device, the
// Session run with its own event sink (a stall counter, so the device
// queries copy events while kernels are queued: the path on which a
// pending-event query once failed the next kernel launch).
// For a small VDSR (8 conv3x3 + ReLU, 32 channels, batch 8, 32x32, MSE,
// Adam) and a small 3-D U-Net (instance norm, max-pool, upsampling, concat
// skips, soft Dice, Adam), 3 training steps on the unchanged graph and 3
// after lms::rewrite at a budget between the working-set limit and the
// unchanged peak (so the report lists swaps) must give:
//  - bit-identical losses and final persistent tensors (parameters and
//    Adam state);
//  - in every step, the measured peak device bytes equal to the report's
//    predicted peak, under the budget, and the bytes in use by schedule
//    position equal to the plan's; the LMS run copies bytes both ways.
// Skips with the reason on a machine without a usable CUDA device (and
// fails there under LMS_REQUIRE_CUDA=1): it has not run on a GPU here.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuda_test_util.h"
#include "lms/config.h"
#include "lms/device.h"
#include "lms/graph.h"
#include "lms/ops.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/training.h"
#include "models.h"

namespace lms {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int kSteps = 3;

struct Model {
  Graph train;
  Feeds feeds;
};

std::vector<float> uniform(size_t n, std::mt19937_64& gen) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

absl::StatusOr<Model> vdsr(uint64_t seed) {
  constexpr int64_t kBatch = 8, kSize = 32;
  Graph g;
  const models::ModelTensors m = models::build_vdsr(
      g, {.batch = kBatch, .height = kSize, .width = kSize, .depth = 8, .channels = 32});
  LMS_RETURN_IF_ERROR(g.status());
  Model model;
  LMS_ASSIGN_OR_RETURN(model.train, training_graph(g, m.loss, Adam{.lr = 1e-3}));
  std::mt19937_64 gen(seed);
  model.feeds = {{"lr", uniform(kBatch * kSize * kSize, gen)},
                 {"hr", uniform(kBatch * kSize * kSize, gen)}};
  return model;
}

// NCDHW [1, 2, 32^3] image, one-hot labels of 3 classes.
absl::StatusOr<Model> unet3d(uint64_t seed) {
  constexpr int64_t kClasses = 3, kSize = 32, kVoxels = kSize * kSize * kSize;
  Graph g;
  const models::ModelTensors m = models::build_unet(g, {.batch = 1,
                                                        .in_channels = 2,
                                                        .classes = kClasses,
                                                        .size = kSize,
                                                        .base_filters = 8,
                                                        .levels = 3,
                                                        .spatial_dims = 3});
  LMS_RETURN_IF_ERROR(g.status());
  Model model;
  LMS_ASSIGN_OR_RETURN(model.train, training_graph(g, m.loss, Adam{.lr = 1e-3}));
  std::mt19937_64 gen(seed);
  std::vector<float> labels(kClasses * kVoxels, 0.0f);
  for (int64_t v = 0; v < kVoxels; ++v) labels[(gen() % kClasses) * kVoxels + v] = 1.0f;
  model.feeds = {{"image", uniform(2 * kVoxels, gen)}, {"labels", std::move(labels)}};
  return model;
}

struct Trained {
  std::vector<float> losses;
  std::vector<StepResult> steps;
  std::map<std::string, std::vector<float>> state;  // every persistent tensor, after the run
};

absl::StatusOr<Trained> train(const Graph& graph, Device& device, const Feeds& feeds) {
  LMS_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::create(graph, device));
  const std::string loss = graph.tensor(graph.loss()).name;
  Trained t;
  for (int i = 0; i < kSteps; ++i) {
    StepResult r;
    LMS_RETURN_IF_ERROR(session->run(feeds, &r));
    t.losses.push_back(r.fetched.at(loss).at(0));
    t.steps.push_back(std::move(r));
  }
  for (const std::string& name : session->persistent_tensors()) {
    LMS_ASSIGN_OR_RETURN(t.state[name], session->read(name));
  }
  return t;
}

// Every step ran at the plan's memory: peak and bytes by position.
void expect_planned_memory(const Trained& t, const RewriteReport& plan, const char* what) {
  for (size_t i = 0; i < t.steps.size(); ++i) {
    EXPECT_EQ(t.steps[i].peak_device_bytes, plan.peak_bytes_after) << what << " step " << i;
    EXPECT_EQ(t.steps[i].device_bytes_by_position, plan.device_bytes_by_position)
        << what << " step " << i;
  }
}

// A budget between the working-set limit and the unchanged peak at which
// auto plans swaps that fit, with the kernels the unchanged graph uses (a
// conv switched to workspace = "least" would run another cuDNN algorithm,
// whose bits differ). Tries the midpoint first, then closer to the peak.
absl::StatusOr<RewriteReport> plan_with_swaps(Graph& graph, Device& device,
                                              const RewriteReport& plain) {
  const uint64_t low = plain.working_set_limit_bytes, high = plain.peak_bytes_after;
  if (low >= high) {
    return absl::FailedPreconditionError(
        absl::StrCat("working-set limit ", low, " is not below the peak ", high));
  }
  std::string tried;
  for (const auto& [num, den] : {std::pair{1, 2}, std::pair{2, 3}, std::pair{5, 6}}) {
    Graph g = graph;
    LmsConfig cfg;
    cfg.device_memory_limit = low + (high - low) * num / den;
    absl::StatusOr<RewriteReport> rep = rewrite(g, cfg, device);
    std::printf("budget %" PRIu64 ": %s\n", cfg.device_memory_limit,
                rep.ok() ? rep->summary().c_str() : rep.status().ToString().c_str());
    if (rep.ok() && rep->fits && !rep->swapped.empty() && rep->least_workspace_nodes.empty()) {
      graph = std::move(g);
      return rep;
    }
    absl::StrAppend(&tried, " ", cfg.device_memory_limit);
  }
  return absl::NotFoundError(
      absl::StrCat("no budget of", tried, " gave a plan with swaps that fits"));
}

void expect_lms_run_is_bit_identical(absl::StatusOr<Model> model, const char* name) {
  LMS_SKIP_WITHOUT_CUDA();
  ASSERT_TRUE(model.ok()) << model.status();
  auto device = make_cuda_device({.capacity_bytes = 1024 * kMiB, .host_pool_bytes = 256 * kMiB});
  if (absl::IsUnimplemented(device.status())) {
    LMS_SKIP_OR_FAIL(std::string(device.status().message()));
  }
  ASSERT_TRUE(device.ok()) << device.status();
  std::printf("%s on %s\n", name, (*device)->name().c_str());

  // Both plans before any session: the rewrite profiles on an idle device.
  Graph plain = model->train;
  LmsConfig off;
  off.enabled = false;
  auto plain_plan = rewrite(plain, off, **device);
  ASSERT_TRUE(plain_plan.ok()) << plain_plan.status();
  ASSERT_TRUE(plain_plan->fits) << plain_plan->summary();
  Graph swapped = model->train;
  auto plan = plan_with_swaps(swapped, **device, *plain_plan);
  ASSERT_TRUE(plan.ok()) << plan.status();

  absl::StatusOr<Trained> without = train(plain, **device, model->feeds);
  ASSERT_TRUE(without.ok()) << without.status();
  absl::StatusOr<Trained> with = train(swapped, **device, model->feeds);
  ASSERT_TRUE(with.ok()) << with.status();

  for (int i = 0; i < kSteps; ++i) {
    std::printf("step %d: loss %.9g without LMS, %.9g with; peak %" PRIu64 " / %" PRIu64
                " bytes; %" PRIu64 " bytes out, %" PRIu64 " in; stall %.6f s\n",
                i, without->losses[i], with->losses[i], without->steps[i].peak_device_bytes,
                with->steps[i].peak_device_bytes, with->steps[i].bytes_d2h,
                with->steps[i].bytes_h2d, with->steps[i].stall_s);
    EXPECT_TRUE(std::isfinite(without->losses[i])) << "step " << i;
    EXPECT_EQ(std::memcmp(&without->losses[i], &with->losses[i], sizeof(float)), 0)
        << "step " << i << ": " << without->losses[i] << " vs " << with->losses[i];
    EXPECT_GT(with->steps[i].bytes_d2h, 0u) << "step " << i;
    EXPECT_GT(with->steps[i].bytes_h2d, 0u) << "step " << i;
    EXPECT_LE(with->steps[i].peak_device_bytes, plan->budget_bytes) << "step " << i;
  }
  expect_planned_memory(*without, *plain_plan, "without LMS");
  expect_planned_memory(*with, *plan, "with LMS");

  ASSERT_EQ(without->state.size(), with->state.size());
  for (const auto& [tensor, values] : without->state) {
    auto it = with->state.find(tensor);
    ASSERT_NE(it, with->state.end()) << tensor;
    ASSERT_EQ(it->second.size(), values.size()) << tensor;
    EXPECT_EQ(std::memcmp(it->second.data(), values.data(), values.size() * sizeof(float)), 0)
        << tensor << " differs after " << kSteps << " steps";
  }
}

TEST(CudaSession, VdsrWithSwapsIsBitIdenticalAtThePlannedPeak) {
  constexpr uint64_t kSeed = 4401;
  std::printf("seed %" PRIu64 "\n", kSeed);
  expect_lms_run_is_bit_identical(vdsr(kSeed), "VDSR");
}

TEST(CudaSession, Unet3dWithSwapsIsBitIdenticalAtThePlannedPeak) {
  constexpr uint64_t kSeed = 4402;
  std::printf("seed %" PRIu64 "\n", kSeed);
  expect_lms_run_is_bit_identical(unet3d(kSeed), "3-D U-Net");
}

// embedding and embedding_bwd (int64 ids, through Int64Feeds) give on the
// GPU the bits of the CPU device: both copy rows and sum the rows of dy per
// id in increasing position, in float.
TEST(CudaSession, EmbeddingMatchesCpuBitForBit) {
  LMS_SKIP_WITHOUT_CUDA();
  constexpr uint64_t kSeed = 4403;
  std::printf("seed %" PRIu64 "\n", kSeed);
  constexpr int64_t kRows = 7, kDim = 5;
  Graph g;
  const TensorId ids = g.input("ids", {3, 4}, DType::kInt64);
  const TensorId table = g.input("table", {kRows, kDim});
  const TensorId dy = g.input("dy", {3, 4, kDim});
  embedding(g, "emb", ids, table);
  g.add1(OpKind::kEmbeddingBwd, "emb_bwd", {ids, dy},
         {{"weight_shape", std::vector<int64_t>{kRows, kDim}}});
  ASSERT_TRUE(g.status().ok()) << g.status();
  std::mt19937_64 gen(kSeed);
  std::uniform_int_distribution<int64_t> row(0, kRows - 1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Int64Feeds id_feeds = {{"ids", std::vector<int64_t>(12)}};
  for (int64_t& id : id_feeds["ids"]) id = row(gen);
  Feeds feeds = {{"table", std::vector<float>(kRows * kDim)},
                 {"dy", std::vector<float>(12 * kDim)}};
  for (auto& [name, values] : feeds)
    for (float& v : values) v = u(gen);

  auto gpu = make_cuda_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 16 * kMiB});
  if (absl::IsUnimplemented(gpu.status())) LMS_SKIP_OR_FAIL(std::string(gpu.status().message()));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 16 * kMiB});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::map<std::string, std::vector<float>> results[2];
  Device* devices[2] = {gpu->get(), cpu->get()};
  for (int d = 0; d < 2; ++d) {
    auto session = Session::create(g, *devices[d], {.fetches = {"emb", "emb_bwd"}});
    ASSERT_TRUE(session.ok()) << session.status();
    StepResult r;
    ASSERT_TRUE((*session)->run(feeds, id_feeds, &r).ok());
    for (const char* name : {"emb", "emb_bwd"}) results[d][name] = r.fetched.at(name);
    // An id out of range fails the step, naming the node, the id, its
    // position and the range, in the same words on both devices.
    Int64Feeds bad = id_feeds;
    bad["ids"][3] = kRows;
    absl::Status s = (*session)->run(feeds, bad, &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("node 'emb"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("id 7 at position 3 is out of range [0, 7) of the table"),
              absl::string_view::npos)
        << s;
  }
  for (const char* name : {"emb", "emb_bwd"}) {
    const auto& a = results[0][name];
    const auto& b = results[1][name];
    ASSERT_EQ(a.size(), b.size()) << name;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << name;
  }
}

// dropout and dropout_bwd over 3 steps (so the step counter reaches the
// kernels) on the GPU against the CPU device, bit for bit: both compute
// the mask with the hash of backend/dropout_hash.h and multiply kept
// elements by the same float.
TEST(CudaSession, DropoutMasksMatchCpuBitForBitOverSteps) {
  LMS_SKIP_WITHOUT_CUDA();
  constexpr uint64_t kSeed = 4405;
  std::printf("seed %" PRIu64 ", dropout seed 77\n", kSeed);
  const Shape shape = {3, 5, 1000, 7};  // more elements than one grid pass
  const int64_t n = 3 * 5 * 1000 * 7;
  Graph g;
  const TensorId x = g.input("x", shape);
  const TensorId dy = g.input("dy", shape);
  dropout(g, "drop", x, 0.3, 77);
  g.add1(OpKind::kDropoutBwd, "drop_bwd", {dy}, {{"ratio", 0.3}, {"seed", int64_t{77}}});
  ASSERT_TRUE(g.status().ok()) << g.status();
  std::mt19937_64 gen(kSeed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Feeds feeds = {{"x", std::vector<float>(n)}, {"dy", std::vector<float>(n)}};
  for (auto& [name, values] : feeds)
    for (float& v : values) v = u(gen);

  auto gpu = make_cuda_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 16 * kMiB});
  if (absl::IsUnimplemented(gpu.status())) LMS_SKIP_OR_FAIL(std::string(gpu.status().message()));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 16 * kMiB});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::vector<std::vector<float>> results[2];
  Device* devices[2] = {gpu->get(), cpu->get()};
  for (int d = 0; d < 2; ++d) {
    auto session = Session::create(g, *devices[d], {.fetches = {"drop", "drop_bwd"}});
    ASSERT_TRUE(session.ok()) << session.status();
    for (int step = 0; step < kSteps; ++step) {
      StepResult r;
      ASSERT_TRUE((*session)->run(feeds, &r).ok());
      results[d].push_back(r.fetched.at("drop"));
      results[d].push_back(r.fetched.at("drop_bwd"));
    }
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) {
    const auto& a = results[0][i];
    const auto& b = results[1][i];
    ASSERT_EQ(a.size(), b.size()) << i;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << "step " << i / 2 << (i % 2 == 0 ? " drop" : " drop_bwd");
  }
  EXPECT_NE(results[1][0], results[1][2]);  // the mask changes with the step
}

// softmax_cross_entropy and its gradient (int64 labels, ignored rows) on
// the GPU against the CPU device, within float rounding: both sum each
// row's exponentials in double around the row's maximum, in other orders.
// A label out of range fails the step with the CPU device's message.
TEST(CudaSession, SoftmaxCrossEntropyMatchesCpu) {
  LMS_SKIP_WITHOUT_CUDA();
  constexpr uint64_t kSeed = 4404;
  std::printf("seed %" PRIu64 "\n", kSeed);
  constexpr int64_t kRows = 300, kClasses = 1000, kIgnore = -100;
  Graph g;
  const TensorId logits = g.input("logits", {kRows, kClasses});
  const TensorId labels = g.input("labels", {kRows}, DType::kInt64);
  const TensorId dloss = g.input("dloss", {});
  softmax_cross_entropy(g, "xent", logits, labels, kIgnore);
  g.add1(OpKind::kSoftmaxCrossEntropyBwd, "xent_bwd", {logits, labels, dloss},
         {{"ignore_index", kIgnore}});
  ASSERT_TRUE(g.status().ok()) << g.status();
  std::mt19937_64 gen(kSeed);
  std::uniform_int_distribution<int64_t> label(0, kClasses - 1);
  std::uniform_real_distribution<float> u(-20.0f, 20.0f);
  Int64Feeds label_feeds = {{"labels", std::vector<int64_t>(kRows)}};
  for (int64_t i = 0; i < kRows; ++i) label_feeds["labels"][i] = i % 7 == 0 ? kIgnore : label(gen);
  Feeds feeds = {{"logits", std::vector<float>(kRows * kClasses)}, {"dloss", {0.75f}}};
  for (float& v : feeds["logits"]) v = u(gen);

  auto gpu = make_cuda_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 16 * kMiB});
  if (absl::IsUnimplemented(gpu.status())) LMS_SKIP_OR_FAIL(std::string(gpu.status().message()));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 16 * kMiB});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::map<std::string, std::vector<float>> results[2];
  Device* devices[2] = {gpu->get(), cpu->get()};
  for (int d = 0; d < 2; ++d) {
    auto session = Session::create(g, *devices[d], {.fetches = {"xent", "xent_bwd"}});
    ASSERT_TRUE(session.ok()) << session.status();
    StepResult r;
    ASSERT_TRUE((*session)->run(feeds, label_feeds, &r).ok());
    for (const char* name : {"xent", "xent_bwd"}) results[d][name] = r.fetched.at(name);
    Int64Feeds bad = label_feeds;
    bad["labels"][5] = kClasses;
    absl::Status s = (*session)->run(feeds, bad, &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("node 'xent"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("label 1000 at position 5 is out of range [0, 1000) of the 1000 "
                               "classes and is not ignore_index -100"),
              absl::string_view::npos)
        << s;
  }
  for (const char* name : {"xent", "xent_bwd"}) {
    const auto& got = results[0][name];
    const auto& want = results[1][name];
    ASSERT_EQ(got.size(), want.size()) << name;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      norm += static_cast<double>(want[i]) * want[i];
    }
    const double err = std::sqrt(diff / norm);
    std::printf("%s: relative L2 difference GPU vs CPU %.3g\n", name, err);
    EXPECT_LE(err, 1e-6) << name;
  }
}

}  // namespace
}  // namespace lms
