// The plans that keep large tensors within the CUDA and cuDNN APIs' 32-bit
// limits (Note [Large tensors]): the concat / slice copy plan, executed on
// host memory the way cudaMemcpyAsync / cudaMemcpy2DAsync would, against a
// plain reference; the convolution split along N; checked int conversions.
// Needs no GPU.
#include "backend/cuda/large_tensor_plan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace lms::cuda {
namespace {

constexpr uint32_t kSeed = 20261123;

// What the CUDA copies of `plan` do, on host bytes.
void execute(const std::vector<CopyStep>& plan, const std::vector<float>& src,
             std::vector<float>& dst) {
  const auto* from = reinterpret_cast<const char*>(src.data());
  auto* to = reinterpret_cast<char*>(dst.data());
  for (const CopyStep& s : plan) {
    const int64_t rows = s.kind == CopyStep::Kind::kContiguous ? 1 : s.rows;
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(to + s.dst_offset + r * s.dst_pitch, from + s.src_offset + r * s.src_pitch,
                  s.row_bytes);
    }
  }
}

// Concat of random [n, c_i, inner] tensors along axis 1 through the plan,
// with the pitch limit small enough to force every path, against indexing.
TEST(ChannelCopyPlan, ConcatAndSliceMatchIndexingOnEveryPath) {
  std::printf("seed %u\n", kSeed);
  std::mt19937 rng(kSeed);
  std::uniform_int_distribution<int64_t> dim(1, 5);
  std::uniform_real_distribution<float> value(-1, 1);
  bool saw_contiguous = false, saw_pitched = false, saw_rows = false;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = dim(rng), inner = dim(rng), parts = dim(rng);
    std::vector<int64_t> channels;
    int64_t total = 0;
    for (int64_t i = 0; i < parts; ++i) channels.push_back(dim(rng)), total += channels.back();
    // 0: no limit in practice; else a limit between a row and a pitch.
    const int64_t max_pitch = trial % 3 == 0 ? kMaxCopyPitchBytes : int64_t{4} * inner * dim(rng);
    std::vector<float> y(n * total * inner, 0.0f), want(y.size());
    int64_t c0 = 0;
    for (int64_t i = 0; i < parts; ++i) {
      std::vector<float> x(n * channels[i] * inner);
      for (float& v : x) v = value(rng);
      auto plan = channel_copy_plan(n, channels[i], 0, total, c0, channels[i], inner, sizeof(float),
                                    max_pitch);
      for (const CopyStep& s : plan) {
        if (s.kind == CopyStep::Kind::kPitched) {
          saw_pitched = true;
          EXPECT_LE(s.src_pitch, max_pitch);
          EXPECT_LE(s.dst_pitch, max_pitch);
        } else {
          (plan.size() > 1 ? saw_rows : saw_contiguous) = true;
        }
      }
      execute(plan, x, y);
      for (int64_t b = 0; b < n; ++b)
        for (int64_t c = 0; c < channels[i]; ++c)
          for (int64_t k = 0; k < inner; ++k)
            want[(b * total + c0 + c) * inner + k] = x[(b * channels[i] + c) * inner + k];
      c0 += channels[i];
    }
    ASSERT_EQ(y, want) << "trial " << trial;
    // Slice channels [begin, begin + size) back out of y.
    const int64_t begin = std::uniform_int_distribution<int64_t>(0, total - 1)(rng);
    const int64_t size = std::uniform_int_distribution<int64_t>(1, total - begin)(rng);
    std::vector<float> s(n * size * inner, 0.0f);
    execute(channel_copy_plan(n, total, begin, size, 0, size, inner, sizeof(float), max_pitch), y,
            s);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t c = 0; c < size; ++c)
        for (int64_t k = 0; k < inner; ++k)
          ASSERT_EQ(s[(b * size + c) * inner + k], y[(b * total + begin + c) * inner + k])
              << "trial " << trial;
  }
  EXPECT_TRUE(saw_contiguous && saw_pitched && saw_rows);
}

