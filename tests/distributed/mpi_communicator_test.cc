// The MPI communicator as a user's program sees it (lms/distributed.h), run
// by ctest under `mpirun -np 2` and `-np 3`: every rank runs every test and prints its
// own result; mpirun fails the test when any rank exits non-zero. Inputs are
// generated from a fixed seed and the rank, so every rank can compute every
// rank's contribution and the serial rank-order sum it must match bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "lms/device.h"
#include "lms/distributed.h"

namespace {

constexpr uint32_t kSeed = 20240611;
// Long enough that a stuck peer fails the test instead of hanging ctest,
// short against ctest's timeout.
constexpr double kTimeout_s = 30;

lms::Communicator* world = nullptr;  // set by main before the tests run

// Rank `rank`'s contribution to tensor `tensor` of `count` floats.
std::vector<float> floats_of(int rank, int tensor, int64_t count) {
  std::mt19937 rng(kSeed + 1000 * static_cast<uint32_t>(rank) + static_cast<uint32_t>(tensor));
  std::uniform_real_distribution<float> dist(-10.0f, 10.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = dist(rng);
  return v;
}

// Note [Deterministic all-reduce], serially: acc = c_0; acc += c_1; ...; acc * scale.
std::vector<float> rank_order_sum(int ranks, int tensor, int64_t count, float scale) {
  std::vector<float> acc = floats_of(0, tensor, count);
  for (int r = 1; r < ranks; ++r) {
    const std::vector<float> c = floats_of(r, tensor, count);
    for (size_t k = 0; k < acc.size(); ++k) acc[k] += c[k];
  }
  for (float& x : acc) x *= scale;
  return acc;
}

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Every rank's `mine`, compared with rank 0's: the same bits everywhere.
void expect_same_on_every_rank(const std::string& mine) {
  absl::StatusOr<std::vector<std::string>> all = world->all_gather(mine);
  ASSERT_TRUE(all.ok()) << all.status();
  for (size_t r = 0; r < all->size(); ++r) EXPECT_EQ((*all)[r], (*all)[0]) << "rank " << r;
}

TEST(MpiCommunicator, NamesItsEngineAndRank) {
  EXPECT_EQ(world->engine(), "mpi");
  EXPECT_GE(world->size(), 1);
  EXPECT_GE(world->rank(), 0);
  EXPECT_LT(world->rank(), world->size());
  EXPECT_TRUE(lms::mpi_built());
  EXPECT_TRUE(lms::launched_by_mpi());
}

TEST(MpiCommunicator, AllReduceSumIsTheRankOrderSumWithTheSameBitsOnEveryRank) {
  // Magnitudes far apart, so a different order of summation gives other bits.
  auto values_of = [](int rank) {
    std::mt19937_64 rng(kSeed + static_cast<uint64_t>(rank));
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    std::vector<double> v(37);
    for (size_t k = 0; k < v.size(); ++k) v[k] = dist(rng) * std::pow(10.0, (k % 7) * 4.0 - 12);
    return v;
  };
  std::vector<double> values = values_of(world->rank());
  ASSERT_TRUE(world->all_reduce_sum(values).ok());
  std::vector<double> expected = values_of(0);
  for (int r = 1; r < world->size(); ++r) {
    const std::vector<double> c = values_of(r);
    for (size_t k = 0; k < expected.size(); ++k) expected[k] += c[k];
  }
  for (size_t k = 0; k < values.size(); ++k) {
    EXPECT_EQ(std::bit_cast<uint64_t>(values[k]), std::bit_cast<uint64_t>(expected[k]))
        << "element " << k << ": " << values[k] << " vs " << expected[k];
  }
  expect_same_on_every_rank(bytes_of(values));
}

const std::vector<int64_t> kCounts = {1, 7, 1000, 4099, 0, 3, 65537};

// Rank `comm.rank()`'s contributions to kCounts' tensors all-reduced with
// enqueue_all_reduce on a fresh CPU device (in place when `in_place`),
// downloaded into `result`.
void all_reduce_on_cpu(lms::Communicator& comm, float scale, bool in_place,
                       std::vector<std::vector<float>>& result) {
  absl::StatusOr<std::unique_ptr<lms::Device>> device =
      lms::make_cpu_device({.capacity_bytes = 16 << 20, .host_pool_bytes = 16 << 20});
  ASSERT_TRUE(device.ok()) << device.status();
  lms::Device& dev = **device;
  std::vector<const float*> in;
  std::vector<float*> out;
  for (size_t i = 0; i < kCounts.size(); ++i) {
    const uint64_t bytes = static_cast<uint64_t>(kCounts[i]) * sizeof(float);
    absl::StatusOr<void*> d_in = dev.allocate(bytes);
    absl::StatusOr<void*> d_out = in_place ? d_in : dev.allocate(bytes);
    ASSERT_TRUE(d_in.ok() && d_out.ok());
    const std::vector<float> mine = floats_of(comm.rank(), static_cast<int>(i), kCounts[i]);
    ASSERT_TRUE(dev.upload(*d_in, mine.data(), bytes).ok());
    in.push_back(static_cast<const float*>(*d_in));
    out.push_back(static_cast<float*>(*d_out));
  }
  absl::Status enqueued = comm.enqueue_all_reduce(dev, in, out, kCounts, scale, "grads");
  ASSERT_TRUE(enqueued.ok()) << enqueued;
  absl::Status synced = dev.synchronize();
  ASSERT_TRUE(synced.ok()) << synced;
  EXPECT_EQ(dev.host_stats().bytes_in_use, 0u) << "the staging block was not returned";
  result.clear();
  for (size_t i = 0; i < kCounts.size(); ++i) {
    result.emplace_back(static_cast<size_t>(kCounts[i]));
    ASSERT_TRUE(dev.download(result.back().data(), out[i], result.back().size() * 4).ok());
  }
}

void expect_rank_order_sum(int ranks, float scale, const std::vector<std::vector<float>>& got) {
  ASSERT_EQ(got.size(), kCounts.size());
  for (size_t i = 0; i < kCounts.size(); ++i) {
    const std::vector<float> want = rank_order_sum(ranks, static_cast<int>(i), kCounts[i], scale);
    ASSERT_EQ(got[i].size(), want.size());
    int wrong = 0;
    for (size_t k = 0; k < want.size(); ++k) {
      if (std::bit_cast<uint32_t>(got[i][k]) != std::bit_cast<uint32_t>(want[k]) && ++wrong < 4) {
        ADD_FAILURE() << "tensor " << i << " element " << k << ": " << got[i][k] << " vs "
                      << want[k] << " (scale " << scale << ")";
      }
    }
    EXPECT_EQ(wrong, 0) << "tensor " << i << " of " << kCounts[i];
  }
}

TEST(MpiCommunicator, EnqueuedAllReduceIsTheRankOrderSumTimesScaleOnEveryRank) {
  for (float scale : {1.0f, 0.5f, 1.0f / 3.0f}) {
    std::vector<std::vector<float>> got;
    all_reduce_on_cpu(*world, scale, /*in_place=*/false, got);
    expect_rank_order_sum(world->size(), scale, got);
    std::string bits;
    for (const std::vector<float>& t : got) bits += bytes_of(t);
    expect_same_on_every_rank(bits);
  }
}

TEST(MpiCommunicator, EnqueuedAllReduceInPlaceAndRepeatedGivesTheSameBits) {
  std::vector<std::vector<float>> first, in_place;
  all_reduce_on_cpu(*world, 0.25f, /*in_place=*/false, first);
  all_reduce_on_cpu(*world, 0.25f, /*in_place=*/true, in_place);
  EXPECT_EQ(first, in_place);
  expect_rank_order_sum(world->size(), 0.25f, in_place);
}

TEST(MpiCommunicator, HostCollectivesRunWhileAnAllReduceIsInFlight) {
  // The comm stream's thread exchanges a large buffer while the host thread
  // runs its own collectives: the two never take each other's messages.
  constexpr int64_t kCount = 1 << 20;
  auto device = lms::make_cpu_device({.capacity_bytes = 16 << 20, .host_pool_bytes = 32 << 20});
  ASSERT_TRUE(device.ok()) << device.status();
  absl::StatusOr<void*> grad = (*device)->allocate(kCount * sizeof(float));
  ASSERT_TRUE(grad.ok()) << grad.status();
  const std::vector<float> mine = floats_of(world->rank(), 0, kCount);
  ASSERT_TRUE((*device)->upload(*grad, mine.data(), kCount * sizeof(float)).ok());
  const float* in[] = {static_cast<const float*>(*grad)};
  float* out[] = {static_cast<float*>(*grad)};
  const int64_t counts[] = {kCount};
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(world->enqueue_all_reduce(**device, in, out, counts, 1.0f, "grads").ok());
    std::vector<double> v = {1.0};
    ASSERT_TRUE(world->all_reduce_sum(v).ok());
    EXPECT_EQ(v[0], world->size());
    absl::StatusOr<std::vector<std::string>> all = world->all_gather(std::to_string(round));
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_EQ(all->back(), std::to_string(round));
    ASSERT_TRUE(world->barrier().ok());
  }
  absl::Status synced = (*device)->synchronize();
  ASSERT_TRUE(synced.ok()) << synced;
  // Three in-place all-reduces: the rank-order sum, summed again twice.
  std::vector<float> want = rank_order_sum(world->size(), 0, kCount, 1.0f);
  for (int round = 1; round < 3; ++round) {
    for (float& x : want) {
      const float c = x;
      for (int r = 1; r < world->size(); ++r) x += c;
    }
  }
  std::vector<float> got(static_cast<size_t>(kCount));
  ASSERT_TRUE((*device)->download(got.data(), *grad, kCount * sizeof(float)).ok());
  EXPECT_TRUE(bytes_of(got) == bytes_of(want)) << "seed " << kSeed;
}

TEST(MpiCommunicator, EnqueuedAllReduceRejectsBadArgumentsAtOnce) {
  auto device = lms::make_cpu_device({.capacity_bytes = 1 << 20, .host_pool_bytes = 1 << 20});
  ASSERT_TRUE(device.ok()) << device.status();
  float x = 1;
  const float* in[] = {&x, &x};
  float* out[] = {&x};
  const int64_t one[] = {1};
  const int64_t minus_one[] = {-1};
  EXPECT_EQ(world->enqueue_all_reduce(**device, in, out, one, 1, "g").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      world->enqueue_all_reduce(**device, std::span(in).first(1), out, minus_one, 1, "g").code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(world
                ->enqueue_all_reduce(**device, std::span(in).first(1), out, one,
                                     std::numeric_limits<float>::infinity(), "g")
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*device)->synchronize().ok());  // nothing was enqueued
}

TEST(MpiCommunicator, AllGatherReturnsStringsOfDifferentLengthsByRank) {
  // Rank 1 sends nothing; the others more than one eager message's worth.
  auto string_of = [](int rank) {
    return rank == 1 ? std::string()
                     : std::string(100000 + 13 * rank, static_cast<char>('a' + rank % 26));
  };
  absl::StatusOr<std::vector<std::string>> all = world->all_gather(string_of(world->rank()));
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(static_cast<int>(all->size()), world->size());
  for (int r = 0; r < world->size(); ++r) EXPECT_EQ((*all)[static_cast<size_t>(r)], string_of(r));
}

TEST(MpiCommunicator, BarrierReturnsOnEveryRank) { EXPECT_TRUE(world->barrier().ok()); }

TEST(MpiCommunicator, SubsetOfOneRankAllReducesToScaleTimesItsInput) {
  absl::StatusOr<std::unique_ptr<lms::Communicator>> subset = lms::make_mpi_subset(*world, 1);
  ASSERT_TRUE(subset.ok()) << subset.status();
  if (world->rank() != 0) {
    EXPECT_EQ(*subset, nullptr);
    return;
  }
  ASSERT_NE(*subset, nullptr);
  lms::Communicator& one = **subset;
  EXPECT_EQ(one.size(), 1);
  EXPECT_EQ(one.rank(), 0);
  std::vector<std::vector<float>> got;
  all_reduce_on_cpu(one, 0.75f, /*in_place=*/false, got);
  expect_rank_order_sum(1, 0.75f, got);
  std::vector<double> v = {1.5, -2.25};
  ASSERT_TRUE(one.all_reduce_sum(v).ok());
  EXPECT_EQ(v, (std::vector<double>{1.5, -2.25}));
  absl::StatusOr<std::vector<std::string>> all = one.all_gather("only");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, std::vector<std::string>{"only"});
}

