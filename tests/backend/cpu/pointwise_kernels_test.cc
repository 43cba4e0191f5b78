// Element-wise, activation, softmax, concat / slice / fill kernels of the CPU
// device against naive double-precision references; backward ops against
// central finite differences (in double) of L(x) = sum(f(x) * r), r random.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/dropout_hash.h"
#include "gtest/gtest.h"
#include "pointwise_test_util.h"

namespace lms::cpu {
namespace {

using testing::Buffers;
using testing::make_spec;
using testing::run_spec;

// float vs double rounding of one element-wise op (a few ulps of float).
constexpr double kFwdTol = 1e-6;
// Float backward vs finite differences of the double reference (h = 1e-4).
constexpr double kBwdTol = 1e-5;

struct Activation {
  OpKind op;
  OpKind bwd;
  Attrs attrs;
  std::function<double(double)> f;
  bool bwd_takes_y;  // relu_bwd / sigmoid_bwd take the forward output
};

std::vector<Activation> activations() {
  return {
      {OpKind::kRelu, OpKind::kReluBwd, {}, [](double x) { return x > 0 ? x : 0.0; }, true},
      {OpKind::kLeakyRelu,
       OpKind::kLeakyReluBwd,
       {{"alpha", 0.01}},
       [](double x) { return x > 0 ? x : 0.01 * x; },
       false},
      {OpKind::kLeakyRelu,
       OpKind::kLeakyReluBwd,
       {{"alpha", -0.3}},
       [](double x) { return x > 0 ? x : -0.3 * x; },
       false},
      {OpKind::kSigmoid,
       OpKind::kSigmoidBwd,
       {},
       [](double x) { return 1.0 / (1.0 + std::exp(-x)); },
       true},
      {OpKind::kGelu,
       OpKind::kGeluBwd,
       {},
       [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); },
       false},
  };
}

// Values away from 0 so the kinks of (leaky) relu are not within h.
std::vector<float> away_from_zero(std::mt19937& rng, int64_t n) {
  std::vector<float> v = testing::random_vector(rng, n, -3.f, 3.f);
  for (float& x : v) x = x >= 0 ? x + 0.01f : x - 0.01f;
  return v;
}

class PointwiseTest : public ::testing::Test {
 protected:
  CpuKernelContext ctx_ = testing::make_context();
};

TEST_F(PointwiseTest, ActivationsMatchReferenceAndFiniteDifferences) {
  std::mt19937 rng = testing::seeded_rng(1234, "activations");
  const Shape shape = {2, 3, 5, 7};
  const int64_t n = num_elements(shape);
  for (const Activation& act : activations()) {
    SCOPED_TRACE(op_name(act.op));
    Buffers in = {away_from_zero(rng, n)};
    auto y = run_spec(make_spec(act.op, {shape}, {shape}, act.attrs), in, ctx_);
    ASSERT_TRUE(y.ok()) << y.status();
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = act.f(in[0][i]);
    EXPECT_LT(testing::max_rel_error((*y)[0], want), kFwdTol);

    const std::vector<float> r = testing::random_vector(rng, n);
    Buffers bwd_in = {act.bwd_takes_y ? (*y)[0] : in[0], r};
    auto dx = run_spec(make_spec(act.bwd, {shape, shape}, {shape}, act.attrs), bwd_in, ctx_);
    ASSERT_TRUE(dx.ok()) << dx.status();
    auto loss = [&](const std::vector<double>& x) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += act.f(x[i]) * r[i];
      return s;
    };
    const std::vector<double> fd = testing::finite_diff(loss, testing::to_double(in[0]));
    EXPECT_LT(testing::max_rel_error((*dx)[0], fd), kBwdTol);
  }
}

TEST_F(PointwiseTest, ReluBackwardIsZeroWhereOutputIsZero) {
  const Shape shape = {1, 1, 2, 2};
  Buffers in = {{0.f, 2.f, 0.f, 0.5f}, {1.f, 1.f, -4.f, 3.f}};
  auto dx = run_spec(make_spec(OpKind::kReluBwd, {shape, shape}, {shape}), in, ctx_);
  ASSERT_TRUE(dx.ok()) << dx.status();
  EXPECT_EQ((*dx)[0], (std::vector<float>{0.f, 1.f, 0.f, 3.f}));
}

