// matmul kernel (oneDNN matmul, transposes as strides, broadcast batch
// dimensions) against a naive double-precision triple loop, on random data
// with printed seeds; repeated runs give the same bits; bad specs rejected
// naming the node.
#include <ostream>
#include <string>

#include "common/matmul_shape.h"
#include "gtest/gtest.h"
#include "pointwise_test_util.h"

namespace lms::cpu {
namespace {

using testing::Buffers;
using testing::make_spec;
using testing::run_spec;

constexpr double kTol = 1e-5;  // float products over at most 40 terms

struct Case {
  Shape a, b;
  bool trans_a = false, trans_b = false;
  Shape y;
};

void print_dims(const Shape& s, std::ostream* os) {
  *os << '[';
  for (size_t i = 0; i < s.size(); ++i) *os << (i ? "," : "") << s[i];
  *os << ']';
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << "a ";
  print_dims(c.a, os);
  *os << (c.trans_a ? " trans_a" : "") << ", b ";
  print_dims(c.b, os);
  *os << (c.trans_b ? " trans_b" : "");
}

// The offset of the matrix of an operand with batch dims `own` (padded to
// y's) for y's batch index `i`: broadcast dims (1) stay at 0.
int64_t operand_matrix(int64_t i, const std::vector<int64_t>& batch,
                       const std::vector<int64_t>& own) {
  int64_t idx = 0, step = 1;
  for (size_t d = batch.size(); d-- > 0;) {
    const int64_t coord = i % batch[d];
    i /= batch[d];
    if (own[d] != 1) idx += coord * step;
    step *= own[d];
  }
  return idx;
}

std::vector<double> matmul_ref(const MatMulShape& d, const std::vector<double>& a,
                               const std::vector<double>& b) {
  const int64_t m = d.m, n = d.n, k = d.k;
  std::vector<double> y(static_cast<size_t>(d.batch_count() * m * n));
  for (int64_t p = 0; p < d.batch_count(); ++p) {
    const double* am = a.data() + operand_matrix(p, d.batch, d.a_batch) * m * k;
    const double* bm = b.data() + operand_matrix(p, d.batch, d.b_batch) * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q) {
          const double av = d.trans_a ? am[q * m + i] : am[i * k + q];
          const double bv = d.trans_b ? bm[j * k + q] : bm[q * n + j];
          s += av * bv;
        }
        y[static_cast<size_t>((p * m + i) * n + j)] = s;
      }
    }
  }
  return y;
}

Attrs flags(bool trans_a, bool trans_b) {
  return {{"trans_a", int64_t{trans_a ? 1 : 0}}, {"trans_b", int64_t{trans_b ? 1 : 0}}};
}

class MatMulKernelTest : public ::testing::TestWithParam<Case> {
 protected:
  CpuKernelContext ctx_ = testing::make_context();
};

TEST_P(MatMulKernelTest, MatchesNaiveLoopAndRepeatsBitForBit) {
  const Case& c = GetParam();
  auto d = matmul_shape(c.a, c.b, c.trans_a, c.trans_b);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->out_shape(), c.y);
  std::mt19937 rng = testing::seeded_rng(1234, "matmul");
  Buffers in = {testing::random_vector(rng, num_elements(c.a)),
                testing::random_vector(rng, num_elements(c.b))};
  const KernelSpec spec =
      make_spec(OpKind::kMatMul, {c.a, c.b}, {c.y}, flags(c.trans_a, c.trans_b));
  auto y = run_spec(spec, in, ctx_);
  ASSERT_TRUE(y.ok()) << y.status();
  const auto want = matmul_ref(*d, testing::to_double(in[0]), testing::to_double(in[1]));
  EXPECT_LT(testing::max_rel_error((*y)[0], want), kTol);
  auto again = run_spec(spec, in, ctx_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(testing::bit_identical(*y, *again));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatMulKernelTest,
    ::testing::Values(Case{{5, 3}, {3, 7}, false, false, {5, 7}},
                      Case{{3, 5}, {7, 3}, true, true, {5, 7}},
                      Case{{2, 3, 5, 4}, {2, 3, 4, 6}, false, false, {2, 3, 5, 6}},
                      Case{{2, 3, 4, 5}, {2, 3, 6, 4}, true, true, {2, 3, 5, 6}},
                      Case{{2, 5, 4}, {2, 5, 6}, true, false, {2, 4, 6}},
                      Case{{2, 5, 4}, {4, 6}, false, false, {2, 5, 6}},
                      Case{{2, 5, 4}, {6, 4}, false, true, {2, 5, 6}},
                      Case{{4, 5}, {2, 3, 4, 6}, true, false, {2, 3, 5, 6}},
                      Case{{2, 1, 5, 4}, {3, 4, 6}, false, false, {2, 3, 5, 6}},
                      Case{{3, 17, 33}, {3, 33, 19}, false, false, {3, 17, 19}}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name = "case";
      name += std::to_string(info.index);
      return name;
    });

TEST(MatMulSpec, InvalidSpecsAreRejected) {
  const CpuKernelContext ctx = testing::make_context();
  const std::vector<KernelSpec> bad = {
      make_spec(OpKind::kMatMul, {{5, 3}, {4, 7}}, {{5, 7}}, flags(false, false)),  // K
      make_spec(OpKind::kMatMul, {{5, 3}, {3, 7}}, {{5, 6}}, flags(false, false)),  // y
      make_spec(OpKind::kMatMul, {{2, 5, 3}, {4, 3, 7}}, {{4, 5, 7}}, flags(false, false)),
      make_spec(OpKind::kMatMul, {{5}, {5, 7}}, {{7}}, flags(false, false)),  // rank 1
      make_spec(OpKind::kMatMul, {{5, 3}, {3, 7}}, {{5, 7}}),                 // flags missing
  };
  for (const KernelSpec& spec : bad) {
    auto k = create_cpu_kernel(spec, ctx);
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << k.status();
    EXPECT_NE(k.status().message().find(spec.name), std::string::npos) << k.status();
  }
}

}  // namespace
}  // namespace lms::cpu
