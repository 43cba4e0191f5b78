// concat, slice, softmax, reduce_mean (and their gradients) along an axis,
// and embedding, on the CPU device through include/lms only, against loops
// written here over the [outer, axis, inner] view: random inputs with a
// fixed, printed seed; negative axes; ranks 0 to 6; out-of-range axes.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <functional>
#include <random>

#include "user_models.h"

namespace lms {
namespace {

using user::kMiB;

constexpr uint64_t kSeed = 977;

std::vector<float> random_values(const Shape& shape, std::mt19937_64& gen) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  for (float& x : v) x = u(gen);
  return v;
}

struct View {
  int64_t outer = 1, axis = 1, inner = 1;
};

View view(const Shape& s, int64_t axis) {
  const auto a = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(s.size()) : axis);
  View v;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i < a) v.outer *= s[i];
    if (i > a) v.inner *= s[i];
  }
  v.axis = s[a];
  return v;
}

// Runs `graph` once on a fresh CPU device and returns the fetched tensors.
absl::StatusOr<StepResult> run_once(const Graph& graph, const Feeds& feeds,
                                    const std::vector<std::string>& fetches,
                                    const Int64Feeds& ids = {}) {
  LMS_ASSIGN_OR_RETURN(auto device,
                       make_cpu_device({.capacity_bytes = 64 * kMiB, .host_pool_bytes = kMiB}));
  LMS_ASSIGN_OR_RETURN(auto session, Session::create(graph, *device, {.fetches = fetches}));
  StepResult r;
  LMS_RETURN_IF_ERROR(session->run(feeds, ids, &r));
  return r;
}

// Bitwise for copies; softmax and means within a few float ulps of the
// loops here (these sum in another order than the kernels may).
void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::fabs(want[i]))) << "element " << i;
  }
}

struct AxisCase {
  Shape shape;
  int64_t axis;
};

// Ranks 1 to 6, positive and negative axes, first, middle and last.
const std::vector<AxisCase>& axis_cases() {
  static const std::vector<AxisCase> cases = {
      {{7}, 0},
      {{7}, -1},
      {{3, 5}, 0},
      {{3, 5}, -1},
      {{2, 3, 4}, -1},
      {{2, 3, 4}, 1},
      {{2, 3, 4}, -3},
      {{2, 3, 2, 5}, 2},
      {{2, 1, 3, 2, 4}, -2},
      {{2, 3, 1, 2, 2, 3}, 5},
      {{2, 3, 1, 2, 2, 3}, -6},
      {{2, 3, 1, 2, 2, 3}, 1},
  };
  return cases;
}

TEST(AxisOps, ConcatAndSliceCopyAlongTheAxis) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  std::mt19937_64 gen(kSeed);
  for (const AxisCase& c : axis_cases()) {
    SCOPED_TRACE(testing::Message() << "rank " << c.shape.size() << " axis " << c.axis);
    const View v = view(c.shape, c.axis);
    Shape other = c.shape;
    const size_t a =
        static_cast<size_t>(c.axis < 0 ? c.axis + static_cast<int64_t>(c.shape.size()) : c.axis);
    other[a] = 2;
    Graph g;
    const TensorId x = g.input("x", c.shape);
    const TensorId z = g.input("z", other);
    concat(g, "cat", {x, z}, c.axis);
    const int64_t begin = v.axis > 1 ? 1 : 0, size = v.axis > 1 ? v.axis - 1 : 1;
    slice(g, "sl", x, begin, size, c.axis);
    ASSERT_TRUE(g.status().ok()) << g.status();
    const Feeds feeds = {{"x", random_values(c.shape, gen)}, {"z", random_values(other, gen)}};
    auto out = run_once(g, feeds, {"cat", "sl"});
    ASSERT_TRUE(out.ok()) << out.status();
    const std::vector<float>& xv = feeds.at("x");
    const std::vector<float>& zv = feeds.at("z");
    std::vector<float> cat, sl;
    for (int64_t o = 0; o < v.outer; ++o) {
      for (int64_t j = 0; j < v.axis; ++j)
        for (int64_t i = 0; i < v.inner; ++i) cat.push_back(xv[(o * v.axis + j) * v.inner + i]);
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t i = 0; i < v.inner; ++i) cat.push_back(zv[(o * 2 + j) * v.inner + i]);
      for (int64_t j = begin; j < begin + size; ++j)
        for (int64_t i = 0; i < v.inner; ++i) sl.push_back(xv[(o * v.axis + j) * v.inner + i]);
    }
    EXPECT_TRUE(user::same_bits(out->fetched.at("cat"), cat));
    EXPECT_TRUE(user::same_bits(out->fetched.at("sl"), sl));
  }
}