double softmax_ref_loss(const Shape& s, const std::vector<double>& x, const std::vector<float>& r,
                        std::vector<double>* y_out) {
  const int64_t c = s[1], inner = num_elements(s) / (s[0] * s[1]);
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < s[0]; ++n) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t ch) { return (n * c + ch) * inner + i; };
      double mx = -1e300, sum = 0;
      for (int64_t ch = 0; ch < c; ++ch) mx = std::max(mx, x[at(ch)]);
      for (int64_t ch = 0; ch < c; ++ch) sum += std::exp(x[at(ch)] - mx);
      for (int64_t ch = 0; ch < c; ++ch) y[at(ch)] = std::exp(x[at(ch)] - mx) / sum;
    }
  }
  if (y_out) *y_out = y;
  return testing::dot(y, r);
}

TEST_F(PointwiseTest, SoftmaxOverChannels2dAnd3d) {
  std::mt19937 rng = testing::seeded_rng(77, "softmax");
  for (const Shape& shape : {Shape{2, 5, 3, 4}, Shape{1, 3, 2, 3, 4}, Shape{4, 6}}) {
    SCOPED_TRACE(::testing::Message() << "rank " << shape.size());
    const int64_t n = num_elements(shape);
    Buffers in = {testing::random_vector(rng, n, -4.f, 4.f)};
    auto y = run_spec(make_spec(OpKind::kSoftmax, {shape}, {shape}), in, ctx_);
    ASSERT_TRUE(y.ok()) << y.status();
    const std::vector<float> r = testing::random_vector(rng, n);
    std::vector<double> want;
    softmax_ref_loss(shape, testing::to_double(in[0]), r, &want);
    EXPECT_LT(testing::max_rel_error((*y)[0], want), 1e-5);

    Buffers bwd_in = {(*y)[0], r};
    auto dx = run_spec(make_spec(OpKind::kSoftmaxBwd, {shape, shape}, {shape}), bwd_in, ctx_);
    ASSERT_TRUE(dx.ok()) << dx.status();
    auto loss = [&](const std::vector<double>& x) {
      return softmax_ref_loss(shape, x, r, nullptr);
    };
    const auto fd = testing::finite_diff(loss, testing::to_double(in[0]));
    EXPECT_LT(testing::max_rel_error((*dx)[0], fd), 1e-4);
  }
}

TEST_F(PointwiseTest, AddMulScaleAreExactFloatOps) {
  std::mt19937 rng = testing::seeded_rng(99, "add_mul_scale");
  const Shape shape = {3, 4, 5, 6, 2};
  const int64_t n = num_elements(shape);
  Buffers in = {testing::random_vector(rng, n, -10, 10), testing::random_vector(rng, n, -10, 10)};
  auto sum = run_spec(make_spec(OpKind::kAdd, {shape, shape}, {shape}), in, ctx_);
  auto prod = run_spec(make_spec(OpKind::kMul, {shape, shape}, {shape}), in, ctx_);
  Buffers one = {in[0]};
  auto scaled =
      run_spec(make_spec(OpKind::kScale, {shape}, {shape}, {{"factor", -0.75}}), one, ctx_);
  ASSERT_TRUE(sum.ok() && prod.ok() && scaled.ok());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ((*sum)[0][i], in[0][i] + in[1][i]) << i;
    ASSERT_EQ((*prod)[0][i], in[0][i] * in[1][i]) << i;
    ASSERT_FLOAT_EQ((*scaled)[0][i], -0.75f * in[0][i]) << i;
  }
}

TEST_F(PointwiseTest, ConcatThenSliceRoundTrips) {
  std::mt19937 rng = testing::seeded_rng(5, "concat_slice");
  const std::vector<int64_t> channels = {2, 5, 1};
  std::vector<Shape> shapes;
  Buffers parts;
  for (int64_t c : channels) {
    shapes.push_back({3, c, 4, 3});
    parts.push_back(testing::random_vector(rng, num_elements(shapes.back())));
  }
  const Shape y_shape = {3, 8, 4, 3};
  auto y = run_spec(make_spec(OpKind::kConcat, shapes, {y_shape}), parts, ctx_);
  ASSERT_TRUE(y.ok()) << y.status();
  // Reference layout: y[n, c0 + c, s] = part[n, c, s].
  int64_t begin = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const int64_t c = channels[p];
    for (int64_t n = 0; n < 3; ++n) {
      for (int64_t i = 0; i < c * 12; ++i) {
        ASSERT_EQ((*y)[0][(n * 8 + begin) * 12 + i], parts[p][n * c * 12 + i]);
      }
    }
    Buffers y_in = {(*y)[0]};
    auto back =
        run_spec(make_spec(OpKind::kSlice, {y_shape}, {shapes[p]}, {{"begin", begin}, {"size", c}}),
                 y_in, ctx_);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ((*back)[0], parts[p]);
    begin += c;
  }
}

