// upsample / upsample_bwd and max_pool / max_pool_bwd kernels against naive
// double-precision references; linear upsample_bwd as the adjoint of the
// forward; first-maximum gradient routing under ties; invalid specs.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "spatial_test_util.h"

namespace lms::cpu::testing {
namespace {

using Taps = std::vector<std::pair<int64_t, double>>;  // (input index, weight)

// Source taps of output position o along one dim: nearest takes o / scale;
// linear uses half-pixel centres, s = (o + 0.5) / scale - 0.5, clamped to
// the edge (as oneDNN resampling_linear).
Taps upsample_taps(int64_t o, int64_t in, int64_t scale, bool linear) {
  if (!linear) return {{o / scale, 1.0}};
  double s = (o + 0.5) / scale - 0.5;
  int64_t i0 = static_cast<int64_t>(std::floor(s));
  double frac = s - i0;
  auto clamp = [&](int64_t i) { return std::min(std::max<int64_t>(i, 0), in - 1); };
  return {{clamp(i0), 1.0 - frac}, {clamp(i0 + 1), frac}};
}

// Shapes padded to 3 spatial dims.
std::array<int64_t, 3> spatial3(const Shape& s) {
  std::array<int64_t, 3> a = {1, 1, 1};
  for (size_t i = 2; i < s.size(); ++i) a[3 - (s.size() - i)] = s[i];
  return a;
}

// Calls f(xi, yi, weight) for every term of y = upsample(x).
template <class F>
void visit_upsample(const Shape& x, const std::vector<int64_t>& scale, bool linear, F f) {
  std::array<int64_t, 3> in = spatial3(x), sc = {1, 1, 1};
  for (size_t i = 0; i < scale.size(); ++i) sc[3 - scale.size() + i] = scale[i];
  std::array<int64_t, 3> out = {in[0] * sc[0], in[1] * sc[1], in[2] * sc[2]};
  for (int64_t nc = 0; nc < x[0] * x[1]; ++nc)
    for (int64_t od = 0; od < out[0]; ++od)
      for (int64_t oh = 0; oh < out[1]; ++oh)
        for (int64_t ow = 0; ow < out[2]; ++ow) {
          int64_t yi = ((nc * out[0] + od) * out[1] + oh) * out[2] + ow;
          for (auto [id, wd] : upsample_taps(od, in[0], sc[0], linear))
            for (auto [ih, wh] : upsample_taps(oh, in[1], sc[1], linear))
              for (auto [iw, ww] : upsample_taps(ow, in[2], sc[2], linear))
                f(((nc * in[0] + id) * in[1] + ih) * in[2] + iw, yi, wd * wh * ww);
        }
}

struct UpsampleCase {
  std::string name;
  Shape x;
  std::vector<int64_t> scale;
  bool linear;
  Shape y() const {
    Shape y = x;
    for (size_t i = 0; i < scale.size(); ++i) y[2 + i] *= scale[i];
    return y;
  }
  Attrs attrs() const {
    return {{"scale", scale}, {"mode", std::string(linear ? "linear" : "nearest")}};
  }
};

void PrintTo(const UpsampleCase& c, std::ostream* os) { *os << c.name; }

class UpsampleKernelTest : public ::testing::TestWithParam<UpsampleCase> {};

TEST_P(UpsampleKernelTest, ForwardAndAdjointMatchReference) {
  const UpsampleCase& uc = GetParam();
  std::mt19937 rng = seeded_rng(2024 + static_cast<uint32_t>(uc.x.size() * 10 + uc.linear));
  auto x = random_values(num_elements(uc.x), rng);
  auto r = random_values(num_elements(uc.y()), rng);
  KernelSpec fwd{uc.name + "/fwd", OpKind::kUpsample, uc.attrs(), {uc.x}, {uc.y()}};
  KernelSpec bwd{uc.name + "/bwd", OpKind::kUpsampleBwd, uc.attrs(), {uc.y()}, {uc.x}};
  bwd.attrs["input_shape"] = uc.x;
  auto y = run_spec(fwd, {x});
  auto dx = run_spec(bwd, {r});
  ASSERT_EQ(y.size(), 1u);
  ASSERT_EQ(dx.size(), 1u);

  std::vector<double> y_ref(y[0].size(), 0.0), y_scale(y[0].size(), 0.0);
  std::vector<double> dx_ref(dx[0].size(), 0.0), dx_scale(dx[0].size(), 0.0);
  visit_upsample(uc.x, uc.scale, uc.linear, [&](int64_t xi, int64_t yi, double w) {
    y_ref[yi] += w * x[xi], y_scale[yi] += std::fabs(w * x[xi]);
    dx_ref[xi] += w * r[yi], dx_scale[xi] += std::fabs(w * r[yi]);
  });
  expect_close(y[0], y_ref, y_scale, 1e-6, "upsample y");
  expect_close(dx[0], dx_ref, dx_scale, 1e-6, "upsample_bwd dx");

  // <upsample(x), r> == <x, upsample_bwd(r)>: the backward is the adjoint.
  double lhs = 0, rhs = 0, mag = 0;
  for (size_t i = 0; i < r.size(); ++i) lhs += double(y[0][i]) * r[i], mag += std::fabs(y[0][i]);
  for (size_t i = 0; i < x.size(); ++i) rhs += double(x[i]) * dx[0][i];
  EXPECT_NEAR(lhs, rhs, 1e-5 * mag) << "upsample_bwd is not the adjoint of upsample";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, UpsampleKernelTest,
    ::testing::Values(UpsampleCase{"nearest2d_x2", {2, 3, 5, 4}, {2, 2}, false},
                      UpsampleCase{"nearest2d_x3x2", {1, 2, 4, 5}, {3, 2}, false},
                      UpsampleCase{"linear2d_x2", {2, 3, 5, 4}, {2, 2}, true},
                      UpsampleCase{"linear2d_x3x1", {1, 2, 4, 5}, {3, 1}, true},
                      UpsampleCase{"nearest3d_x2", {1, 2, 3, 4, 3}, {2, 2, 2}, false},
                      UpsampleCase{"linear3d_x2", {2, 2, 3, 4, 3}, {2, 2, 2}, true}),
    [](const auto& info) { return info.param.name; });

struct PoolCase {
  std::string name;
  Shape x;
  std::vector<int64_t> kernel, stride, pad;
  Shape y() const {
    Shape y = x;
    for (size_t i = 0; i < kernel.size(); ++i) {
      y[2 + i] = (x[2 + i] + 2 * pad[i] - kernel[i]) / stride[i] + 1;
    }
    return y;
  }
  Attrs attrs() const { return {{"kernel", kernel}, {"stride", stride}, {"pad", pad}}; }
};

void PrintTo(const PoolCase& c, std::ostream* os) { *os << c.name; }

// For every output element: the flat input index of the first maximum of its
// window (window order kd, kh, kw; padding never wins).
std::vector<int64_t> ref_argmax(const PoolCase& pc, const std::vector<float>& x) {
  int r = static_cast<int>(pc.kernel.size()), off = 3 - r;
  std::array<int64_t, 3> in = spatial3(pc.x), out = spatial3(pc.y());
  std::array<int64_t, 3> k = {1, 1, 1}, s = {1, 1, 1}, p = {0, 0, 0};
  for (int i = 0; i < r; ++i) k[off + i] = pc.kernel[i], s[off + i] = pc.stride[i];
  for (int i = 0; i < r; ++i) p[off + i] = pc.pad[i];
  std::vector<int64_t> arg;
  for (int64_t nc = 0; nc < pc.x[0] * pc.x[1]; ++nc)
    for (int64_t od = 0; od < out[0]; ++od)
      for (int64_t oh = 0; oh < out[1]; ++oh)
        for (int64_t ow = 0; ow < out[2]; ++ow) {
          int64_t best = -1;
          for (int64_t t = 0; t < k[0] * k[1] * k[2]; ++t) {
            int64_t id = od * s[0] - p[0] + t / (k[1] * k[2]);
            int64_t ih = oh * s[1] - p[1] + t / k[2] % k[1];
            int64_t iw = ow * s[2] - p[2] + t % k[2];
            if (id < 0 || ih < 0 || iw < 0 || id >= in[0] || ih >= in[1] || iw >= in[2]) continue;
            int64_t xi = ((nc * in[0] + id) * in[1] + ih) * in[2] + iw;
            if (best < 0 || x[xi] > x[best]) best = xi;
          }
          arg.push_back(best);
        }
  return arg;
}

class MaxPoolKernelTest : public ::testing::TestWithParam<std::tuple<PoolCase, bool>> {};

TEST_P(MaxPoolKernelTest, ForwardAndFirstMaximumGradient) {
  const auto& [pc, ties] = GetParam();
  std::mt19937 rng = seeded_rng(77 + static_cast<uint32_t>(pc.x.size() * 2 + ties));
  auto x = random_values(num_elements(pc.x), rng);
  // Ties: three distinct values, so most windows hold several maxima.
  if (ties) {
    for (float& v : x) v = std::floor((v + 1.f) * 1.5f);
  }
  auto dy = random_values(num_elements(pc.y()), rng);
  auto y =
      run_spec(KernelSpec{pc.name + "/fwd", OpKind::kMaxPool, pc.attrs(), {pc.x}, {pc.y()}}, {x});
  auto dx = run_spec(
      KernelSpec{pc.name + "/bwd", OpKind::kMaxPoolBwd, pc.attrs(), {pc.x, pc.y()}, {pc.x}},
      {x, dy});
  ASSERT_EQ(y.size(), 1u);
  ASSERT_EQ(dx.size(), 1u);
  std::vector<int64_t> arg = ref_argmax(pc, x);
  std::vector<double> dx_ref(x.size(), 0.0), dx_scale(x.size(), 0.0);
  for (size_t o = 0; o < arg.size(); ++o) {
    ASSERT_GE(arg[o], 0);
    EXPECT_EQ(y[0][o], x[arg[o]]) << "max_pool y[" << o << "]";
    dx_ref[arg[o]] += dy[o], dx_scale[arg[o]] += std::fabs(dy[o]);
  }
  expect_close(dx[0], dx_ref, dx_scale, 1e-6, "max_pool_bwd dx");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MaxPoolKernelTest,
    ::testing::Combine(
        ::testing::Values(PoolCase{"k3s2p1_2d", {2, 3, 9, 8}, {3, 3}, {2, 2}, {1, 1}},
                          PoolCase{"k2s2_2d", {2, 4, 8, 6}, {2, 2}, {2, 2}, {0, 0}},
                          PoolCase{"k2s2_3d", {1, 3, 4, 6, 4}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}},
                          PoolCase{"k3s1p1_3d", {1, 2, 4, 5, 3}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}}),
        ::testing::Bool()),
    [](const auto& info) {
      return std::get<0>(info.param).name + (std::get<1>(info.param) ? "_ties" : "_random");
    });