TEST(MpiCommunicator, SubsetOfEveryRankIsTheWorldAgain) {
  absl::StatusOr<std::unique_ptr<lms::Communicator>> subset =
      lms::make_mpi_subset(*world, world->size());
  ASSERT_TRUE(subset.ok()) << subset.status();
  ASSERT_NE(*subset, nullptr);
  EXPECT_EQ((*subset)->size(), world->size());
  EXPECT_EQ((*subset)->rank(), world->rank());
  std::vector<double> v = {static_cast<double>(world->rank())};
  ASSERT_TRUE((*subset)->all_reduce_sum(v).ok());
  EXPECT_EQ(v[0], world->size() * (world->size() - 1) / 2.0);
}

TEST(MpiCommunicator, RejectsBadSubsetsAndOptions) {
  EXPECT_EQ(lms::make_mpi_subset(*world, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lms::make_mpi_subset(*world, world->size() + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (double timeout_s : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(lms::make_mpi_communicator({.timeout_s = timeout_s}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << timeout_s;
  }
  EXPECT_EQ(lms::make_mpi_communicator({.abort_grace_s = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  absl::StatusOr<std::unique_ptr<lms::Communicator>> comm =
      lms::make_mpi_communicator({.timeout_s = kTimeout_s});
  if (!comm.ok()) {
    std::fprintf(stderr, "make_mpi_communicator: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  world = comm->get();
  std::printf("rank %d of %d, seed %u\n", world->rank(), world->size(), kSeed);
  const int failed = RUN_ALL_TESTS();
  std::printf("rank %d: %s\n", world->rank(), failed == 0 ? "all tests passed" : "FAILED");
  return failed;
}
