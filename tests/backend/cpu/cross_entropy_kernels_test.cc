// softmax_cross_entropy (+ _bwd) kernels of the CPU device: the loss
// against a double-precision reference of docs/ops.md, the gradient against
// central finite differences of dloss * loss(logits), ignored rows, bit
// identity of repeated runs, labels out of range (found before anything is
// written) and bad specs. PyTorch's numbers are checked through the public
// API in tests/public/cross_entropy_test.cc.
#include <cmath>
#include <cstring>

#include "gtest/gtest.h"
#include "pointwise_test_util.h"

namespace lms::cpu {
namespace {

using testing::Buffers;
using testing::make_spec;
using testing::run_spec;

constexpr double kFwdTol = 1e-6;
constexpr double kBwdTol = 1e-5;
const Shape kScalar = {};

// int64 labels in a float buffer, as the executor passes them.
std::vector<float> labels_buffer(const std::vector<int64_t>& labels) {
  std::vector<float> b(labels.size() * 2);
  std::memcpy(b.data(), labels.data(), labels.size() * sizeof(int64_t));
  return b;
}

// The mean over rows with label != ignore of log Σ exp(x[n,:]) - x[n,label].
double xent_ref(const std::vector<double>& x, const std::vector<int64_t>& labels, int64_t c,
                int64_t ignore) {
  double acc = 0;
  int rows = 0;
  for (size_t n = 0; n < labels.size(); ++n) {
    if (labels[n] == ignore) continue;
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(x[n * c + j]);
    acc += std::log(sum) - x[n * c + labels[n]];
    ++rows;
  }
  return acc / rows;
}

class CrossEntropyKernelTest : public ::testing::Test {
 protected:
  CpuKernelContext ctx_ = testing::make_context();
};

TEST_F(CrossEntropyKernelTest, LossAndGradientMatchTheReference) {
  std::mt19937 rng = testing::seeded_rng(21, "softmax_cross_entropy");
  constexpr int64_t kN = 6, kC = 9;
  for (int64_t ignore : {int64_t{-100}, int64_t{4}}) {
    SCOPED_TRACE(::testing::Message() << "ignore_index " << ignore);
    const std::vector<int64_t> labels = {3, -100, 0, 8, 4, 4};
    const Attrs attrs = {{"ignore_index", ignore}};
    Buffers in = {testing::random_vector(rng, kN * kC, -3.f, 3.f), labels_buffer(labels)};
    auto loss = run_spec(
        make_spec(OpKind::kSoftmaxCrossEntropy, {{kN, kC}, {kN}}, {kScalar}, attrs), in, ctx_);
    if (ignore != -100) {  // -100 is then a label out of range
      ASSERT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument) << loss.status();
      in[1] = labels_buffer({3, 1, 0, 8, 4, 4});
      loss = run_spec(make_spec(OpKind::kSoftmaxCrossEntropy, {{kN, kC}, {kN}}, {kScalar}, attrs),
                      in, ctx_);
    }
    ASSERT_TRUE(loss.ok()) << loss.status();
    std::vector<int64_t> used(kN);
    std::memcpy(used.data(), in[1].data(), kN * sizeof(int64_t));
    const double want = xent_ref(testing::to_double(in[0]), used, kC, ignore);
    EXPECT_LT(std::abs((*loss)[0][0] - want) / want, kFwdTol);

    const float dloss = 0.8f;
    Buffers bwd_in = {in[0], in[1], {dloss}};
    auto grad = run_spec(
        make_spec(OpKind::kSoftmaxCrossEntropyBwd, {{kN, kC}, {kN}, kScalar}, {{kN, kC}}, attrs),
        bwd_in, ctx_);
    ASSERT_TRUE(grad.ok()) << grad.status();
    auto f = [&](const std::vector<double>& x) { return dloss * xent_ref(x, used, kC, ignore); };
    const auto fd = testing::finite_diff(f, testing::to_double(in[0]));
    EXPECT_LT(testing::max_rel_error((*grad)[0], fd), kBwdTol);
    for (int64_t n = 0; n < kN; ++n) {
      if (used[n] != ignore) continue;
      for (int64_t j = 0; j < kC; ++j) EXPECT_EQ((*grad)[0][n * kC + j], 0.0f) << n;
    }
  }
}

TEST_F(CrossEntropyKernelTest, RepeatedRunsAreBitIdentical) {
  std::mt19937 rng = testing::seeded_rng(22, "softmax_cross_entropy_determinism");
  constexpr int64_t kN = 64, kC = 300;
  std::vector<int64_t> labels(kN);
  for (int64_t n = 0; n < kN; ++n) labels[n] = (n * 37) % kC;
  Buffers in = {testing::random_vector(rng, kN * kC, -5.f, 5.f), labels_buffer(labels), {1.f}};
  const KernelSpec spec =
      make_spec(OpKind::kSoftmaxCrossEntropyBwd, {{kN, kC}, {kN}, kScalar}, {{kN, kC}});
  auto a = run_spec(spec, in, ctx_);
  auto b = run_spec(spec, in, ctx_);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(testing::bit_identical(*a, *b));
}

// The first label outside [0, C) that is not ignore_index fails the run,
// named with its position, before the output is written.
TEST_F(CrossEntropyKernelTest, LabelsOutOfRangeFailBeforeAnythingIsWritten) {
  constexpr int64_t kN = 3, kC = 4;
  const KernelSpec fwd = make_spec(OpKind::kSoftmaxCrossEntropy, {{kN, kC}, {kN}}, {kScalar});
  const KernelSpec bwd =
      make_spec(OpKind::kSoftmaxCrossEntropyBwd, {{kN, kC}, {kN}, kScalar}, {{kN, kC}});
  for (const KernelSpec* spec : {&fwd, &bwd}) {
    for (int64_t bad : {int64_t{-1}, kC}) {
      auto kernel = testing::compile(*spec, ctx_);
      ASSERT_TRUE(kernel.ok()) << kernel.status();
      std::vector<float> x(kN * kC, 0.5f), labels = labels_buffer({1, bad, bad}), dloss = {1.f};
      std::vector<float> out(spec == &fwd ? 1 : kN * kC, 7.f);
      KernelArgs args;
      args.inputs = {x.data(), labels.data(), dloss.data()};
      if (spec == &fwd) args.inputs.pop_back();
      args.outputs = {out.data()};
      const absl::Status s = (*kernel)->run(args);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      const std::string want = "label " + std::to_string(bad) +
                               " at position 1 is out of range [0, 4) of the 4 classes and is "
                               "not ignore_index -100";
      EXPECT_NE(s.message().find(want), absl::string_view::npos) << s;
      for (float v : out) EXPECT_EQ(v, 7.f) << op_name(spec->op);
    }
  }
}

TEST_F(CrossEntropyKernelTest, InvalidSpecsAreRejected) {
  const std::vector<KernelSpec> bad = {
      make_spec(OpKind::kSoftmaxCrossEntropy, {{2, 3, 4}, {2}}, {kScalar}),  // logits rank 3
      make_spec(OpKind::kSoftmaxCrossEntropy, {{2, 3}, {3}}, {kScalar}),     // labels [N]
      make_spec(OpKind::kSoftmaxCrossEntropy, {{2, 3}, {2}}, {{2}}),         // loss not scalar
      make_spec(OpKind::kSoftmaxCrossEntropy, {{2, 3}, {2}}, {kScalar},
                {{"ignore_index", 0.5}}),                                            // not an int
      make_spec(OpKind::kSoftmaxCrossEntropyBwd, {{2, 3}, {2}, {2}}, {{2, 3}}),      // dloss
      make_spec(OpKind::kSoftmaxCrossEntropyBwd, {{2, 3}, {2}, kScalar}, {{3, 2}}),  // dlogits
  };
  for (const KernelSpec& spec : bad) {
    auto k = create_cpu_kernel(spec, ctx_);
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << op_name(spec.op);
    EXPECT_NE(k.status().message().find(spec.name), std::string::npos) << k.status();
  }
}

}  // namespace
}  // namespace lms::cpu