// dropout and dropout_bwd apply the same mask, the one of
// backend/dropout_hash.h at the step of KernelArgs (0 here).
TEST_F(PointwiseTest, DropoutAppliesTheHashMask) {
  std::mt19937 rng = testing::seeded_rng(31, "dropout");
  const Shape shape = {5, 7, 301};
  const int64_t n = num_elements(shape);
  Buffers in = {testing::random_vector(rng, n, -2, 2)};
  const Attrs attrs = {{"ratio", 0.25}, {"seed", int64_t{42}}};
  auto y = run_spec(make_spec(OpKind::kDropout, {shape}, {shape}, attrs), in, ctx_);
  auto dx = run_spec(make_spec(OpKind::kDropoutBwd, {shape}, {shape}, attrs), in, ctx_);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_TRUE(dx.ok()) << dx.status();
  const uint64_t key = dropout_hash::step_key(42, 0);
  const uint32_t threshold = dropout_hash::threshold(0.25);
  EXPECT_EQ(threshold, 1u << 22);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = dropout_hash::bits24(key, i) >= threshold;
    kept += keep;
    ASSERT_EQ((*y)[0][i], keep ? in[0][i] * (4.0f / 3.0f) : 0.0f) << i;
  }
  EXPECT_EQ((*dx)[0], (*y)[0]);
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(n), 0.75, 0.02);
}

TEST_F(PointwiseTest, FillWritesValue) {
  Buffers none;
  auto y = run_spec(make_spec(OpKind::kFill, {}, {{2, 3}},
                              {{"shape", std::vector<int64_t>{2, 3}}, {"value", 2.5}}),
                    none, ctx_);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ((*y)[0], std::vector<float>(6, 2.5f));
}

TEST_F(PointwiseTest, RepeatedRunsAreBitIdentical) {
  std::mt19937 rng = testing::seeded_rng(31, "determinism");
  const Shape shape = {4, 16, 9, 9};
  const int64_t n = num_elements(shape);
  Buffers in = {testing::random_vector(rng, n), testing::random_vector(rng, n)};
  for (OpKind op :
       {OpKind::kSoftmaxBwd, OpKind::kSigmoidBwd, OpKind::kLeakyReluBwd, OpKind::kAdd}) {
    SCOPED_TRACE(op_name(op));
    const Attrs attrs = op == OpKind::kLeakyReluBwd ? Attrs{{"alpha", 0.1}} : Attrs{};
    const KernelSpec spec = make_spec(op, {shape, shape}, {shape}, attrs);
    auto a = run_spec(spec, in, ctx_);
    auto b = run_spec(spec, in, ctx_);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(testing::bit_identical(*a, *b));
  }
}

// Each invalid spec is rejected with InvalidArgument naming the node.
TEST_F(PointwiseTest, InvalidSpecsAreRejected) {
  const Shape s = {2, 3, 4, 4};
  const std::vector<KernelSpec> bad = {
      make_spec(OpKind::kRelu, {s, s}, {s}),                                   // arity
      make_spec(OpKind::kRelu, {s}, {{2, 3, 4, 5}}),                           // output shape
      make_spec(OpKind::kAdd, {s, {2, 3, 4, 5}}, {s}),                         // b shape
      make_spec(OpKind::kLeakyRelu, {s}, {s}),                                 // missing alpha
      make_spec(OpKind::kLeakyRelu, {s}, {s}, {{"alpha", std::string("x")}}),  // alpha type
      make_spec(OpKind::kScale, {s}, {s}, {{"factor", std::nan("")}}),         // NaN factor
      make_spec(OpKind::kSoftmax, {{12}}, {{12}}),                             // rank 1
      make_spec(OpKind::kConcat, {s, {2, 3, 5, 4}}, {{2, 6, 4, 4}}),           // spatial mismatch
      make_spec(OpKind::kConcat, {s, s}, {{2, 5, 4, 4}}),                      // sum of channels
      make_spec(OpKind::kSlice, {s}, {{2, 2, 4, 4}}, {{"begin", 2}, {"size", 2}}),  // past C
      make_spec(OpKind::kSlice, {s}, {{2, 1, 4, 4}}, {{"begin", -1}, {"size", 1}}),
      make_spec(OpKind::kFill, {}, {{2, 3}},
                {{"shape", std::vector<int64_t>{3, 2}}, {"value", 1.0}}),
      make_spec(OpKind::kRelu, {{2, 0, 4}}, {{2, 0, 4}}),  // empty dimension
  };
  for (const KernelSpec& spec : bad) {
    auto k = create_cpu_kernel(spec, ctx_);
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << op_name(spec.op);
    EXPECT_NE(k.status().message().find(spec.name), std::string::npos) << k.status();
  }
}

