// Convolution throughput of the CPU device's spatial kernels on the VDSR
// shapes (N=16, 64x64, 3x3, pad 1; 64->64, 1->64, 64->1; forward, backward
// data, backward weights, with bias), in GFLOP/s:
//   kernel_default       the lms kernel as configured by default: blocked
//                        layouts where they pay (reorders from/to the plain
//                        buffers inside run()), Winograd where oneDNN picks it
//                        (AVX-512) and lms's Winograd where oneDNN has none
//   kernel_blocked       blocked layouts, direct convolution
//   kernel_plain         the lms kernel, direct, on the plain NCHW buffers
//   kernel_lms_winograd  lms's Winograd F(4x4, 3x3) on oneDNN's matmul, forced
//   direct_plain         the same primitive called straight through oneDNN on
//                        NCHW buffers: kernel_plain minus this is the wrapper
//   direct_blocked(_auto) oneDNN on data already in its blocked layouts: the
//                        upper bound; kernel_blocked minus this is the reorders
//
//   build-*/bench/conv_bench --benchmark_filter=64to64 --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cpu/kernels/spatial_kernels.h"
#include "dnnl.hpp"

namespace {

using dnnl::memory;
using lms::Shape;

enum class Pass { kForward, kBackwardData, kBackwardWeights };
enum class Variant {
  kKernelDefault,
  kKernelBlocked,
  kKernelPlain,
  kKernelLmsWinograd,
  kDirectPlain,
  kDirectBlocked,
  kDirectBlockedAuto
};

struct Problem {
  const char* name;
  int64_t n, c, k, hw;
  Shape x() const { return {n, c, hw, hw}; }
  Shape w() const { return {k, c, 3, 3}; }
  Shape y() const { return {n, k, hw, hw}; }
  double flops() const { return 2.0 * n * k * c * 9 * hw * hw; }
};

lms::cpu::CpuKernelContext& context() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  static lms::cpu::CpuKernelContext ctx{engine, dnnl::stream(engine)};
  return ctx;
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// ---- through the lms kernel ----

lms::KernelSpec conv_spec(Pass pass, const Problem& p) {
  lms::Attrs attrs = {{"stride", std::vector<int64_t>{1, 1}},
                      {"pad", std::vector<int64_t>{1, 1}},
                      {"dilation", std::vector<int64_t>{1, 1}}};
  switch (pass) {
    case Pass::kForward:
      return {"conv", lms::OpKind::kConv, attrs, {p.x(), p.w(), {p.k}}, {p.y()}};
    case Pass::kBackwardData:
      attrs["input_shape"] = p.x();
      return {"conv_bwd_data", lms::OpKind::kConvBwdData, attrs, {p.y(), p.w()}, {p.x()}};
    case Pass::kBackwardWeights:
      attrs["weight_shape"] = p.w();
      attrs["has_bias"] = int64_t{1};
      return {
          "conv_bwd_weights", lms::OpKind::kConvBwdWeights, attrs, {p.x(), p.y()}, {p.w(), {p.k}}};
  }
  return {};
}

void run_kernel(benchmark::State& state, Pass pass, const Problem& p,
                lms::cpu::SpatialKernelOptions options) {
  lms::KernelSpec spec = conv_spec(pass, p);
  auto kernel = lms::cpu::create_spatial_kernel(spec, context(), options);
  if (!kernel.ok()) {
    state.SkipWithError(std::string(kernel.status().message()).c_str());
    return;
  }
  std::mt19937 rng(1);
  std::vector<std::vector<float>> in, out;
  for (const Shape& s : spec.input_shapes) in.push_back(random_floats(lms::num_elements(s), rng));
  for (const Shape& s : spec.output_shapes) out.emplace_back(lms::num_elements(s));
  std::vector<float> ws(((*kernel)->workspace_bytes() + 3) / 4 + 16);
  lms::KernelArgs args;
  for (auto& v : in) args.inputs.push_back(v.data());
  for (auto& v : out) args.outputs.push_back(v.data());
  args.workspace = ws.data();
  for (auto _ : state) {
    absl::Status st = (*kernel)->run(args);
    if (!st.ok()) state.SkipWithError(std::string(st.message()).c_str());
  }
  state.counters["workspace_MiB"] = (*kernel)->workspace_bytes() / (1024.0 * 1024.0);
}

// ---- straight through oneDNN ----

struct Direct {
  dnnl::primitive prim;
  std::unordered_map<int, memory> args;
};

memory filled_memory(const memory::desc& md, const Shape& shape, std::mt19937& rng) {
  auto& ctx = context();
  memory m(md, ctx.engine);
  std::vector<float> values = random_floats(lms::num_elements(shape), rng);
  memory::desc plain(memory::dims(shape.begin(), shape.end()), memory::data_type::f32,
                     shape.size() == 1 ? memory::format_tag::a : memory::format_tag::abcd);
  memory src(plain, ctx.engine, values.data());
  dnnl::reorder(src, m).execute(ctx.stream, src, m);
  ctx.stream.wait();
  return m;
}

Direct make_direct(Pass pass, const Problem& p, bool blocked, dnnl::algorithm alg) {
  auto& ctx = context();
  auto md = [&](const Shape& s) {
    return memory::desc(memory::dims(s.begin(), s.end()), memory::data_type::f32,
                        blocked ? memory::format_tag::any : memory::format_tag::nchw);
  };
  memory::desc b({p.k}, memory::data_type::f32, memory::format_tag::a);
  memory::dims strides = {1, 1}, pad = {1, 1}, dil = {0, 0};
  dnnl::convolution_forward::primitive_desc fwd({dnnl::prop_kind::forward_training, alg, md(p.x()),
                                                 md(p.w()), b, md(p.y()), strides, dil, pad, pad},
                                                ctx.engine);
  std::mt19937 rng(1);
  if (pass == Pass::kForward) {
    return {dnnl::convolution_forward(fwd),
            {{DNNL_ARG_SRC, filled_memory(fwd.src_desc(), p.x(), rng)},
             {DNNL_ARG_WEIGHTS, filled_memory(fwd.weights_desc(), p.w(), rng)},
             {DNNL_ARG_BIAS, filled_memory(b, {p.k}, rng)},
             {DNNL_ARG_DST, memory(fwd.dst_desc(), ctx.engine)}}};
  }
  if (pass == Pass::kBackwardData) {
    dnnl::convolution_backward_data::primitive_desc pd(
        {alg, md(p.x()), md(p.w()), md(p.y()), strides, dil, pad, pad}, ctx.engine, fwd);
    return {dnnl::convolution_backward_data(pd),
            {{DNNL_ARG_DIFF_DST, filled_memory(pd.diff_dst_desc(), p.y(), rng)},
             {DNNL_ARG_WEIGHTS, filled_memory(pd.weights_desc(), p.w(), rng)},
             {DNNL_ARG_DIFF_SRC, memory(pd.diff_src_desc(), ctx.engine)}}};
  }
  dnnl::convolution_backward_weights::primitive_desc pd(
      {alg, md(p.x()), md(p.w()), b, md(p.y()), strides, dil, pad, pad}, ctx.engine, fwd);
  return {dnnl::convolution_backward_weights(pd),
          {{DNNL_ARG_SRC, filled_memory(pd.src_desc(), p.x(), rng)},
           {DNNL_ARG_DIFF_DST, filled_memory(pd.diff_dst_desc(), p.y(), rng)},
           {DNNL_ARG_DIFF_WEIGHTS, memory(pd.diff_weights_desc(), ctx.engine)},
           {DNNL_ARG_DIFF_BIAS, memory(b, ctx.engine)}}};
}

void run_direct(benchmark::State& state, Pass pass, const Problem& p, bool blocked,
                dnnl::algorithm alg = dnnl::algorithm::convolution_direct) {
  Direct d;
  try {
    d = make_direct(pass, p, blocked, alg);
  } catch (const dnnl::error& e) {
    state.SkipWithError(e.what());
    return;
  }
  auto& ctx = context();
  for (auto _ : state) {
    d.prim.execute(ctx.stream, d.args);
    ctx.stream.wait();
  }
}

void bench_conv(benchmark::State& state, Pass pass, Problem p, Variant v) {
  using lms::cpu::ConvAlgorithm;
  using lms::cpu::ConvLayout;
  switch (v) {
    case Variant::kKernelDefault:
      run_kernel(state, pass, p, {});  // the defaults: ConvLayout::kAuto, ConvAlgorithm::kAuto
      break;
    case Variant::kKernelBlocked:
      run_kernel(state, pass, p, {ConvLayout::kBlocked, ConvAlgorithm::kDirect});
      break;
    case Variant::kKernelPlain:
      run_kernel(state, pass, p, {ConvLayout::kPlain, ConvAlgorithm::kDirect});
      break;
    case Variant::kKernelLmsWinograd:
      run_kernel(state, pass, p, {ConvLayout::kAuto, ConvAlgorithm::kWinograd});
      break;
    case Variant::kDirectBlockedAuto:
      run_direct(state, pass, p, true, dnnl::algorithm::convolution_auto);
      break;
    case Variant::kDirectPlain:
      run_direct(state, pass, p, false);
      break;
    case Variant::kDirectBlocked:
      run_direct(state, pass, p, true);
      break;
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(p.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Over repetitions: the min time and the max GFLOP/s are the figures least
// disturbed by other processes on a shared machine.
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

void register_all() {
  const Problem problems[] = {
      {"64to64", 16, 64, 64, 64}, {"1to64", 16, 1, 64, 64}, {"64to1", 16, 64, 1, 64}};
  const std::pair<Pass, const char*> passes[] = {{Pass::kForward, "fwd"},
                                                 {Pass::kBackwardData, "bwd_data"},
                                                 {Pass::kBackwardWeights, "bwd_weights"}};
  const std::pair<Variant, const char*> variants[] = {
      {Variant::kKernelDefault, "kernel_default"},
      {Variant::kKernelBlocked, "kernel_blocked"},
      {Variant::kKernelPlain, "kernel_plain"},
      {Variant::kKernelLmsWinograd, "kernel_lms_winograd"},
      {Variant::kDirectPlain, "direct_plain"},
      {Variant::kDirectBlocked, "direct_blocked"},
      {Variant::kDirectBlockedAuto, "direct_blocked_auto"}};
  for (const Problem& p : problems)
    for (auto [pass, pass_name] : passes)
      for (auto [v, v_name] : variants) {
        std::string name = std::string("conv3x3/") + p.name + "/" + pass_name + "/" + v_name;
        benchmark::RegisterBenchmark(name.c_str(), bench_conv, pass, p, v)
            ->UseRealTime()
            ->ComputeStatistics("min", min_of)
            ->ComputeStatistics("max", max_of)
            ->Unit(benchmark::kMillisecond);
      }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
