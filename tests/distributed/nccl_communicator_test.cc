// The NCCL communicator as a user's program sees it (lms/distributed.h): one
// process, a job of one rank bootstrapped by MPI. Skips, printing why,
// without NCCL in the build or without a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "lms/device.h"
#include "lms/distributed.h"

namespace {

constexpr uint32_t kSeed = 7;

TEST(NcclCommunicator, RefusesADeviceThatIsNotCuda) {
  if (!lms::mpi_built()) GTEST_SKIP() << "this build of lms has no MPI";
  absl::StatusOr<std::unique_ptr<lms::Communicator>> bootstrap = lms::make_mpi_communicator({});
  ASSERT_TRUE(bootstrap.ok()) << bootstrap.status();
  absl::StatusOr<std::unique_ptr<lms::Device>> cpu =
      lms::make_cpu_device({.capacity_bytes = 1 << 20, .host_pool_bytes = 1 << 20});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(lms::make_nccl_communicator(**cpu, **bootstrap).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(NcclCommunicator, OneRankAllReducesToScaleTimesItsInput) {
  if (!lms::nccl_built()) GTEST_SKIP() << "this build of lms has no NCCL engine";
  absl::StatusOr<std::unique_ptr<lms::Device>> gpu = lms::make_cuda_device({.device_ordinal = 0});
  if (!gpu.ok()) GTEST_SKIP() << "no CUDA device: " << gpu.status();
  absl::StatusOr<std::unique_ptr<lms::Communicator>> bootstrap = lms::make_mpi_communicator({});
  ASSERT_TRUE(bootstrap.ok()) << bootstrap.status();
  ASSERT_EQ((*bootstrap)->size(), 1) << "run this test as one process";
  absl::StatusOr<std::unique_ptr<lms::Communicator>> nccl =
      lms::make_nccl_communicator(**gpu, **bootstrap);
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  EXPECT_EQ((*nccl)->engine(), "nccl");
  EXPECT_EQ((*nccl)->size(), 1);

  lms::Device& dev = **gpu;
  const std::vector<int64_t> counts = {1, 1000, 4099};
  std::mt19937 rng(kSeed);
  std::uniform_real_distribution<float> dist(-10.0f, 10.0f);
  for (float scale : {1.0f, 0.5f, 1.0f / 3.0f}) {
    std::vector<std::vector<float>> host;
    std::vector<const float*> in;
    std::vector<float*> out;
    for (int64_t count : counts) {
      host.emplace_back(static_cast<size_t>(count));
      for (float& x : host.back()) x = dist(rng);
      const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(float);
      absl::StatusOr<void*> d_in = dev.allocate(bytes);
      absl::StatusOr<void*> d_out = dev.allocate(bytes);
      ASSERT_TRUE(d_in.ok() && d_out.ok());
      ASSERT_TRUE(dev.upload(*d_in, host.back().data(), bytes).ok());
      in.push_back(static_cast<const float*>(*d_in));
      out.push_back(static_cast<float*>(*d_out));
    }
    absl::Status enqueued = (*nccl)->enqueue_all_reduce(dev, in, out, counts, scale, "grads");
    ASSERT_TRUE(enqueued.ok()) << enqueued;
    absl::Status synced = dev.synchronize();
    ASSERT_TRUE(synced.ok()) << synced;
    for (size_t i = 0; i < counts.size(); ++i) {
      std::vector<float> got(host[i].size());
      ASSERT_TRUE(dev.download(got.data(), out[i], got.size() * sizeof(float)).ok());
      int wrong = 0;
      for (size_t k = 0; k < got.size(); ++k) {
        const float want = scale * host[i][k];
        if (std::bit_cast<uint32_t>(got[k]) != std::bit_cast<uint32_t>(want)) ++wrong;
      }
      EXPECT_EQ(wrong, 0) << "tensor " << i << ", scale " << scale << ", seed " << kSeed;
      dev.deallocate(const_cast<float*>(in[i]));
      dev.deallocate(out[i]);
    }
  }
  std::vector<double> v = {2.5};
  ASSERT_TRUE((*nccl)->all_reduce_sum(v).ok());
  EXPECT_EQ(v[0], 2.5);
}

}  // namespace