TEST_F(PointwiseTest, OtherFamiliesOpsAreNotHandled) {
  for (OpKind op : {OpKind::kConv, OpKind::kMaxPool, OpKind::kUpsample, OpKind::kSwapOut}) {
    auto k = create_pointwise_kernel(make_spec(op, {{1, 1, 2, 2}}, {{1, 1, 2, 2}}), ctx_);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ(*k, nullptr) << op_name(op);
  }
}

TEST_F(PointwiseTest, RunWithWrongArgumentsFails) {
  const Shape s = {1, 2, 3, 3};
  auto k = create_cpu_kernel(make_spec(OpKind::kAdd, {s, s}, {s}), ctx_);
  ASSERT_TRUE(k.ok() && *k);
  std::vector<float> a(18), y(18);
  KernelArgs args;
  args.inputs = {a.data()};
  args.outputs = {y.data()};
  EXPECT_EQ((*k)->run(args).code(), absl::StatusCode::kInvalidArgument);
  args.inputs = {a.data(), nullptr};
  EXPECT_EQ((*k)->run(args).code(), absl::StatusCode::kInvalidArgument);
}

// embedding and embedding_bwd check their int64 ids with one rule: the
// first id outside [0, V) fails the run, naming the id, its position and the
// range; in range, rows are copied and summed per id.
TEST_F(PointwiseTest, EmbeddingIdsAreCheckedByBothKernels) {
  constexpr int64_t kRows = 4, kDim = 2;
  auto ids_buffer = [](const std::vector<int64_t>& ids) {
    std::vector<float> b(ids.size() * 2);  // int64 in a float buffer, as the executor passes it
    std::memcpy(b.data(), ids.data(), ids.size() * sizeof(int64_t));
    return b;
  };
  const KernelSpec fwd = make_spec(OpKind::kEmbedding, {{2, 2}, {kRows, kDim}}, {{2, 2, kDim}});
  const KernelSpec bwd = make_spec(OpKind::kEmbeddingBwd, {{2, 2}, {2, 2, kDim}}, {{kRows, kDim}},
                                   {{"weight_shape", std::vector<int64_t>{kRows, kDim}}});
  const std::vector<float> table = {0, 1, 10, 11, 20, 21, 30, 31};
  const std::vector<float> dy = {1, 2, 3, 4, 5, 6, 7, 8};
  Buffers in = {ids_buffer({1, 3, 1, 0}), table};
  auto y = run_spec(fwd, in, ctx_);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ((*y)[0], (std::vector<float>{10, 11, 30, 31, 10, 11, 0, 1}));
  in = {ids_buffer({1, 3, 1, 0}), dy};
  auto dtable = run_spec(bwd, in, ctx_);
  ASSERT_TRUE(dtable.ok()) << dtable.status();
  EXPECT_EQ((*dtable)[0], (std::vector<float>{7, 8, 6, 8, 0, 0, 3, 4}));
  for (const KernelSpec* spec : {&fwd, &bwd}) {
    for (int64_t bad : {int64_t{-1}, kRows}) {
      Buffers args = {ids_buffer({1, 3, bad, bad}), spec == &fwd ? table : dy};
      auto r = run_spec(*spec, args, ctx_);
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << op_name(spec->op);
      const std::string want =
          "id " + std::to_string(bad) + " at position 2 is out of range [0, 4) of the table";
      EXPECT_NE(r.status().message().find(want), absl::string_view::npos) << r.status();
    }
  }
}

}  // namespace
}  // namespace lms::cpu
