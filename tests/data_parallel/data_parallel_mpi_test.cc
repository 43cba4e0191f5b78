// Data-parallel training over MPI, run under `mpirun -np 2 --oversubscribe`
// (tests/data_parallel/CMakeLists.txt): VDSR (no batch statistics, so the
// averaged gradient is the global batch's) with the gradients averaged by
// all_reduce nodes, under LMS with a budget that forces swaps.
//  - After every step the persistent tensors (weights, Adam moments, step
//    counter) are bitwise identical on every rank.
//  - After 3 steps the weights equal single-process training on the same
//    global batch (the ranks' batches stacked) within kRelTolerance: the
//    same mathematics, summed in another order.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "lms/config.h"
#include "lms/distributed.h"
#include "lms/rewrite.h"
#include "user_models.h"

namespace lms {
namespace {

using user::kMiB;

constexpr int64_t kBatch = 2;  // per rank
constexpr int64_t kSize = 24;
constexpr uint64_t kSeed = 777;
constexpr int kSteps = 3;
// |distributed - single| <= kAbsTolerance + kRelTolerance * |single| per
// weight after kSteps SGD steps: float sums over 2 x 24 x 24 pixels per
// image in another grouping differ in the last bits, no more.
constexpr double kRelTolerance = 1e-4;
constexpr double kAbsTolerance = 1e-6;

Communicator* world = nullptr;

class MpiEnvironment : public testing::Environment {
 public:
  void SetUp() override {
    auto comm = make_mpi_communicator({.timeout_s = 120});
    ASSERT_TRUE(comm.ok()) << comm.status();
    comm_ = *std::move(comm);
    world = comm_.get();
    std::printf("rank %d of %d, seed %" PRIu64 "\n", world->rank(), world->size(), kSeed);
  }
  void TearDown() override {
    world = nullptr;
    comm_.reset();
  }

 private:
  std::unique_ptr<Communicator> comm_;
};

const Sgd kSgd{.lr = 0.05, .momentum = 0.9};

// Rows [first, first + count) of an NCHW feed of `batch` images.
Feeds slice(const Feeds& global, int64_t batch, int64_t first, int64_t count) {
  Feeds out;
  for (const auto& [name, values] : global) {
    const size_t per = values.size() / static_cast<size_t>(batch);
    out[name].assign(values.begin() + first * per, values.begin() + (first + count) * per);
  }
  return out;
}

Feeds global_feeds(int step) {
  return user::vdsr_feeds(kBatch * world->size(), kSize, kSeed + step);
}

std::string digest(const std::map<std::string, std::vector<float>>& state) {
  size_t h = 0;
  for (const auto& [name, v] : state) {
    h = h * 31 + std::hash<std::string_view>{}(std::string_view(
                     reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  }
  return std::to_string(h);
}

TEST(DataParallelMpi, RanksHoldIdenticalWeightsAfterEveryStepAndMatchOneProcess) {
  ASSERT_NE(world, nullptr);
  ASSERT_GE(world->size(), 2) << "run under mpirun -np 2";
  auto dp = user::vdsr(kBatch, kSize, kSgd, {.data_parallel = DataParallel{.bucket_bytes = 2048}});
  ASSERT_TRUE(dp.ok()) << dp.status();
  auto device = make_cpu_device(
      {.capacity_bytes = 64 * kMiB, .host_pool_bytes = 64 * kMiB, .compute_threads = 1});
  ASSERT_TRUE(device.ok()) << device.status();

  // LMS with a budget a third of the way from the working-set limit to the
  // peak, so activations (and possibly gradients waiting for their bucket)
  // are swapped.
  Graph probe = *dp;
  LmsConfig off;
  off.enabled = false;
  auto limits = rewrite(probe, off, **device, {.fetched = {"loss"}}, {.ranks = world->size()});
  ASSERT_TRUE(limits.ok()) << limits.status();
  LmsConfig cfg;
  cfg.device_memory_limit = limits->working_set_limit_bytes +
                            (limits->peak_bytes_after - limits->working_set_limit_bytes) / 3;
  auto rep = rewrite(*dp, cfg, **device, {.fetched = {"loss"}}, {.ranks = world->size()});
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_TRUE(rep->fits) << rep->summary();
  EXPECT_FALSE(rep->swapped.empty()) << rep->summary();

  auto session = Session::create(*dp, **device, {.fetches = {"loss"}, .communicator = world});
  ASSERT_TRUE(session.ok()) << session.status();
  for (int step = 0; step < kSteps; ++step) {
    const Feeds mine =
        slice(global_feeds(step), kBatch * world->size(), world->rank() * kBatch, kBatch);
    StepResult r;
    ASSERT_TRUE((*session)->run(mine, &r).ok());
    auto digests = world->all_gather(digest(user::persistent_state(**session)));
    ASSERT_TRUE(digests.ok()) << digests.status();
    for (int rank = 1; rank < world->size(); ++rank) {
      EXPECT_EQ((*digests)[rank], (*digests)[0]) << "after step " << step << ", rank " << rank;
    }
  }
  const auto distributed = user::persistent_state(**session);

  // One process, the global batch.
  auto single = user::vdsr(kBatch * world->size(), kSize, kSgd);
  ASSERT_TRUE(single.ok());
  auto big = make_cpu_device(
      {.capacity_bytes = 128 * kMiB, .host_pool_bytes = 64 * kMiB, .compute_threads = 1});
  ASSERT_TRUE(big.ok());
  auto reference = Session::create(*single, **big, {.fetches = {"loss"}});
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (int step = 0; step < kSteps; ++step) {
    StepResult r;
    ASSERT_TRUE((*reference)->run(global_feeds(step), &r).ok());
  }
  const auto expected = user::persistent_state(**reference);
  int checked = 0;
  double worst = 0;
  for (const auto& [name, values] : expected) {
    if (name.find("/velocity") != std::string::npos) continue;  // SGD state: not weights
    auto it = distributed.find(name);
    ASSERT_NE(it, distributed.end()) << name;
    ASSERT_EQ(it->second.size(), values.size()) << name;
    for (size_t i = 0; i < values.size(); ++i) {
      const double err = std::abs(static_cast<double>(it->second[i]) - values[i]);
      worst = std::max(worst, err / (kAbsTolerance + kRelTolerance * std::abs(values[i])));
      ASSERT_LE(err, kAbsTolerance + kRelTolerance * std::abs(values[i]))
          << name << "[" << i << "]: " << it->second[i] << " vs one process " << values[i];
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
  std::printf("rank %d: %d weight tensors within tolerance (worst at %.3f of it)\n", world->rank(),
              checked, worst);
}

}  // namespace
}  // namespace lms

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  testing::AddGlobalTestEnvironment(new lms::MpiEnvironment);
  return RUN_ALL_TESTS();
}
