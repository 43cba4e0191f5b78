// The cuDNN convolution algorithm choice (conv_algo_choice.h) on candidate
// lists written as cuDNN's heuristics report them: a deterministic algorithm
// with FMA math is preferred, tensor-op math and non-deterministic ones are
// never taken, the workspace limit is kept where any usable candidate keeps
// it, and exceeded (the smallest workspace) only where none does. Needs no
// GPU.
#include "backend/cuda/conv_algo_choice.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace lms::cuda {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Candidate {
  int algo;
  bool supported;
  bool deterministic;
  cudnnMathType_t math;
  uint64_t mib;
};

std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf_of(const std::vector<Candidate>& list) {
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf;
  for (const Candidate& c : list) {
    cudnnConvolutionBwdFilterAlgoPerf_t p{};
    p.algo = static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo);
    p.status = c.supported ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
    p.determinism = c.deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
    p.mathType = c.math;
    p.memory = c.mib * kMiB;
    perf.push_back(p);
  }
  return perf;
}

absl::StatusOr<std::pair<int, uint64_t>> choose(const std::vector<Candidate>& list,
                                                uint64_t limit_mib, bool least) {
  auto perf = perf_of(list);
  return choose_conv_algorithm("node 'c' (op conv_bwd_weights)", perf.data(),
                               static_cast<int>(perf.size()), limit_mib * kMiB, least);
}

constexpr cudnnMathType_t kFma = CUDNN_FMA_MATH;
constexpr cudnnMathType_t kDefault = CUDNN_DEFAULT_MATH;
constexpr cudnnMathType_t kTensor = CUDNN_TENSOR_OP_MATH;

TEST(ConvAlgoChoice, TakesTheBestRankedDeterministicFmaCandidateWithinTheLimit) {
  // Ranked as cuDNN ranks them: fastest first.
  const std::vector<Candidate> list = {{0, true, false, kFma, 0},     // non-deterministic
                                       {5, true, true, kTensor, 1},   // tensor-op math
                                       {1, true, true, kDefault, 2},  // default math
                                       {3, true, true, kFma, 64},
                                       {6, true, true, kFma, 8}};
  auto best = choose(list, 256, /*least=*/false);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->first, 3);
  EXPECT_EQ(best->second, 64 * kMiB);
  auto least = choose(list, 256, /*least=*/true);
  ASSERT_TRUE(least.ok()) << least.status();
  EXPECT_EQ(least->first, 6);
  EXPECT_EQ(least->second, 8 * kMiB);
}

TEST(ConvAlgoChoice, DefaultMathOnlyWhereNoFmaCandidateIsWithinTheLimit) {
  const std::vector<Candidate> list = {{1, true, true, kDefault, 2}, {3, true, true, kFma, 512}};
  auto c = choose(list, 256, false);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->first, 1);
}

TEST(ConvAlgoChoice, ExceedsTheLimitWithTheSmallestWorkspaceWhereNothingElseIsUsable) {
  // As seen on an H100: every deterministic candidate is over 256 MiB.
  const std::vector<Candidate> list = {{0, true, false, kFma, 0},
                                       {3, true, true, kFma, 2048},
                                       {1, true, true, kFma, 900},
                                       {5, false, true, kFma, 1},
                                       {4, true, true, kTensor, 10}};
  for (bool least : {false, true}) {
    auto c = choose(list, 256, least);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->first, 1) << "least=" << least;
    EXPECT_EQ(c->second, 900 * kMiB);
  }
}

TEST(ConvAlgoChoice, NoUsableCandidateIsUnimplementedAndListsEveryCandidate) {
  const std::vector<Candidate> list = {
      {0, true, false, kFma, 0}, {4, true, true, kTensor, 10}, {5, false, true, kFma, 1}};
  auto c = choose(list, 256, false);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  const std::string m(c.status().message());
  EXPECT_NE(m.find("node 'c' (op conv_bwd_weights)"), std::string::npos) << m;
  EXPECT_NE(m.find("algo 0 (supported, non-deterministic, fma math, 0 bytes)"), std::string::npos)
      << m;
  EXPECT_NE(m.find("algo 4 (supported, deterministic, tensor-op math"), std::string::npos) << m;
  EXPECT_NE(m.find("algo 5 (not supported"), std::string::npos) << m;
  auto none = choose({}, 256, false);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(none.status().message()).find("among 0 candidates: none"),
            std::string::npos);
}

}  // namespace
}  // namespace lms::cuda
