// The partition of the CUDA backend's grouped reductions (reduce_plan.h),
// checked on the host: every element of every group is read exactly once, in
// chunks in index order, with a chunk count fixed by the shape and within
// the workspace the kernels report; and a host replay of the two passes
// (thread walks, block tree, warp tree) in double against a long double
// reference. Needs no GPU.
#include "backend/cuda/reduce_plan.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_kernels.h"

namespace lms::cuda {
namespace {

struct ViewShape {
  int64_t nv, cv, s;
};

std::string describe(const ViewShape& v) {
  char text[96];
  std::snprintf(text, sizeof(text), "[%lld, %lld, %lld]", static_cast<long long>(v.nv),
                static_cast<long long>(v.cv), static_cast<long long>(v.s));
  return text;
}

// Named shapes: 3-D and 2-D batch norm, instance norm, Dice slices and
// degenerate views (S = 1, Nv = 1, empty groups).
const std::vector<ViewShape>& named_shapes() {
  static const std::vector<ViewShape> shapes = {
      {1, 32, int64_t{256} * 256 * 256},  // batch norm [1, 32, 256^3]
      {1, 32, int64_t{128} * 128 * 128},  // [1, 32, 128^3]
      {2, 64, int64_t{64} * 64 * 64},     // [2, 64, 64^3]
      {64, 64, 48 * 48},                  // batch norm [64, 64, 48, 48]
      {1, 64 * 64, 48 * 48},              // instance norm [64, 64, 48, 48]
      {2, 16, 24 * 24 * 24},              // [2, 16, 24^3]
      {1, 1, 1},
      {1, 5, 1},
      {100000, 3, 1},
      {7, 1, 3},
      {1, 1, 100003},
      {3, 2, 0},
      {0, 4, 7},
      {5, 0, 9},
  };
  return shapes;
}

// Partition properties of one plan: units cover the group, chunks are
// consecutive and in index order, none empty unless the group is, the
// count is bounded.
void check_partition(const ViewShape& v) {
  const GroupReducePlan p = plan_group_reduce(v.nv, v.cv, v.s);
  const std::string what = describe(v);
  ASSERT_EQ(p.run_elements % p.width, 0) << what;
  ASSERT_EQ(p.group_units() * p.width, v.nv * v.s) << what;
  ASSERT_GE(p.chunks, 1) << what;
  int64_t next = 0;
  for (int64_t j = 0; j < p.chunks; ++j) {
    const UnitRange r = chunk_range(p, j);
    ASSERT_EQ(r.begin, next) << what << " chunk " << j;
    ASSERT_LE(r.end - r.begin, p.chunk_units) << what << " chunk " << j;
    if (p.group_units() > 0) {
      ASSERT_GT(r.end, r.begin) << what << " chunk " << j << " is empty";
    }
    next = r.end;
  }
  ASSERT_EQ(next, p.group_units()) << what;
  if (p.chunks > 1) {
    EXPECT_LE(p.blocks(), kTargetBlocks + p.groups) << what;
    EXPECT_GT(p.chunk_units * p.width * 2, kMinChunkElements) << what;
  }
}

TEST(ReducePlan, PartitionOfNamedAndRandomShapes) {
  for (const ViewShape& v : named_shapes()) check_partition(v);
  constexpr uint32_t kSeed = 20240611;
  std::printf("random shapes seed %u\n", kSeed);
  std::mt19937 rng(kSeed);
  std::uniform_int_distribution<int64_t> nv(1, 70), cv(1, 300), s(1, 70000);
  for (int i = 0; i < 2000; ++i) check_partition({nv(rng), cv(rng), s(rng)});
}

// Golden plans: the rule of Note [Grouped reduction plan] on the shapes the
// benchmark times. Each is planned twice, with other shapes in between, and
// must come out the same: the count depends on the shape alone.
TEST(ReducePlan, GoldenChunkCounts) {
  struct Golden {
    ViewShape v;
    int64_t width, chunks, chunk_units;
  };
  const std::vector<Golden> golden = {
      // M = 2^24: min(2048 by size, 64 by blocks) = 64 chunks of 2^18 floats.
      {{1, 32, int64_t{256} * 256 * 256}, 4, 64, 65536},
      {{1, 32, int64_t{128} * 128 * 128}, 4, 64, 8192},
      {{2, 64, int64_t{64} * 64 * 64}, 4, 32, 4096},
      // M = 147456: min(18, 32) = 18 chunks of 8192 floats.
      {{64, 64, 48 * 48}, 4, 18, 2048},
      {{1, 64 * 64, 48 * 48}, 4, 1, 576},
      {{2, 16, 24 * 24 * 24}, 4, 4, 1728},
      {{1, 32, 24 * 24 * 24}, 4, 2, 1728},
      {{100000, 3, 1}, 1, 13, 7693},
      {{1, 5, 1}, 1, 1, 1},
      {{0, 4, 7}, 1, 1, 0},
  };
  std::vector<GroupReducePlan> first;
  for (const Golden& g : golden) first.push_back(plan_group_reduce(g.v.nv, g.v.cv, g.v.s));
  for (size_t i = golden.size(); i-- > 0;) {
    const Golden& g = golden[i];
    const GroupReducePlan p = plan_group_reduce(g.v.nv, g.v.cv, g.v.s);
    const std::string what = describe(g.v);
    EXPECT_EQ(p.width, g.width) << what;
    EXPECT_EQ(p.chunks, g.chunks) << what;
    EXPECT_EQ(p.chunk_units, g.chunk_units) << what;
    EXPECT_EQ(0, std::memcmp(&p, &first[i], sizeof(p))) << what;
  }
}

// Replays every thread's walk (UnitCursor, as the kernel steps it) over the
// whole [nv, cv, s] tensor and counts the reads of each element.
void check_every_element_read_once(const ViewShape& v) {
  const GroupReducePlan p = plan_group_reduce(v.nv, v.cv, v.s);
  std::vector<int> reads(static_cast<size_t>(v.nv * v.cv * v.s), 0);
  for (int64_t g = 0; g < p.groups; ++g) {
    for (int64_t j = 0; j < p.chunks; ++j) {
      const UnitRange r = chunk_range(p, j);
      for (int64_t u0 = r.begin; u0 < r.end && u0 < r.begin + kReduceThreads; ++u0) {
        UnitCursor at(p, g, u0);
        for (int64_t u = u0; u < r.end; u += kReduceThreads, at.advance(kReduceThreads)) {
          const int64_t e = at.element();
          ASSERT_EQ((e / v.s) % v.cv, g) << describe(v) << " element " << e << " not in group";
          for (int64_t k = 0; k < p.width; ++k) ++reads[static_cast<size_t>(e + k)];
        }
      }
    }
  }
  for (size_t i = 0; i < reads.size(); ++i) {
    ASSERT_EQ(reads[i], 1) << describe(v) << " element " << i;
  }
}

TEST(ReducePlan, WalkReadsEveryElementOnce) {
  for (const ViewShape& v : named_shapes()) {
    if (v.nv * v.cv * v.s <= (int64_t{1} << 22)) check_every_element_read_once(v);
  }
  constexpr uint32_t kSeed = 777;
  std::printf("random walk shapes seed %u\n", kSeed);
  std::mt19937 rng(kSeed);
  std::uniform_int_distribution<int64_t> nv(1, 9), cv(1, 40), s(1, 20000);
  for (int i = 0; i < 40; ++i) check_every_element_read_once({nv(rng), cv(rng), s(rng)});
}

// The kernels' workspace: their own per-group doubles, then exactly the
// partials of their plan (norm: 2 values per block; Dice: 3).
uint64_t workspace_of(const KernelSpec& spec) {
  auto kernel = create_cuda_kernel(spec, CudaKernelContext{});
  EXPECT_TRUE(kernel.ok()) << kernel.status();
  return kernel.ok() ? (*kernel)->workspace_bytes() : 0;
}

TEST(ReducePlan, NormAndDiceWorkspaceHoldsThePartials) {
  const std::vector<Shape> shapes = {{1, 32, 128, 128, 128},
                                     {2, 64, 64, 64, 64},
                                     {64, 64, 48, 48},
                                     {2, 16, 24, 24, 24},
                                     {3, 5, 7}};
  const Attrs eps = {{"eps", 1e-5}};
  for (const Shape& x : shapes) {
    const int64_t n = x[0], c = x[1], s = num_elements(x) / (n * c);
    const Shape ch = {c};
    for (bool instance : {false, true}) {
      const OpKind op = instance ? OpKind::kInstanceNorm : OpKind::kBatchNorm;
      const OpKind bwd = instance ? OpKind::kInstanceNormBwd : OpKind::kBatchNormBwd;
      const int64_t nv = instance ? 1 : n, cv = instance ? n * c : c;
      const uint64_t partials = partial_bytes(plan_group_reduce(nv, cv, s), 2);
      const uint64_t stats = static_cast<uint64_t>(cv) * sizeof(double);
      EXPECT_EQ(workspace_of({"fwd", op, eps, {x, ch, ch}, {x}}), 2 * stats + partials)
          << op_name(op);
      EXPECT_EQ(workspace_of({"bwd", bwd, eps, {x, ch, x}, {x, ch, ch}}), 4 * stats + partials)
          << op_name(op);
    }
    const uint64_t dice = (3 * static_cast<uint64_t>(n * c)) * sizeof(double) +
                          partial_bytes(plan_group_reduce(1, n * c, s), 3);
    const Attrs d = {{"eps", 1.0}};
    EXPECT_EQ(workspace_of({"dice", OpKind::kSoftDiceLoss, d, {x, x}, {{}}}), dice);
    EXPECT_EQ(workspace_of({"dice_bwd", OpKind::kSoftDiceLossBwd, d, {x, x, {}}, {x}}), dice);
  }
}

// ---- Host replay of the two passes ----

// The fixed tree of detail::block_sum and of the warp's __shfl_down_sync
// loop: at each halving, slot i < half adds slot i + half.
template <size_t N>
double tree_sum(std::array<double, N> a) {
  for (size_t half = N / 2; half > 0; half /= 2) {
    for (size_t i = 0; i < half; ++i) a[i] += a[i + half];
  }
  return a[0];
}

// Sum over group g of term(x) as the kernels form it: per-thread sums along
// the walk, the block tree per chunk, then the lanes and the warp tree.
double replay_group_sum(const GroupReducePlan& p, const std::vector<float>& x, int64_t g,
                        const std::function<double(float)>& term) {
  std::array<double, kFinishLanes> lanes{};
  for (int64_t j = 0; j < p.chunks; ++j) {
    const UnitRange r = chunk_range(p, j);
    std::array<double, kReduceThreads> acc{};
    for (int64_t t = 0; t < kReduceThreads && r.begin + t < r.end; ++t) {
      UnitCursor at(p, g, r.begin + t);
      for (int64_t u = r.begin + t; u < r.end; u += kReduceThreads, at.advance(kReduceThreads)) {
        for (int64_t k = 0; k < p.width; ++k) acc[t] += term(x[at.element() + k]);
      }
    }
    lanes[j % kFinishLanes] += tree_sum(acc);
  }
  return tree_sum(lanes);
}

std::vector<float> random_floats(int64_t n, float mean, float half_width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(mean - half_width, mean + half_width);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

long double reference_group_sum(const ViewShape& v, const std::vector<float>& x, int64_t g) {
  long double sum = 0;
  for (int64_t n = 0; n < v.nv; ++n) {
    for (int64_t s = 0; s < v.s; ++s) sum += x[static_cast<size_t>((n * v.cv + g) * v.s + s)];
  }
  return sum;
}

TEST(ReducePlan, ReplayedSumMatchesLongDoubleAndRepeatsBitForBit) {
  const std::vector<ViewShape> shapes = {
      {2, 16, 24 * 24 * 24}, {1, 2, 200003}, {3, 5, 1001}, {300, 2, 1}, {1, 3, 4}};
  constexpr uint32_t kSeed = 4242;
  std::printf("replay data seed %u\n", kSeed);
  const auto identity = [](float f) { return static_cast<double>(f); };
  for (const ViewShape& v : shapes) {
    const GroupReducePlan p = plan_group_reduce(v.nv, v.cv, v.s);
    const std::vector<float> x = random_floats(v.nv * v.cv * v.s, 0.25f, 1.0f, kSeed);
    for (int64_t g = 0; g < v.cv; ++g) {
      const double got = replay_group_sum(p, x, g, identity);
      const long double want = reference_group_sum(v, x, g);
      const double scale = 1.25 * static_cast<double>(v.nv * v.s);  // bound of sum |x|
      EXPECT_NEAR(got, static_cast<double>(want), 1e-13 * scale) << describe(v) << " group " << g;
      const double again = replay_group_sum(p, x, g, identity);
      EXPECT_EQ(0, std::memcmp(&got, &again, sizeof(got))) << describe(v) << " group " << g;
    }
  }
}

// Data far from zero relative to its spread (mean 1000, spread 0.01): the
// shifted sums keep the variance to a relative 1e-9, where sum x^2/M -
// mean^2 would lose it to cancellation.
TEST(ReducePlan, ShiftedMomentsOfOffsetData) {
  const ViewShape v = {2, 3, 24 * 24 * 24};
  const GroupReducePlan p = plan_group_reduce(v.nv, v.cv, v.s);
  ASSERT_GT(p.chunks, 1);
  constexpr uint32_t kSeed = 99;
  std::printf("offset data seed %u\n", kSeed);
  const std::vector<float> x = random_floats(v.nv * v.cv * v.s, 1000.0f, 0.01f, kSeed);
  for (int64_t g = 0; g < v.cv; ++g) {
    const double c = x[static_cast<size_t>(g * v.s)];  // the kernel's centre
    const double s1 = replay_group_sum(p, x, g, [c](float f) { return f - c; });
    const double s2 = replay_group_sum(p, x, g, [c](float f) { return (f - c) * (f - c); });
    const double m = static_cast<double>(v.nv * v.s);
    const Moments got = shifted_moments(c, s1, s2, m);
    const long double mean = reference_group_sum(v, x, g) / m;
    long double var = 0;
    for (int64_t n = 0; n < v.nv; ++n) {
      for (int64_t s = 0; s < v.s; ++s) {
        const long double d = x[static_cast<size_t>((n * v.cv + g) * v.s + s)] - mean;
        var += d * d;
      }
    }
    var /= m;
    EXPECT_NEAR(got.mean, static_cast<double>(mean), 1e-12 * 1000) << "group " << g;
    EXPECT_NEAR(got.var, static_cast<double>(var), 1e-9 * static_cast<double>(var))
        << "group " << g;
  }
}

}  // namespace
}  // namespace lms::cuda