void expect_invalid(const KernelSpec& spec, const std::string& fragment) {
  CpuKernelContext ctx = make_context();
  auto k = create_cpu_kernel(spec, ctx);
  ASSERT_FALSE(k.ok()) << spec.name << " was accepted";
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << k.status();
  EXPECT_NE(k.status().message().find(spec.name), std::string::npos) << k.status();
  EXPECT_NE(k.status().message().find(fragment), std::string::npos) << k.status();
}

TEST(ResamplePoolValidation, RejectsInconsistentSpecs) {
  Shape x = {1, 2, 4, 4}, y = {1, 2, 8, 8};
  Attrs up = {{"scale", std::vector<int64_t>{2, 2}}, {"mode", std::string("nearest")}};
  Attrs bad_mode = up;
  bad_mode["mode"] = std::string("cubic");
  expect_invalid({"up_mode", OpKind::kUpsample, bad_mode, {x}, {y}}, "cubic");
  Attrs bad_scale = up;
  bad_scale["scale"] = std::vector<int64_t>{0, 2};
  expect_invalid({"up_scale", OpKind::kUpsample, bad_scale, {x}, {y}}, "scale");
  expect_invalid({"up_out", OpKind::kUpsample, up, {x}, {x}}, "output 0");
  expect_invalid({"up_bwd_noshape", OpKind::kUpsampleBwd, up, {y}, {x}}, "input_shape");
  Attrs pool = {{"kernel", std::vector<int64_t>{2, 2}},
                {"stride", std::vector<int64_t>{2, 2}},
                {"pad", std::vector<int64_t>{2, 0}}};
  expect_invalid({"pool_pad", OpKind::kMaxPool, pool, {x}, {{1, 2, 4, 2}}}, "pad");
  pool.erase("kernel");
  expect_invalid({"pool_nokernel", OpKind::kMaxPool, pool, {x}, {{1, 2, 2, 2}}}, "kernel");
  Attrs ok_pool = {{"kernel", std::vector<int64_t>{2, 2}},
                   {"stride", std::vector<int64_t>{2, 2}},
                   {"pad", std::vector<int64_t>{0, 0}}};
  expect_invalid({"pool_bwd_dy", OpKind::kMaxPoolBwd, ok_pool, {x, x}, {x}},
                 "dy [1,2,4,4] does not match the forward output [1,2,2,2]");
  expect_invalid({"pool_arity", OpKind::kMaxPoolBwd, ok_pool, {x}, {x}}, "inputs");
}

}  // namespace
}  // namespace lms::cpu::testing
