// conv / deconv kernels (forward, backward data, backward weights) against a
// naive double-precision reference, in both layouts and both algorithms; finite differences;
// determinism; exact workspace accounting (canaries); invalid specs.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/kernels/spatial_plan.h"
#include "backend/cpu/kernels/winograd.h"
#include "lms/types.h"
#include "spatial_test_util.h"

namespace lms::cpu::testing {
namespace {

struct ConvCase {
  std::string name;
  bool transposed;
  Shape x;                 // [N,C,S]
  int64_t out_channels;    // K
  std::vector<int64_t> k;  // kernel extent per spatial dim
  std::vector<int64_t> stride, pad, dilation;
  bool bias;

  int rank() const { return static_cast<int>(x.size()) - 2; }
  Shape w() const {
    Shape w = transposed ? Shape{x[1], out_channels} : Shape{out_channels, x[1]};
    w.insert(w.end(), k.begin(), k.end());
    return w;
  }
  Shape y() const {
    Shape y = {x[0], out_channels};
    for (int i = 0; i < rank(); ++i) {
      int64_t s = x[2 + i];
      y.push_back(transposed ? (s - 1) * stride[i] - 2 * pad[i] + k[i]
                             : (s + 2 * pad[i] - dilation[i] * (k[i] - 1) - 1) / stride[i] + 1);
    }
    return y;
  }
  Attrs attrs() const {
    Attrs a = {{"stride", stride}, {"pad", pad}};
    if (!transposed) a["dilation"] = dilation;
    return a;
  }
  OpKind forward_op() const { return transposed ? OpKind::kDeconv : OpKind::kConv; }
  OpKind data_op() const { return transposed ? OpKind::kDeconvBwdData : OpKind::kConvBwdData; }
  OpKind weights_op() const {
    return transposed ? OpKind::kDeconvBwdWeights : OpKind::kConvBwdWeights;
  }
};

void PrintTo(const ConvCase& cc, std::ostream* os) { *os << cc.name; }

// The problem padded to 3 spatial dims (2-D gets a unit depth).
struct Geometry3 {
  int64_t n, c, kout;
  std::array<int64_t, 3> in, out, k, s, p, d;
};

Geometry3 geometry3(const ConvCase& cc) {
  Geometry3 g{cc.x[0],   cc.x[1],   cc.out_channels, {1, 1, 1}, {1, 1, 1},
              {1, 1, 1}, {1, 1, 1}, {0, 0, 0},       {1, 1, 1}};
  Shape y = cc.y();
  int off = 3 - cc.rank();
  for (int i = 0; i < cc.rank(); ++i) {
    g.in[off + i] = cc.x[2 + i], g.out[off + i] = y[2 + i], g.k[off + i] = cc.k[i];
    g.s[off + i] = cc.stride[i], g.p[off + i] = cc.pad[i], g.d[off + i] = cc.dilation[i];
  }
  return g;
}

int64_t volume(const std::array<int64_t, 3>& a) { return a[0] * a[1] * a[2]; }
int64_t flat(const std::array<int64_t, 3>& dims, const std::array<int64_t, 3>& i) {
  return (i[0] * dims[1] + i[1]) * dims[2] + i[2];
}

// Calls f(xi, wi, yi) for every product x[xi] * w[wi] that contributes to
// y[yi]: the whole bilinear map, so forward and both adjoints follow from it.
template <class F>
void visit_terms(const ConvCase& cc, F f) {
  Geometry3 g = geometry3(cc);
  std::array<int64_t, 3> in{}, out{}, kk{};
  // Conv iterates outputs and gathers inputs; deconv iterates inputs and
  // scatters to outputs (its weights are [C,K,k..]).
  const auto& outer = cc.transposed ? g.in : g.out;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t ko = 0; ko < g.kout; ++ko)
        for (int64_t o = 0; o < volume(outer); ++o)
          for (int64_t t = 0; t < volume(g.k); ++t) {
            std::array<int64_t, 3> pos = {o / (outer[1] * outer[2]), o / outer[2] % outer[1],
                                          o % outer[2]};
            kk = {t / (g.k[1] * g.k[2]), t / g.k[2] % g.k[1], t % g.k[2]};
            bool inside = true;
            for (int i = 0; i < 3; ++i) {
              int64_t other = pos[i] * g.s[i] - g.p[i] + kk[i] * g.d[i];
              (cc.transposed ? in : out)[i] = pos[i];
              (cc.transposed ? out : in)[i] = other;
              inside &= other >= 0 && other < (cc.transposed ? g.out[i] : g.in[i]);
            }
            if (!inside) continue;
            int64_t xi = (n * g.c + c) * volume(g.in) + flat(g.in, in);
            int64_t yi = (n * g.kout + ko) * volume(g.out) + flat(g.out, out);
            int64_t w_outer = cc.transposed ? c * g.kout + ko : ko * g.c + c;
            f(xi, w_outer * volume(g.k) + flat(g.k, kk), yi);
          }
}

struct Ref {
  std::vector<double> value, scale;
  explicit Ref(size_t n) : value(n, 0.0), scale(n, 0.0) {}
  void add(int64_t i, double term) { value[i] += term, scale[i] += std::fabs(term); }
};

Ref ref_forward(const ConvCase& cc, const std::vector<float>& x, const std::vector<float>& w,
                const std::vector<float>* b) {
  Shape y = cc.y();
  Ref r(num_elements(y));
  visit_terms(cc, [&](int64_t xi, int64_t wi, int64_t yi) { r.add(yi, double(x[xi]) * w[wi]); });
  int64_t spatial = num_elements(y) / (y[0] * y[1]);
  if (b) {
    for (int64_t i = 0; i < num_elements(y); ++i) r.add(i, (*b)[i / spatial % y[1]]);
  }
  return r;
}

Ref ref_backward_data(const ConvCase& cc, const std::vector<float>& dy,
                      const std::vector<float>& w) {
  Ref r(num_elements(cc.x));
  visit_terms(cc, [&](int64_t xi, int64_t wi, int64_t yi) { r.add(xi, double(dy[yi]) * w[wi]); });
  return r;
}

Ref ref_backward_weights(const ConvCase& cc, const std::vector<float>& x,
                         const std::vector<float>& dy) {
  Ref r(num_elements(cc.w()));
  visit_terms(cc, [&](int64_t xi, int64_t wi, int64_t yi) { r.add(wi, double(x[xi]) * dy[yi]); });
  return r;
}

Ref ref_backward_bias(const ConvCase& cc, const std::vector<float>& dy) {
  Shape y = cc.y();
  Ref r(y[1]);
  int64_t spatial = num_elements(y) / (y[0] * y[1]);
  for (int64_t i = 0; i < num_elements(y); ++i) r.add(i / spatial % y[1], dy[i]);
  return r;
}

KernelSpec forward_spec(const ConvCase& cc) {
  KernelSpec s{cc.name + "/fwd", cc.forward_op(), cc.attrs(), {cc.x, cc.w()}, {cc.y()}};
  if (cc.bias) s.input_shapes.push_back({cc.out_channels});
  return s;
}

KernelSpec backward_data_spec(const ConvCase& cc) {
  KernelSpec s{cc.name + "/bwd_data", cc.data_op(), cc.attrs(), {cc.y(), cc.w()}, {cc.x}};
  s.attrs["input_shape"] = cc.x;
  return s;
}

KernelSpec backward_weights_spec(const ConvCase& cc) {
  KernelSpec s{cc.name + "/bwd_weights", cc.weights_op(), cc.attrs(), {cc.x, cc.y()}, {cc.w()}};
  s.attrs["weight_shape"] = cc.w();
  s.attrs["has_bias"] = int64_t{cc.bias};
  if (cc.bias) s.output_shapes.push_back({cc.out_channels});
  return s;
}

std::vector<ConvCase> conv_cases() {
  return {
      {"conv2d_k3_p1_bias", false, {2, 3, 9, 8}, 4, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
      {"conv2d_s2_nobias", false, {2, 3, 9, 8}, 5, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false},
      {"conv2d_dil2_k3x2", false, {1, 4, 10, 9}, 3, {3, 2}, {1, 2}, {2, 0}, {2, 2}, true},
      {"conv2d_64to64", false, {2, 64, 8, 8}, 64, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
      {"conv2d_1to64", false, {2, 1, 10, 10}, 64, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
      {"conv2d_64to1", false, {2, 64, 10, 10}, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
      // Shapes lms's Winograd applies to (ConvAlgorithm::kWinograd): 3x3,
      // stride 1, channels filling whole 16-blocks; odd sizes leave partial
      // 4x4 output tiles, and pads 0 and 2 move the tiles' origin.
      {"conv2d_wino_p1", false, {3, 16, 13, 11}, 32, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
      {"conv2d_wino_p0", false, {2, 32, 9, 10}, 16, {3, 3}, {1, 1}, {0, 0}, {1, 1}, false},
      {"conv2d_wino_p2", false, {2, 16, 7, 5}, 16, {3, 3}, {1, 1}, {2, 2}, {1, 1}, true},
      {"conv3d_s2_bias",
       false,
       {2, 3, 5, 6, 5},
       4,
       {3, 3, 3},
       {2, 2, 2},
       {1, 1, 1},
       {1, 1, 1},
       true},
      {"conv3d_dil2",
       false,
       {1, 16, 6, 6, 6},
       16,
       {3, 3, 3},
       {1, 1, 1},
       {2, 2, 2},
       {2, 2, 2},
       false},
      {"deconv2d_k4_s2", true, {2, 3, 5, 6}, 4, {4, 4}, {2, 2}, {1, 1}, {1, 1}, true},
      {"deconv2d_k3_s1", true, {1, 16, 6, 6}, 16, {3, 3}, {1, 1}, {1, 1}, {1, 1}, false},
      {"deconv3d_k2_s2",
       true,
       {2, 4, 3, 4, 3},
       3,
       {2, 2, 2},
       {2, 2, 2},
       {0, 0, 0},
       {1, 1, 1},
       true},
  };
}

// Direct convolution: float accumulation over n terms stays well inside
// n * 2^-24 of the sum of absolute terms; these problems have at most ~1000
// terms per element. Winograd F(4x4,3x3) (kAuto) transforms its inputs and
// outputs with constants up to ~8 in float, so it gets a looser bound.
constexpr double kRelBoundDirect = 2e-5;
constexpr double kRelBoundWinograd = 2e-4;

struct OptionCase {
  const char* name;
  SpatialKernelOptions options;
};

const OptionCase kOptionCases[] = {
    {"default", {}},  // ConvLayout::kAuto, ConvAlgorithm::kAuto
    {"blocked_direct", {ConvLayout::kBlocked, ConvAlgorithm::kDirect}},
    {"plain_direct", {ConvLayout::kPlain, ConvAlgorithm::kDirect}},
    {"lms_winograd", {ConvLayout::kAuto, ConvAlgorithm::kWinograd}},
};

void PrintTo(const OptionCase& oc, std::ostream* os) { *os << oc.name; }

class ConvKernelTest : public ::testing::TestWithParam<std::tuple<ConvCase, OptionCase>> {};

TEST_P(ConvKernelTest, MatchesNaiveReference) {
  const auto& [cc, option_case] = GetParam();
  const SpatialKernelOptions& layout = option_case.options;
  const double kRelBound =
      layout.conv_algorithm == ConvAlgorithm::kDirect ? kRelBoundDirect : kRelBoundWinograd;
  std::mt19937 rng = seeded_rng(1234 + static_cast<uint32_t>(cc.x[1] * 7 + cc.out_channels));
  auto x = random_values(num_elements(cc.x), rng);
  auto w = random_values(num_elements(cc.w()), rng);
  auto b = random_values(cc.out_channels, rng);
  auto dy = random_values(num_elements(cc.y()), rng);

  std::vector<std::vector<float>> fwd_in = {x, w};
  if (cc.bias) fwd_in.push_back(b);
  auto y = run_spec(forward_spec(cc), fwd_in, layout);
  ASSERT_EQ(y.size(), 1u);
  Ref y_ref = ref_forward(cc, x, w, cc.bias ? &b : nullptr);
  expect_close(y[0], y_ref.value, y_ref.scale, kRelBound, "forward y");

  auto dx = run_spec(backward_data_spec(cc), {dy, w}, layout);
  ASSERT_EQ(dx.size(), 1u);
  Ref dx_ref = ref_backward_data(cc, dy, w);
  expect_close(dx[0], dx_ref.value, dx_ref.scale, kRelBound, "backward dx");

  auto dw = run_spec(backward_weights_spec(cc), {x, dy}, layout);
  ASSERT_EQ(dw.size(), cc.bias ? 2u : 1u);
  Ref dw_ref = ref_backward_weights(cc, x, dy);
  expect_close(dw[0], dw_ref.value, dw_ref.scale, kRelBound, "backward dw");
  if (cc.bias) {
    Ref db_ref = ref_backward_bias(cc, dy);
    expect_close(dw[1], db_ref.value, db_ref.scale, kRelBound, "backward db");
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ConvKernelTest,
                         ::testing::Combine(::testing::ValuesIn(conv_cases()),
                                            ::testing::ValuesIn(kOptionCases)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" + std::get<1>(info.param).name;
                         });

// L(x, w) = sum(conv(x, w) * r) in double via the naive forward; its central
// differences must match the kernels' dx = bwd_data(r, w), dw = bwd_weights(x, r).
TEST(ConvKernelFiniteDifference, GradientsMatchCentralDifferences) {
  ConvCase cc{"fd", false, {1, 2, 7, 6}, 3, {3, 3}, {2, 1}, {1, 2}, {2, 1}, false};
  std::mt19937 rng = seeded_rng(99);
  auto x = random_values(num_elements(cc.x), rng);
  auto w = random_values(num_elements(cc.w()), rng);
  auto r = random_values(num_elements(cc.y()), rng);
  auto loss = [&](const std::vector<float>& xv, const std::vector<float>& wv, int64_t which,
                  int64_t at, double h) {
    double sum = 0;
    visit_terms(cc, [&](int64_t xi, int64_t wi, int64_t yi) {
      double xd = xv[xi] + (which == 0 && xi == at ? h : 0.0);
      double wd = wv[wi] + (which == 1 && wi == at ? h : 0.0);
      sum += xd * wd * r[yi];
    });
    return sum;
  };
  auto dx = run_spec(backward_data_spec(cc), {r, w});
  auto dw = run_spec(backward_weights_spec(cc), {x, r});
  ASSERT_EQ(dx.size(), 1u);
  ASSERT_EQ(dw.size(), 1u);
  const double h = 1e-3;
  for (int which = 0; which < 2; ++which) {
    const auto& grad = which == 0 ? dx[0] : dw[0];
    for (size_t i = 0; i < grad.size(); ++i) {
      double fd = (loss(x, w, which, i, h) - loss(x, w, which, i, -h)) / (2 * h);
      EXPECT_NEAR(grad[i], fd, 1e-4 * (1 + std::fabs(fd)))
          << (which ? "dw" : "dx") << "[" << i << "]";
    }
  }
}

TEST(ConvKernelDeterminism, RepeatedRunsAreBitIdentical) {
  ConvCase cc{"det", false, {16, 64, 16, 16}, 64, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true};
  std::mt19937 rng = seeded_rng(7);
  auto x = random_values(num_elements(cc.x), rng);
  auto w = random_values(num_elements(cc.w()), rng);
  auto b = random_values(cc.out_channels, rng);
  auto dy = random_values(num_elements(cc.y()), rng);
  for (const OptionCase& oc : kOptionCases) {
    const SpatialKernelOptions& layout = oc.options;
    std::vector<std::vector<std::vector<float>>> runs;
    for (int rep = 0; rep < 2; ++rep) {
      auto y = run_spec(forward_spec(cc), {x, w, b}, layout);
      auto dx = run_spec(backward_data_spec(cc), {dy, w}, layout);
      auto dw = run_spec(backward_weights_spec(cc), {x, dy}, layout);
      ASSERT_EQ(y.size() + dx.size() + dw.size(), 4u);
      runs.push_back({y[0], dx[0], dw[0], dw[1]});
    }
    for (size_t t = 0; t < runs[0].size(); ++t) {
      ASSERT_EQ(runs[0][t].size(), runs[1][t].size());
      EXPECT_EQ(0, std::memcmp(runs[0][t].data(), runs[1][t].data(), runs[0][t].size() * 4))
          << "output " << t << " differs between runs";
    }
  }
}

// Winograd paths only trigger on big problems (here N=16, 64->64, 16x16),
// too big for the full naive loop: check_sampled compares a random sample of
// elements of y, dx and dw against per-element double sums.
const ConvCase kWinoCase{"wino", false, {16, 64, 16, 16}, 64, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true};

void check_sampled(const SpatialKernelOptions& opts) {
  const ConvCase& cc = kWinoCase;
  std::mt19937 rng = seeded_rng(31);
  auto x = random_values(num_elements(cc.x), rng);
  auto w = random_values(num_elements(cc.w()), rng);
  auto b = random_values(cc.out_channels, rng);
  auto dy = random_values(num_elements(cc.y()), rng);
  auto y = run_spec(forward_spec(cc), {x, w, b}, opts);
  auto dx = run_spec(backward_data_spec(cc), {dy, w}, opts);
  auto dw = run_spec(backward_weights_spec(cc), {x, dy}, opts);
  ASSERT_EQ(y.size() + dx.size() + dw.size(), 4u);
  const int64_t C = 64, S = 16;
  auto at = [&](const std::vector<float>& t, int64_t n, int64_t c, int64_t h, int64_t v) {
    bool inside = h >= 0 && h < S && v >= 0 && v < S;
    return inside ? double(t[((n * C + c) * S + h) * S + v]) : 0.0;
  };
  std::uniform_int_distribution<int64_t> pick(0, 16 * C * S * S - 1), pick_w(0, C * C * 9 - 1);
  for (int sample = 0; sample < 200; ++sample) {
    int64_t i = pick(rng), v = i % S, h = i / S % S, c = i / (S * S) % C, n = i / (C * S * S);
    double y_ref = b[c], y_abs = std::fabs(b[c]), dx_ref = 0, dx_abs = 0;
    for (int64_t ci = 0; ci < C; ++ci)
      for (int64_t t = 0; t < 9; ++t) {
        int64_t kh = t / 3, kw = t % 3;
        double yt = at(x, n, ci, h - 1 + kh, v - 1 + kw) * w[(c * C + ci) * 9 + t];
        double dxt = at(dy, n, ci, h + 1 - kh, v + 1 - kw) * w[(ci * C + c) * 9 + t];
        y_ref += yt, y_abs += std::fabs(yt), dx_ref += dxt, dx_abs += std::fabs(dxt);
      }
    EXPECT_NEAR(y[0][i], y_ref, kRelBoundWinograd * y_abs + 1e-6) << "y[" << i << "]";
    EXPECT_NEAR(dx[0][i], dx_ref, kRelBoundWinograd * dx_abs + 1e-6) << "dx[" << i << "]";
    int64_t j = pick_w(rng), t = j % 9, ci = j / 9 % C, k = j / (9 * C);
    double dw_ref = 0, dw_abs = 0;
    for (int64_t nn = 0; nn < 16; ++nn)
      for (int64_t p = 0; p < S * S; ++p) {
        double term =
            at(x, nn, ci, p / S - 1 + t / 3, p % S - 1 + t % 3) * at(dy, nn, k, p / S, p % S);
        dw_ref += term, dw_abs += std::fabs(term);
      }
    EXPECT_NEAR(dw[0][j], dw_ref, kRelBoundWinograd * dw_abs + 1e-6) << "dw[" << j << "]";
  }
}

TEST(ConvKernelWinograd, AutoAlgorithmMatchesSampledReference) {
  const ConvCase& cc = kWinoCase;
  CpuKernelContext ctx = make_context();
  auto md = [](const Shape& s) {
    return dnnl::memory::desc(dnnl::memory::dims(s.begin(), s.end()), dnnl::memory::data_type::f32,
                              dnnl::memory::format_tag::any);
  };
  dnnl::convolution_forward::primitive_desc probe({dnnl::prop_kind::forward_training,
                                                   dnnl::algorithm::convolution_auto,
                                                   md(cc.x),
                                                   md(cc.w()),
                                                   md(cc.y()),
                                                   {1, 1},
                                                   {0, 0},
                                                   {1, 1},
                                                   {1, 1}},
                                                  ctx.engine);
  if (std::string(probe.impl_info_str()).find("wino") == std::string::npos &&
      !winograd_cpu_supported()) {
    GTEST_SKIP() << "oneDNN picks " << probe.impl_info_str()
                 << ", not Winograd, and this CPU lacks AVX2 + FMA for lms's";
  }
  check_sampled({ConvLayout::kBlocked, ConvAlgorithm::kAuto});
}

// lms's F(4x4, 3x3) (winograd.h), forced on whatever CPU runs the test.
TEST(ConvKernelWinograd, LmsWinogradMatchesSampledReference) {
  if (!winograd_cpu_supported()) GTEST_SKIP() << "this CPU lacks AVX2 + FMA";
  check_sampled({ConvLayout::kAuto, ConvAlgorithm::kWinograd});
}

// kWinograd really runs lms's algorithm in all three passes where it
// applies (its rounding differs from the direct kernel's, and its workspace
// holds 36 transformed C x K matrices) and falls back to the direct kernel,
// bit for bit, where it does not (stride 2).
TEST(ConvKernelWinograd, LmsWinogradRunsWhereItApplies) {
  if (!winograd_cpu_supported()) GTEST_SKIP() << "this CPU lacks AVX2 + FMA";
  const SpatialKernelOptions wino{ConvLayout::kAuto, ConvAlgorithm::kWinograd};
  const SpatialKernelOptions direct{ConvLayout::kAuto, ConvAlgorithm::kDirect};
  ConvCase cc{"applies", false, {2, 32, 12, 12}, 16, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true};
  CpuKernelContext ctx = make_context();
  for (const KernelSpec& spec :
       {forward_spec(cc), backward_data_spec(cc), backward_weights_spec(cc)}) {
    auto k = create_spatial_kernel(spec, ctx, wino);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_GE((*k)->workspace_bytes(), uint64_t{36 * 32 * 16 * 4}) << spec.name;
  }
  std::mt19937 rng = seeded_rng(53);
  auto x = random_values(num_elements(cc.x), rng);
  auto w = random_values(num_elements(cc.w()), rng);
  auto b = random_values(cc.out_channels, rng);
  auto dy = random_values(num_elements(cc.y()), rng);
  auto differs = [](const std::vector<std::vector<float>>& a,
                    const std::vector<std::vector<float>>& b) {
    return a.size() != b.size() || a.empty() ||
           std::memcmp(a[0].data(), b[0].data(), a[0].size() * 4) != 0;
  };
  EXPECT_TRUE(differs(run_spec(forward_spec(cc), {x, w, b}, wino),
                      run_spec(forward_spec(cc), {x, w, b}, direct)));
  EXPECT_TRUE(differs(run_spec(backward_data_spec(cc), {dy, w}, wino),
                      run_spec(backward_data_spec(cc), {dy, w}, direct)));
  EXPECT_TRUE(differs(run_spec(backward_weights_spec(cc), {x, dy}, wino),
                      run_spec(backward_weights_spec(cc), {x, dy}, direct)));
  ConvCase strided = cc;
  strided.stride = {2, 2};
  auto sy = random_values(num_elements(strided.y()), rng);
  EXPECT_FALSE(differs(run_spec(forward_spec(strided), {x, w, b}, wino),
                       run_spec(forward_spec(strided), {x, w, b}, direct)));
  EXPECT_FALSE(differs(run_spec(backward_data_spec(strided), {sy, w}, wino),
                       run_spec(backward_data_spec(strided), {sy, w}, direct)));
  EXPECT_FALSE(differs(run_spec(backward_weights_spec(strided), {x, sy}, wino),
                       run_spec(backward_weights_spec(strided), {x, sy}, direct)));
}

TEST(ConvKernelWorkspace, BlockedLayoutReportsReorderBuffers) {
  ConvCase cc{"ws", false, {2, 64, 8, 8}, 64, {3, 3}, {1, 1}, {1, 1}, {1, 1}, false};
  CpuKernelContext ctx = make_context();
  auto blocked = create_spatial_kernel(forward_spec(cc), ctx, {ConvLayout::kBlocked});
  ASSERT_TRUE(blocked.ok()) << blocked.status();
  // src, weights and dst reorder buffers at least (the canaries in run_spec
  // check that nothing is written past what is reported).
  uint64_t tensors = shape_bytes(cc.x) + shape_bytes(cc.w()) + shape_bytes(cc.y());
  EXPECT_GE((*blocked)->workspace_bytes(), tensors);
  KernelArgs no_workspace{{nullptr, nullptr}, {nullptr}, nullptr};
  EXPECT_EQ((*blocked)->run(no_workspace).code(), absl::StatusCode::kInvalidArgument);
}

// Reorders between the plain layout of `shape` and the device's blocked one.
std::vector<float> reorder(const std::vector<float>& v, const Shape& shape, bool to_blocked) {
  static CpuKernelContext ctx = make_context();
  dnnl::memory::desc plain = plain_desc(shape), blocked = blocked_desc(shape);
  std::vector<float> out(v.size());
  dnnl::memory src(to_blocked ? plain : blocked, ctx.engine, const_cast<float*>(v.data()));
  dnnl::memory dst(to_blocked ? blocked : plain, ctx.engine, out.data());
  dnnl::reorder(src, dst).execute(ctx.stream, src, dst);
  ctx.stream.wait();
  return out;
}

// Runs `spec` with the tensors marked in `layout` ("bp:b" style) blocked:
// reorders those inputs to blocked and those outputs back to plain.
std::vector<std::vector<float>> run_blocked(KernelSpec spec, const std::string& layout,
                                            std::vector<std::vector<float>> inputs,
                                            const SpatialKernelOptions& options) {
  spec.attrs[std::string(kLayoutAttr)] = layout;
  const size_t n_in = spec.input_shapes.size();
  for (size_t i = 0; i < n_in; ++i) {
    if (layout[i] == kLayoutBlocked) inputs[i] = reorder(inputs[i], spec.input_shapes[i], true);
  }
  auto outputs = run_spec(spec, inputs, options);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (layout[n_in + 1 + i] == kLayoutBlocked) {
      outputs[i] = reorder(outputs[i], spec.output_shapes[i], false);
    }
  }
  return outputs;
}

void expect_same_bits(const std::vector<std::vector<float>>& a,
                      const std::vector<std::vector<float>>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what;
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4))
        << what << ": output " << i << " differs";
  }
}

// Per Note [Blocked layouts], a kernel whose activations are stored blocked runs
// the primitive it runs on plain ones, so the results are bit-identical.
TEST(ConvKernelBlockedTensors, SameBitsAsPlainTensors) {
  std::mt19937 rng = seeded_rng(41);
  for (const ConvCase& cc : conv_cases()) {
    const char x = cc.x[1] % 16 == 0 ? kLayoutBlocked : kLayoutPlain;
    const char y = cc.out_channels % 16 == 0 ? kLayoutBlocked : kLayoutPlain;
    if (cc.transposed || (x == kLayoutPlain && y == kLayoutPlain)) continue;
    auto xv = random_values(num_elements(cc.x), rng);
    auto wv = random_values(num_elements(cc.w()), rng);
    auto bv = random_values(cc.out_channels, rng);
    auto dy = random_values(num_elements(cc.y()), rng);
    const std::string b = cc.bias ? "p" : "";
    for (const OptionCase& oc : kOptionCases) {
      const std::string what = cc.name + "/" + oc.name;
      std::vector<std::vector<float>> fwd_in = {xv, wv};
      if (cc.bias) fwd_in.push_back(bv);
      expect_same_bits(
          run_spec(forward_spec(cc), fwd_in, oc.options),
          run_blocked(forward_spec(cc), std::string{x, 'p'} + b + ":" + y, fwd_in, oc.options),
          what + " forward");
      expect_same_bits(
          run_spec(backward_data_spec(cc), {dy, wv}, oc.options),
          run_blocked(backward_data_spec(cc), std::string{y, 'p', ':', x}, {dy, wv}, oc.options),
          what + " backward data");
      expect_same_bits(run_spec(backward_weights_spec(cc), {xv, dy}, oc.options),
                       run_blocked(backward_weights_spec(cc), std::string{x, y, ':', 'p'} + b,
                                   {xv, dy}, oc.options),
                       what + " backward weights");
    }
  }
}

void expect_invalid(KernelSpec spec, const std::string& fragment) {
  CpuKernelContext ctx = make_context();
  auto k = create_cpu_kernel(spec, ctx);
  ASSERT_FALSE(k.ok()) << spec.name << " was accepted";
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << k.status();
  EXPECT_NE(k.status().message().find(spec.name), std::string::npos) << k.status();
  EXPECT_NE(k.status().message().find(fragment), std::string::npos) << k.status();
}

TEST(ConvKernelValidation, RejectsInconsistentSpecs) {
  ConvCase cc = conv_cases()[0];
  KernelSpec s = forward_spec(cc);
  s.name = "bad_channels", s.input_shapes[1][1] = 5;
  expect_invalid(s, "channels");
  s = forward_spec(cc), s.name = "bad_output", s.output_shapes[0][3] += 1;
  expect_invalid(s, "output 0");
  s = forward_spec(cc), s.name = "bad_stride", s.attrs["stride"] = std::vector<int64_t>{0, 1};
  expect_invalid(s, "stride");
  s = forward_spec(cc), s.name = "bad_pad_len", s.attrs["pad"] = std::vector<int64_t>{1};
  expect_invalid(s, "pad");
  s = forward_spec(cc), s.name = "bad_rank", s.input_shapes[0] = {2, 3, 9};
  expect_invalid(s, "rank");
  s = forward_spec(cc), s.name = "bad_bias", s.input_shapes[2] = {7};
  expect_invalid(s, "bias");
  s = forward_spec(cc), s.name = "bad_arity", s.input_shapes.resize(1);
  expect_invalid(s, "inputs");
  s = backward_data_spec(cc), s.name = "no_input_shape", s.attrs.erase("input_shape");
  expect_invalid(s, "input_shape");
  s = backward_weights_spec(cc), s.name = "bias_mismatch", s.attrs["has_bias"] = int64_t{0};
  expect_invalid(s, "has 2 outputs; the op gives 1");
  s = forward_spec(cc), s.name = "empty_output", s.attrs["dilation"] = std::vector<int64_t>{9, 9};
  expect_invalid(s, "output size is not positive");
  ConvCase dc = conv_cases()[11];  // deconv2d_k4_s2
  s = forward_spec(dc), s.name = "deconv_dilation",
  s.attrs["dilation"] = std::vector<int64_t>{2, 2};
  expect_invalid(s, "dilation");
}

TEST(ConvKernelValidation, RejectsBlockedWeightsAndPaddedBlocks) {
  ConvCase cc = conv_cases()[3];  // 64 -> 64, bias
  KernelSpec s = forward_spec(cc);
  s.name = "blocked_weights", s.attrs[std::string(kLayoutAttr)] = std::string("bbp:b");
  expect_invalid(s, "activations");
  s = forward_spec(cc), s.name = "short_layout", s.attrs[std::string(kLayoutAttr)] = "bp:b";
  expect_invalid(s, "layout");
  cc = conv_cases()[0];  // 3 -> 4 channels: blocks would pad
  s = forward_spec(cc), s.name = "padded", s.attrs[std::string(kLayoutAttr)] = "bpp:p";
  expect_invalid(s, "whole blocks");
}

// create_cpu_kernel: blocked tensors reach only kernels that read them.
TEST(ConvKernelValidation, OpsWithoutBlockedKernelsRejectBlockedTensors) {
  CpuKernelContext ctx = make_context();
  Attrs mixed = {{std::string(kLayoutAttr), std::string("p:b")}};
  auto relu = create_cpu_kernel(
      KernelSpec{"r", OpKind::kRelu, mixed, {{2, 16, 4, 4}}, {{2, 16, 4, 4}}}, ctx);
  EXPECT_EQ(relu.status().code(), absl::StatusCode::kInvalidArgument) << relu.status();
  Attrs all = {{std::string(kLayoutAttr), std::string("b:b")}};
  auto ok =
      create_cpu_kernel(KernelSpec{"r", OpKind::kRelu, all, {{2, 16, 4, 4}}, {{2, 16, 4, 4}}}, ctx);
  EXPECT_TRUE(ok.ok()) << ok.status();
  auto softmax = create_cpu_kernel(
      KernelSpec{"s", OpKind::kSoftmax, all, {{2, 16, 4, 4}}, {{2, 16, 4, 4}}}, ctx);
  EXPECT_EQ(softmax.status().code(), absl::StatusCode::kInvalidArgument) << softmax.status();
}

TEST(ConvKernelValidation, OtherOpsGetNoKernel) {
  CpuKernelContext ctx = make_context();
  auto k = create_spatial_kernel(KernelSpec{"r", OpKind::kRelu, {}, {{1, 2}}, {{1, 2}}}, ctx);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(*k, nullptr);
}

}  // namespace
}  // namespace lms::cpu::testing
