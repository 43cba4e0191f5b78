// Throughput of the CPU device's tiled attention (Note [CPU tiled
// attention]), forward + backward, against oneDNN matmuls with the same
// FLOPs, in GFLOP/s of FlashAttention-2's count: 4·T·S·D per (n, h) forward
// and 10·T·S·D backward, halved when causal (the kernel's backward does
// 14·T·S·D, recomputing P and dS in both of its passes):
//   attention/<shape>  the lms kernels, forward then backward
//   matmul/<shape>     q kᵀ as one batched oneDNN matmul [N·H,T,D]x[N·H,D,S],
//                      the plain-matmul speed of the machine at these shapes
// The goal: attention at least 50% of matmul.
//
//   build-release/bench/attention_bench --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels/cpu_kernels.h"
#include "dnnl.hpp"

namespace {

using dnnl::memory;

struct Problem {
  const char* name;
  int64_t n, h, t, d;
  bool causal;
  double flops() const { return (causal ? 0.5 : 1.0) * 14.0 * n * h * t * t * d; }
};

// The GPT of the speed goal (width 256, 8 heads, batch 4) at T = 512 and
// 2048, and a wider head.
const Problem kProblems[] = {{"gpt_T512_D32_causal", 4, 8, 512, 32, true},
                             {"gpt_T2048_D32_causal", 4, 8, 2048, 32, true},
                             {"T1024_D64", 1, 8, 1024, 64, false},
                             {"T1024_D128_causal", 1, 4, 1024, 128, true}};

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

struct Run {
  std::unique_ptr<lms::Kernel> kernel;
  std::vector<std::vector<float>> out;
  std::vector<float> ws;
  lms::KernelArgs args;
};

void attention(benchmark::State& state, const Problem& p) {
  const lms::Shape q = {p.n, p.h, p.t, p.d}, l = {p.n, p.h, p.t};
  const lms::Attrs attrs = {{"softmax_scale", 0.125}, {"causal", int64_t{p.causal ? 1 : 0}}};
  std::mt19937 rng(1);
  std::vector<std::vector<float>> in;
  for (int i = 0; i < 3; ++i) in.push_back(random_floats(lms::num_elements(q), rng));
  std::vector<float> dout = random_floats(lms::num_elements(q), rng);
  Run fwd, bwd;
  auto make = [&](Run& r, lms::KernelSpec spec, std::vector<float*> inputs) -> bool {
    auto k = lms::cpu::create_cpu_kernel(spec, context());
    if (!k.ok()) {
      state.SkipWithError(std::string(k.status().message()).c_str());
      return false;
    }
    r.kernel = std::move(*k);
    for (const lms::Shape& s : spec.output_shapes) r.out.emplace_back(lms::num_elements(s));
    r.ws.resize(r.kernel->workspace_bytes() / 4 + 16);
    r.args.inputs = inputs;
    for (auto& o : r.out) r.args.outputs.push_back(o.data());
    r.args.workspace = r.ws.data();
    return true;
  };
  if (!make(fwd, {"attention", lms::OpKind::kAttention, attrs, {q, q, q}, {q, l}},
            {in[0].data(), in[1].data(), in[2].data()})) {
    return;
  }
  if (!make(bwd,
            {"attention_bwd", lms::OpKind::kAttentionBwd, attrs, {q, q, q, q, l, q}, {q, q, q}},
            {in[0].data(), in[1].data(), in[2].data(), fwd.out[0].data(), fwd.out[1].data(),
             dout.data()})) {
    return;
  }
  for (auto _ : state) {
    if (!fwd.kernel->run(fwd.args).ok() || !bwd.kernel->run(bwd.args).ok()) {
      state.SkipWithError("attention kernel failed");
    }
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(p.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["workspace_KiB"] =
      (fwd.kernel->workspace_bytes() + bwd.kernel->workspace_bytes()) / 1024.0;
}

void matmul(benchmark::State& state, const Problem& p) {
  auto& ctx = context();
  const memory::dim b = p.n * p.h, t = p.t, d = p.d;
  const memory::desc a_md({b, t, d}, memory::data_type::f32, memory::format_tag::abc);
  const memory::desc b_md({b, d, t}, memory::data_type::f32, memory::format_tag::acb);
  const memory::desc c_md({b, t, t}, memory::data_type::f32, memory::format_tag::abc);
  dnnl::matmul mm(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), ctx.engine));
  memory a(a_md, ctx.engine), bm(b_md, ctx.engine), c(c_md, ctx.engine);
  std::mt19937 rng(1);
  auto fill = [&](memory& m) {
    std::vector<float> v = random_floats(m.get_desc().get_size() / 4, rng);
    std::copy(v.begin(), v.end(), static_cast<float*>(m.get_data_handle()));
  };
  fill(a);
  fill(bm);
  for (auto _ : state) {
    mm.execute(ctx.stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, c}});
    ctx.stream.wait();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * b * t * t * d * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

struct Register {
  Register() {
    for (const Problem& p : kProblems) {
      benchmark::RegisterBenchmark((std::string("attention/") + p.name).c_str(),
                                   [p](benchmark::State& s) { attention(s, p); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark((std::string("matmul/") + p.name).c_str(),
                                   [p](benchmark::State& s) { matmul(s, p); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
} register_all;

}  // namespace

BENCHMARK_MAIN();
