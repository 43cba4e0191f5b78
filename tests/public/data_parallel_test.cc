// Data-parallel training graphs (TrainingOptions::data_parallel) on one rank,
// through the public headers: the all_reduce buckets, their schedule, and
// that with one rank the step is bit-identical to single-process training,
// with and without LMS swapping, on a user's U-Net with concat skips. The
// MPI engine across ranks is tested under mpirun (tests/distributed).
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstring>
#include <span>

#include "lms/config.h"
#include "lms/distributed.h"
#include "lms/rewrite.h"
#include "one_rank.h"
#include "user_models.h"

namespace lms {
namespace {

using user::kMiB;

constexpr int64_t kBatch = 2;
constexpr int64_t kSize = 32;
constexpr uint64_t kSeed = 4242;

std::vector<NodeId> all_reduce_nodes(const Graph& g) {
  std::vector<NodeId> out;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (g.node(id).op == OpKind::kAllReduce) out.push_back(id);
  }
  return out;
}

TEST(DataParallel, BucketsFollowTheBackwardPassAndOverlapIt) {
  const Adam adam{.lr = 1e-3};
  auto train =
      user::user_unet(kBatch, kSize, adam, {.data_parallel = DataParallel{.bucket_bytes = 4096}});
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(verify(*train).ok()) << verify(*train);
  auto order = schedule(*train);
  ASSERT_TRUE(order.ok());
  std::vector<int32_t> position(train->num_nodes());
  for (size_t p = 0; p < order->size(); ++p) position[(*order)[p]] = static_cast<int32_t>(p);

  const std::vector<NodeId> buckets = all_reduce_nodes(*train);
  ASSERT_GE(buckets.size(), 3u) << "4 KiB buckets over 6 conv layers";
  int64_t reduced = 0, params = 0;
  int32_t last_backward = -1;
  for (NodeId id = 0; id < train->num_nodes(); ++id) {
    if (train->node(id).name.rfind("grad/", 0) == 0) {
      last_backward = std::max(last_backward, position[id]);
    }
  }
  for (TensorId t = 0; t < train->num_tensors(); ++t) {
    if (train->tensor(t).role == TensorRole::kParameter) ++params;
  }
  for (NodeId b : buckets) {
    const Node& n = train->node(b);
    reduced += static_cast<int64_t>(n.inputs.size());
    // Right after its last gradient is final.
    int32_t ready = -1;
    for (TensorId t : n.inputs) ready = std::max(ready, position[train->tensor(t).producer]);
    EXPECT_LE(position[b], ready + static_cast<int32_t>(buckets.size())) << n.name;
    // Its outputs feed the optimizer; release_after names their first reader.
    auto it = n.attrs.find("release_after");
    ASSERT_NE(it, n.attrs.end()) << n.name;
    const NodeId first = train->find_node(std::get<std::string>(it->second));
    ASSERT_NE(first, kNoNode);
    for (TensorId t : n.outputs) {
      for (NodeId c : train->tensor(t).consumers) EXPECT_LE(position[first], position[c]);
    }
  }
  EXPECT_EQ(reduced, params) << "every parameter's gradient is in exactly one bucket";
  // The first bucket (the head's gradients) is exchanged while backward
  // compute remains.
  EXPECT_LT(position[buckets.front()], last_backward);
}

TEST(DataParallel, RejectsAZeroBucketAndAMissingCommunicator) {
  auto bad = user::user_unet(kBatch, kSize, Sgd{}, {.data_parallel = DataParallel{0}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("bucket_bytes"), std::string_view::npos) << bad.status();

  auto train = user::user_unet(kBatch, kSize, Sgd{}, {.data_parallel = DataParallel{}});
  ASSERT_TRUE(train.ok()) << train.status();
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 64 * kMiB});
  ASSERT_TRUE(device.ok());
  auto session = Session::create(*train, **device);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(session.status().message().find("communicator"), std::string_view::npos)
      << session.status();
}

struct TrainedRun {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> state;
  uint64_t swapped_bytes = 0;
};

// Three steps of `train` (rewritten under `budget` bytes when nonzero).
TrainedRun train_steps(Graph train, uint64_t budget, Communicator* comm) {
  TrainedRun run;
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 64 * kMiB});
  EXPECT_TRUE(device.ok()) << device.status();
  if (!device.ok()) return run;
  LmsConfig cfg;
  cfg.enabled = budget > 0;
  cfg.device_memory_limit = budget;
  // Swaps only: what this test checks is that copies around the all-reduce
  // change no bit (a joint plan may pick recomputation or least-workspace
  // kernels instead, lms/rewrite.h).
  cfg.auto_actions = AutoActions::kSwap;
  auto rep = rewrite(train, cfg, **device);
  EXPECT_TRUE(rep.ok()) << rep.status();
  if (!rep.ok()) return run;
  EXPECT_TRUE(rep->fits) << rep->summary();
  auto session = Session::create(train, **device, {.communicator = comm});
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return run;
  for (int step = 0; step < 3; ++step) {
    StepResult r;
    absl::Status s = (*session)->run(user::user_unet_feeds(kBatch, kSize, kSeed + step), &r);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return run;
    run.losses.push_back(r.fetched.at("loss")[0]);
    run.swapped_bytes += r.bytes_d2h;
  }
  run.state = user::persistent_state(**session);
  return run;
}