// The skip concat of a 3-D U-Net at 256^3: [1,16,256^3] twice into
// [1,32,256^3] has a 2 GiB destination row. No copy may carry a pitch over
// the limit: N = 1 is one contiguous copy per input, N = 2 one per sample.
TEST(ChannelCopyPlan, TwoGibRowsNeverBecomeAPitch) {
  const int64_t inner = int64_t{256} * 256 * 256;
  auto one = channel_copy_plan(1, 16, 0, 32, 16, 16, inner, 4);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].kind, CopyStep::Kind::kContiguous);
  EXPECT_EQ(one[0].dst_offset, int64_t{16} * inner * 4);
  EXPECT_EQ(one[0].row_bytes, int64_t{1} << 30);
  auto two = channel_copy_plan(2, 16, 0, 32, 16, 16, inner, 4);
  ASSERT_EQ(two.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(two[i].kind, CopyStep::Kind::kContiguous);
    EXPECT_EQ(two[i].src_offset, i * (int64_t{1} << 30));
    EXPECT_EQ(two[i].dst_offset, i * (int64_t{2} << 30) + (int64_t{1} << 30));
  }
  // A small tensor of N = 64 stays one pitched copy.
  auto small = channel_copy_plan(64, 32, 8, 64, 0, 16, 48 * 48, 4);
  ASSERT_EQ(small.size(), 1u);
  EXPECT_EQ(small[0].kind, CopyStep::Kind::kPitched);
  EXPECT_EQ(small[0].rows, 64);
  // Whole samples on both sides are one contiguous block even with N > 1.
  auto whole = channel_copy_plan(8, 16, 0, 16, 0, 16, inner, 4);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].row_bytes, int64_t{8} << 30);
  EXPECT_TRUE(channel_copy_plan(0, 4, 0, 4, 0, 4, 10, 4).empty());
}

TEST(ConvSplitPlan, PiecesCoverTheBatchWithinTheLimit) {
  std::printf("seed %u\n", kSeed + 1);
  std::mt19937 rng(kSeed + 1);
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t limit = std::uniform_int_distribution<int64_t>(1, 1000)(rng);
    const int64_t sample = std::uniform_int_distribution<int64_t>(1, limit)(rng);
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 200)(rng);
    auto split = conv_split_plan("conv1", n, sample, limit);
    ASSERT_TRUE(split.ok()) << split.status();
    int64_t next = 0;
    for (const auto& [first, count] : split->pieces) {
      EXPECT_EQ(first, next);
      EXPECT_GE(count, 1);
      EXPECT_LE(count * sample, limit);
      EXPECT_LE(count, split->chunk);
      next = first + count;
    }
    EXPECT_EQ(next, n);
    // As few pieces as the limit allows: a full chunk plus one more sample
    // would not fit, unless the chunk is the whole batch.
    EXPECT_TRUE(split->chunk == n || (split->chunk + 1) * sample > limit);
  }
  // The real limit: [4, 32, 256^3] (2^29 elements a sample) runs in pieces
  // of 3 samples, then 1.
  const int64_t sample = int64_t{32} * 256 * 256 * 256;
  auto big = conv_split_plan("enc1", 4, sample);
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_EQ(big->pieces.size(), 2u);
  EXPECT_EQ(big->pieces[0], std::make_pair(int64_t{0}, int64_t{3}));
  EXPECT_EQ(big->pieces[1], std::make_pair(int64_t{3}, int64_t{1}));
  auto fits = conv_split_plan("conv", 64, 64 * 48 * 48);
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(fits->pieces.size(), 1u);
}

TEST(ConvSplitPlan, OneSampleOverTheLimitIsAClearError) {
  const int64_t sample = int64_t{64} * 512 * 512 * 512;  // 2^33 elements
  auto split = conv_split_plan("dec0_conv", 1, sample);
  ASSERT_FALSE(split.ok());
  EXPECT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(split.status().message());
  EXPECT_NE(msg.find("node 'dec0_conv'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("8589934592 elements"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2147483647"), std::string::npos) << msg;
  EXPECT_FALSE(conv_split_plan("c", 0, 10).ok());
  EXPECT_FALSE(conv_split_plan("c", 3, 0).ok());
}

TEST(CheckedInt, RefusesWhatDoesNotFit) {
  EXPECT_EQ(*checked_int(std::numeric_limits<int>::max(), "dim"), std::numeric_limits<int>::max());
  EXPECT_EQ(*checked_int(-5, "pad"), -5);
  auto over = checked_int(int64_t{1} << 31, "node 'c' (op conv): input tensor stride");
  ASSERT_FALSE(over.ok());
  EXPECT_NE(std::string(over.status().message()).find("input tensor stride is 2147483648"),
            std::string::npos)
      << over.status();
}

}  // namespace
}  // namespace lms::cuda