TEST(AxisOps, SoftmaxAndMeanAlongTheAxis) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  std::mt19937_64 gen(kSeed + 1);
  for (const AxisCase& c : axis_cases()) {
    SCOPED_TRACE(testing::Message() << "rank " << c.shape.size() << " axis " << c.axis);
    const View v = view(c.shape, c.axis);
    Graph g;
    const TensorId x = g.input("x", c.shape);
    softmax(g, "sm", x, c.axis);
    reduce_mean(g, "mean", x, c.axis);
    ASSERT_TRUE(g.status().ok()) << g.status();
    const Feeds feeds = {{"x", random_values(c.shape, gen)}};
    auto out = run_once(g, feeds, {"sm", "mean"});
    ASSERT_TRUE(out.ok()) << out.status();
    const std::vector<float>& xv = feeds.at("x");
    std::vector<float> sm(xv.size()), mean;
    for (int64_t o = 0; o < v.outer; ++o) {
      for (int64_t i = 0; i < v.inner; ++i) {
        auto at = [&](int64_t j) { return (o * v.axis + j) * v.inner + i; };
        double mx = -INFINITY, sum = 0, total = 0;
        for (int64_t j = 0; j < v.axis; ++j) mx = std::max(mx, double{xv[at(j)]});
        for (int64_t j = 0; j < v.axis; ++j) sum += std::exp(xv[at(j)] - mx);
        for (int64_t j = 0; j < v.axis; ++j) {
          sm[at(j)] = static_cast<float>(std::exp(xv[at(j)] - mx) / sum);
          total += xv[at(j)];
        }
        mean.push_back(static_cast<float>(total / static_cast<double>(v.axis)));
      }
    }
    expect_near(out->fetched.at("sm"), sm, 1e-5f);
    expect_near(out->fetched.at("mean"), mean, 1e-6f);
  }
}

// The gradients along an axis: reduce_mean_bwd broadcasts dy / A;
// softmax_bwd is y * (dy - sum_axis(dy * y)).
TEST(AxisOps, GradientsAlongTheAxis) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  std::mt19937_64 gen(kSeed + 2);
  const Shape shape = {2, 3, 4};
  for (int64_t axis : {-1, 0, 1}) {
    SCOPED_TRACE(testing::Message() << "axis " << axis);
    const View v = view(shape, axis);
    Shape reduced = shape;
    reduced[static_cast<size_t>(axis < 0 ? axis + 3 : axis)] = 1;
    Graph g;
    const TensorId dm = g.input("dm", reduced);
    const TensorId y = g.input("y", shape);
    const TensorId dy = g.input("dy", shape);
    g.add1(OpKind::kReduceMeanBwd, "mean_bwd", {dm}, {{"input_shape", shape}, {"axis", axis}});
    g.add1(OpKind::kSoftmaxBwd, "sm_bwd", {y, dy}, {{"axis", axis}});
    ASSERT_TRUE(g.status().ok()) << g.status();
    const Feeds feeds = {{"dm", random_values(reduced, gen)},
                         {"y", random_values(shape, gen)},
                         {"dy", random_values(shape, gen)}};
    auto out = run_once(g, feeds, {"mean_bwd", "sm_bwd"});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<float> mean_bwd(num_elements(shape)), sm_bwd(num_elements(shape));
    const auto& yv = feeds.at("y");
    const auto& dyv = feeds.at("dy");
    for (int64_t o = 0; o < v.outer; ++o) {
      for (int64_t i = 0; i < v.inner; ++i) {
        auto at = [&](int64_t j) { return (o * v.axis + j) * v.inner + i; };
        double dot = 0;
        for (int64_t j = 0; j < v.axis; ++j) dot += double{dyv[at(j)]} * yv[at(j)];
        for (int64_t j = 0; j < v.axis; ++j) {
          mean_bwd[at(j)] =
              static_cast<float>(feeds.at("dm")[o * v.inner + i] / static_cast<double>(v.axis));
          sm_bwd[at(j)] = static_cast<float>(yv[at(j)] * (dyv[at(j)] - dot));
        }
      }
    }
    EXPECT_TRUE(user::same_bits(out->fetched.at("mean_bwd"), mean_bwd));
    expect_near(out->fetched.at("sm_bwd"), sm_bwd, 1e-5f);
  }
}