TEST(DataParallel, OneRankIsBitIdenticalToSingleProcessWithAndWithoutSwapping) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  const Adam adam{.lr = 1e-3, .clip_norm = 1.0};
  auto plain = user::user_unet(kBatch, kSize, adam);
  auto dp =
      user::user_unet(kBatch, kSize, adam, {.data_parallel = DataParallel{.bucket_bytes = 8192}});
  ASSERT_TRUE(plain.ok() && dp.ok());
  const TrainedRun reference = train_steps(*plain, 0, nullptr);
  ASSERT_EQ(reference.losses.size(), 3u);

  user::OneRank comm;
  const TrainedRun parallel = train_steps(*dp, 0, &comm);
  EXPECT_EQ(parallel.losses, reference.losses);
  EXPECT_TRUE(user::differing(parallel.state, reference.state).empty());
  EXPECT_EQ(comm.gathers, 1) << "Session::create compares the ranks once";
  EXPECT_EQ(comm.reductions, 3 * static_cast<int>(all_reduce_nodes(*dp).size()));

  // Under LMS with a budget that forces swaps.
  Graph probe = *dp;
  LmsConfig off;
  off.enabled = false;
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 64 * kMiB});
  ASSERT_TRUE(device.ok());
  auto limits = rewrite(probe, off, **device);
  ASSERT_TRUE(limits.ok()) << limits.status();
  const uint64_t budget = limits->working_set_limit_bytes +
                          (limits->peak_bytes_after - limits->working_set_limit_bytes) / 3;
  user::OneRank comm2;
  const TrainedRun swapped = train_steps(*dp, budget, &comm2);
  EXPECT_GT(swapped.swapped_bytes, 0u) << "the budget " << budget << " should force swaps";
  EXPECT_EQ(swapped.losses, reference.losses);
  EXPECT_TRUE(user::differing(swapped.state, reference.state).empty());
}

// In one bucket (DDP's default cap), the head's weight gradient, computed
// first in the backward pass, waits for every other gradient: LMS may swap
// it out meanwhile and bring it back for the all-reduce.
TEST(DataParallel, AGradientWaitingForItsBucketCanBeSwapped) {
  const Adam adam{.lr = 1e-3};
  auto dp = user::user_unet(kBatch, kSize, adam, {.data_parallel = DataParallel{}});
  ASSERT_TRUE(dp.ok()) << dp.status();
  ASSERT_EQ(all_reduce_nodes(*dp).size(), 1u);
  const TensorId grad = dp->find_tensor("head/w/grad");
  ASSERT_NE(grad, kNoTensor);
  auto device = make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 64 * kMiB});
  ASSERT_TRUE(device.ok());
  LmsConfig cfg;
  cfg.policy = SwapPolicy::kManual;
  cfg.tensors = {"head/w/grad"};
  Graph swapped = *dp;
  auto rep = rewrite(swapped, cfg, **device);
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->swapped, std::vector<std::string>{"head/w/grad"}) << rep->summary();
  // The all-reduce now reads the swapped-in copy.
  const NodeId reduce = all_reduce_nodes(swapped)[0];
  bool reads_swap_in = false;
  for (TensorId t : swapped.node(reduce).inputs) {
    const NodeId producer = swapped.tensor(t).producer;
    reads_swap_in = reads_swap_in || swapped.node(producer).op == OpKind::kSwapIn;
  }
  EXPECT_TRUE(reads_swap_in);

  const TrainedRun reference = train_steps(*user::user_unet(kBatch, kSize, adam), 0, nullptr);
  user::OneRank comm;
  auto session_device =
      make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = 64 * kMiB});
  ASSERT_TRUE(session_device.ok());
  auto session = Session::create(swapped, **session_device, {.communicator = &comm});
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<float> losses;
  uint64_t out = 0;
  for (int step = 0; step < 3; ++step) {
    StepResult r;
    ASSERT_TRUE((*session)->run(user::user_unet_feeds(kBatch, kSize, kSeed + step), &r).ok());
    losses.push_back(r.fetched.at("loss")[0]);
    out += r.bytes_d2h;
  }
  EXPECT_EQ(out, 3 * swapped.tensor(swapped.find_tensor("head/w/grad")).bytes());
  EXPECT_EQ(losses, reference.losses);
  EXPECT_TRUE(user::differing(user::persistent_state(**session), reference.state).empty());
}

}  // namespace
}  // namespace lms