// Rank 0 (a scalar) runs through ops without an axis; ops with one refuse it.
TEST(AxisOps, RankZero) {
  Graph g;
  const TensorId x = g.input("x", {});
  scale(g, "twice", x, 2.0);
  reduce_mean(g, "mean", x);
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto out = run_once(g, {{"x", {1.5f}}}, {"twice", "mean"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->fetched.at("twice"), std::vector<float>{3.0f});
  EXPECT_EQ(out->fetched.at("mean"), std::vector<float>{1.5f});

  Graph h;
  softmax(h, "sm", h.input("s", {}), 0);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("node 'sm'"), absl::string_view::npos) << h.status();
  EXPECT_NE(h.status().message().find("has no axis"), absl::string_view::npos) << h.status();
}

// An axis out of [-rank, rank-1] is an InvalidArgument naming the node, the
// axis and the allowed range.
TEST(AxisOps, OutOfRangeAxisNamesNodeAxisAndRange) {
  struct Bad {
    std::string node;
    std::function<TensorId(Graph&, TensorId)> add;
  };
  const std::vector<Bad> cases = {
      {"cat",
       [](Graph& g, TensorId x) {
         return concat(g, "cat", {x, x}, 3);
       }},
      {"sl", [](Graph& g, TensorId x) { return slice(g, "sl", x, 0, 1, -4); }},
      {"sm", [](Graph& g, TensorId x) { return softmax(g, "sm", x, 3); }},
      {"mean", [](Graph& g, TensorId x) { return reduce_mean(g, "mean", x, -4); }},
  };
  for (const Bad& c : cases) {
    Graph g;
    EXPECT_EQ(c.add(g, g.input("x", {2, 3, 4})), kNoTensor);
    const absl::Status& s = g.status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("node '" + c.node + "'"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("out of range [-3, 2]"), absl::string_view::npos) << s;
  }
}

// embedding picks rows; embedding_bwd sums the rows of dy per id in order of
// position; the int64 ids are an input of their own dtype.
TEST(AxisOps, EmbeddingAndItsGradient) {
  std::printf("seed %" PRIu64 "\n", kSeed);
  std::mt19937_64 gen(kSeed + 3);
  constexpr int64_t kRows = 5, kDim = 3;
  const Shape ids_shape = {2, 2, 3};  // rank 3 ids, rank 4 output
  Graph g;
  const TensorId ids = g.input("ids", ids_shape, DType::kInt64);
  const TensorId table = g.input("table", {kRows, kDim});
  const TensorId dy = g.input("dy", {2, 2, 3, kDim});
  embedding(g, "emb", ids, table);
  g.add1(OpKind::kEmbeddingBwd, "emb_bwd", {ids, dy},
         {{"weight_shape", std::vector<int64_t>{kRows, kDim}}});
  ASSERT_TRUE(g.status().ok()) << g.status();
  std::uniform_int_distribution<int64_t> row(0, kRows - 2);  // the last row unused
  std::vector<int64_t> id_values(num_elements(ids_shape));
  for (int64_t& id : id_values) id = row(gen);
  const Feeds feeds = {{"table", random_values({kRows, kDim}, gen)},
                       {"dy", random_values({2, 2, 3, kDim}, gen)}};
  auto out = run_once(g, feeds, {"emb", "emb_bwd", "ids"}, {{"ids", id_values}});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<float> y, dtable(kRows * kDim, 0.0f);
  for (size_t p = 0; p < id_values.size(); ++p) {
    for (int64_t d = 0; d < kDim; ++d) {
      y.push_back(feeds.at("table")[id_values[p] * kDim + d]);
      dtable[id_values[p] * kDim + d] += feeds.at("dy")[p * kDim + d];
    }
  }
  EXPECT_TRUE(user::same_bits(out->fetched.at("emb"), y));
  EXPECT_TRUE(user::same_bits(out->fetched.at("emb_bwd"), dtable));
  EXPECT_EQ(out->fetched_int64.at("ids"), id_values);  // an int64 fetch

  // A float input where the ids must be int64 is refused when the node is added.
  Graph h;
  embedding(h, "emb", h.input("ids", {4}), h.input("table", {kRows, kDim}));
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("input 0 'ids' has dtype f32"), absl::string_view::npos)
      << h.status();
}

}  // namespace
}  // namespace lms
