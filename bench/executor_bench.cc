// Executor overhead on convolutions: one training step of a chain of
// 3x3 conv layers (1->64, `mid` x 64->64, 64->1; N=16, 64x64, pad 1, bias, the
// VDSR shapes without ReLU) with an MSE loss and SGD,
//   executor  through lms::Session on the emulated CPU device: every node
//             issued by the executor, kernels on the compute thread;
//   direct    the same conv passes as plain oneDNN primitives called in a row
//             from this thread, with the layouts and algorithms the lms
//             kernels choose (Note [Conv layouts] / [Conv algorithm] in
//             conv_kernels.cc: plain NCHW buffers, reorders to blocked where
//             the kernel reorders, Winograd where oneDNN's auto picks it),
//             plus the loss and the SGD updates as plain loops.
// Both run alternately in every iteration, so load changes on a shared
// machine hit both, from the same parameters and feeds (checked: the weights
// after one step agree to weight_mismatch, relative). Counters, medians over
// the iterations: exec_ms / direct_ms and their GFLOP/s (conv FLOPs only);
// exec_over_direct = executor time / direct time (target: under 1.05);
// compute_idle_ms = executor step time minus compute-stream busy time, i.e.
// the time the kernels waited for the host (issue, allocation, feeds, fetch).
//
//   build-*/bench/executor_bench --benchmark_min_time=5 --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_device.h"
#include "backend/cpu/kernels/spatial_plan.h"
#include "dnnl.hpp"
#include "lms/ops.h"
#include "lms/profiler/event_sink.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/training.h"

namespace {

using dnnl::memory;

constexpr int64_t kBatch = 16;
constexpr int64_t kSize = 64;
constexpr int64_t kChannels = 64;
constexpr double kLearningRate = 1e-4;
constexpr uint32_t kSeed = 1;
// Relative weight difference after one step tolerated between the executor
// and the direct primitives (same algorithms; only summation order may differ).
constexpr double kMaxWeightMismatch = 1e-5;

struct Layer {
  int64_t c, k;
  lms::Shape x() const { return {kBatch, c, kSize, kSize}; }
  lms::Shape w() const { return {k, c, 3, 3}; }
  lms::Shape y() const { return {kBatch, k, kSize, kSize}; }
  double flops() const { return 2.0 * kBatch * kSize * kSize * 9 * c * k; }
};

std::vector<Layer> chain(int64_t mid) {
  std::vector<Layer> layers = {{1, kChannels}};
  for (int64_t i = 0; i < mid; ++i) layers.push_back({kChannels, kChannels});
  layers.push_back({kChannels, 1});
  return layers;
}

// Forward and backward weights of every layer, backward data of all but the
// first (the graph input needs no gradient).
double step_flops(const std::vector<Layer>& layers) {
  double f = 0;
  for (const Layer& l : layers) f += 3 * l.flops();
  return f - layers.front().flops();
}

std::vector<float> random_values(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- through the executor ----

// Compute-stream busy time: the executor's step time minus this is the time
// the compute stream sat idle waiting for the host to issue work.
class BusyTime final : public lms::EventSink {
 public:
  void on_node(lms::StreamKind stream, std::string_view, std::string_view, double start_s,
               double end_s) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (stream == lms::StreamKind::kCompute) busy_s_ += end_s - start_s;
  }
  void on_copy(lms::StreamKind, std::string_view, uint64_t, double, double) override {}
  void on_memory(lms::MemoryKind, uint64_t, double) override {}
  void on_stall(lms::StreamKind, std::string_view, std::string_view, double, double) override {}
  void on_step(int64_t, double, double) override {}
  double take_s() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(busy_s_, 0);
  }

 private:
  std::mutex mu_;
  double busy_s_ = 0;
};

struct ExecutorStep {
  BusyTime busy;
  lms::Graph train;
  std::unique_ptr<lms::CpuDevice> device;
  std::unique_ptr<lms::Session> session;
  lms::Feeds feeds;
};

absl::Status build_executor(const std::vector<Layer>& layers, ExecutorStep* e) {
  lms::Graph g;
  lms::TensorId h = g.input("x", layers.front().x());
  for (size_t i = 0; i < layers.size(); ++i) {
    h = lms::conv2d(g, "conv" + std::to_string(i + 1), h, layers[i].k, {3},
                    {.pad = {1}, .bias = true, .seed = i + 1});
  }
  lms::TensorId loss = lms::mse_loss(g, "loss", h, g.input("target", layers.back().y()));
  LMS_RETURN_IF_ERROR(g.status());
  LMS_ASSIGN_OR_RETURN(e->train, lms::training_graph(g, loss, lms::Sgd{.lr = kLearningRate}));
  LMS_ASSIGN_OR_RETURN(e->device, lms::CpuDevice::create({.capacity_bytes = uint64_t{2} << 30}));
  LMS_ASSIGN_OR_RETURN(
      e->session, lms::Session::create(e->train, *e->device, {.fetches = {}, .sink = &e->busy}));
  std::mt19937 rng(kSeed);
  e->feeds["x"] = random_values(lms::num_elements(layers.front().x()), rng);
  e->feeds["target"] = random_values(lms::num_elements(layers.back().y()), rng);
  return absl::OkStatus();
}

// ---- straight through oneDNN ----

// A list of oneDNN primitives over user buffers in plain layouts, with
// reorders to and from the layouts the primitives want, as PlanBuilder does.
class DirectStep {
 public:
  explicit DirectStep(const std::vector<Layer>& layers)
      : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_), layers_(layers) {
    std::mt19937 rng(kSeed);
    act_.push_back(user(layers.front().x(), &rng));  // act_[i] = input of layer i
    for (const Layer& l : layers) {
      w_.push_back(user(l.w(), &rng));
      b_.push_back(user({l.k}, nullptr));
      dw_.push_back(user(l.w(), nullptr));
      db_.push_back(user({l.k}, nullptr));
      act_.push_back(user(l.y(), nullptr));
      dact_.push_back(user(l.y(), nullptr));  // dact_[i] = gradient of layer i's output
    }
    target_ = user(layers.back().y(), &rng);
    for (size_t i = 0; i < layers.size(); ++i) add_forward(i);
    backward_from_ = steps_.size();
    for (size_t i = layers.size(); i-- > 0;) {
      if (i > 0) add_backward_data(i);
      add_backward_weights(i);
    }
  }

  // Starts from the executor's state: its parameters and feeds.
  absl::Status copy_state(const lms::Session& session, const lms::Feeds& feeds) {
    auto put = [](const std::vector<float>& v, const memory& m) {
      if (v.size() * sizeof(float) != m.get_desc().get_size()) {
        return absl::InternalError("executor and direct step disagree on a tensor's size");
      }
      std::copy(v.begin(), v.end(), data(m));
      return absl::OkStatus();
    };
    LMS_RETURN_IF_ERROR(put(feeds.at("x"), act_.front()));
    LMS_RETURN_IF_ERROR(put(feeds.at("target"), target_));
    for (size_t i = 0; i < layers_.size(); ++i) {
      LMS_ASSIGN_OR_RETURN(std::vector<float> w, session.read(param(i, "w")));
      LMS_ASSIGN_OR_RETURN(std::vector<float> b, session.read(param(i, "b")));
      LMS_RETURN_IF_ERROR(put(w, w_[i]));
      LMS_RETURN_IF_ERROR(put(b, b_[i]));
    }
    return absl::OkStatus();
  }

  // The largest |difference| between this step's weights and the executor's,
  // relative to the largest |weight|.
  double weight_mismatch(const lms::Session& session) const {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < layers_.size(); ++i) {
      std::vector<float> v = session.read(param(i, "w")).value_or(std::vector<float>());
      if (v.size() * sizeof(float) != w_[i].get_desc().get_size()) return INFINITY;
      const float* mine = data(w_[i]);
      for (size_t j = 0; j < v.size(); ++j) {
        diff = std::max(diff, static_cast<double>(std::abs(v[j] - mine[j])));
        scale = std::max(scale, static_cast<double>(std::abs(v[j])));
      }
    }
    return diff / std::max(scale, 1e-30);
  }

  double loss() const { return loss_; }

  static std::string param(size_t layer, const char* what) {
    return "conv" + std::to_string(layer + 1) + "/" + what;
  }

  void run() {
    for (size_t s = 0; s < backward_from_; ++s) execute(s);
    stream_.wait();
    mse_gradient();
    for (size_t s = backward_from_; s < steps_.size(); ++s) execute(s);
    stream_.wait();
    sgd_update();
  }

 private:
  struct Step {
    dnnl::primitive prim;
    std::unordered_map<int, memory> args;
  };

  memory user(const lms::Shape& s, std::mt19937* rng) {
    memory m(lms::cpu::plain_desc(s), engine_);
    auto* p = static_cast<float*>(m.get_data_handle());
    std::vector<float> v = rng ? random_values(lms::num_elements(s), *rng)
                               : std::vector<float>(lms::num_elements(s), 0.f);
    std::copy(v.begin(), v.end(), p);
    return m;
  }

  // Note [Conv layouts], ConvLayout::kAuto.
  static bool blocked(int pass, const Layer& l) {
    if (pass == DNNL_ARG_DIFF_WEIGHTS) return true;
    if (pass == DNNL_ARG_DIFF_SRC) return l.c >= 16;
    return std::min(l.c, l.k) >= 16;
  }

  static dnnl::primitive_attr user_attr() { return lms::cpu::user_scratchpad_attr(); }

  static memory::desc md(const lms::Shape& s, bool any) {
    return any ? lms::cpu::any_desc(s) : lms::cpu::plain_desc(s);
  }

  // Per Note [Conv algorithm], oneDNN's auto choice kept only when it is Winograd.
  template <class MakePd>
  static auto pick(MakePd make) {
    auto pd = make(dnnl::algorithm::convolution_auto);
    if (std::string(pd.impl_info_str()).find("wino") != std::string::npos) return pd;
    return make(dnnl::algorithm::convolution_direct);
  }

  dnnl::convolution_forward::primitive_desc forward_pd(const Layer& l, bool any, bool bias,
                                                       dnnl::algorithm alg,
                                                       const dnnl::primitive_attr& attr) const {
    memory::dims st = {1, 1}, dil = {0, 0}, pad = {1, 1};
    auto prop = dnnl::prop_kind::forward_training;
    auto d = bias ? dnnl::convolution_forward::desc(prop, alg, md(l.x(), any), md(l.w(), any),
                                                    lms::cpu::plain_desc({l.k}), md(l.y(), any), st,
                                                    dil, pad, pad)
                  : dnnl::convolution_forward::desc(prop, alg, md(l.x(), any), md(l.w(), any),
                                                    md(l.y(), any), st, dil, pad, pad);
    return {d, attr, engine_};
  }

  // `user` as the primitive wants it: itself, or a buffer filled by a reorder
  // added now (input) or after the primitive (output, into *after).
  memory bind(const memory& user, const memory::desc& want, bool input, std::vector<Step>* after) {
    if (user.get_desc() == want) return user;
    memory internal(want, engine_);
    const memory& from = input ? user : internal;
    const memory& to = input ? internal : user;
    dnnl::reorder::primitive_desc pd(engine_, from.get_desc(), engine_, to.get_desc(),
                                     lms::cpu::user_scratchpad_attr());
    Step step{dnnl::reorder(pd), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}};
    add_scratchpad(pd.scratchpad_desc(), &step);
    (input ? steps_ : *after).push_back(std::move(step));
    return internal;
  }

  // The kernels run with a user scratchpad (Note [Spatial workspace]); so
  // does this, since the scratchpad mode can change oneDNN's implementation.
  void add_scratchpad(const memory::desc& md, Step* step) {
    if (md.get_size() > 0) step->args[DNNL_ARG_SCRATCHPAD] = memory(md, engine_);
  }

  void add(dnnl::primitive prim, const memory::desc& scratchpad,
           std::vector<std::tuple<int, memory, memory::desc, bool>> args) {
    std::vector<Step> after;
    Step step{std::move(prim), {}};
    for (auto& [arg, mem, want, input] : args) step.args[arg] = bind(mem, want, input, &after);
    add_scratchpad(scratchpad, &step);
    steps_.push_back(std::move(step));
    for (Step& s : after) steps_.push_back(std::move(s));
  }

  void add_forward(size_t i) {
    const Layer& l = layers_[i];
    bool any = blocked(DNNL_ARG_DST, l);
    auto pd = pick([&](dnnl::algorithm a) { return forward_pd(l, any, true, a, user_attr()); });
    add(dnnl::convolution_forward(pd), pd.scratchpad_desc(),
        {{DNNL_ARG_SRC, act_[i], pd.src_desc(), true},
         {DNNL_ARG_WEIGHTS, w_[i], pd.weights_desc(), true},
         {DNNL_ARG_BIAS, b_[i], pd.bias_desc(), true},
         {DNNL_ARG_DST, act_[i + 1], pd.dst_desc(), false}});
  }

  void add_backward_data(size_t i) {
    const Layer& l = layers_[i];
    bool any = blocked(DNNL_ARG_DIFF_SRC, l);
    memory::dims st = {1, 1}, dil = {0, 0}, pad = {1, 1};
    auto pd = pick([&](dnnl::algorithm a) {
      dnnl::convolution_backward_data::desc d(a, md(l.x(), any), md(l.w(), any), md(l.y(), any), st,
                                              dil, pad, pad);
      return dnnl::convolution_backward_data::primitive_desc(
          d, user_attr(), engine_, forward_pd(l, any, false, a, dnnl::primitive_attr()));
    });
    add(dnnl::convolution_backward_data(pd), pd.scratchpad_desc(),
        {{DNNL_ARG_DIFF_DST, dact_[i], pd.diff_dst_desc(), true},
         {DNNL_ARG_WEIGHTS, w_[i], pd.weights_desc(), true},
         {DNNL_ARG_DIFF_SRC, dact_[i - 1], pd.diff_src_desc(), false}});
  }

  void add_backward_weights(size_t i) {
    const Layer& l = layers_[i];
    bool any = blocked(DNNL_ARG_DIFF_WEIGHTS, l);
    memory::dims st = {1, 1}, dil = {0, 0}, pad = {1, 1};
    auto pd = pick([&](dnnl::algorithm a) {
      dnnl::convolution_backward_weights::desc d(a, md(l.x(), any), md(l.w(), any),
                                                 lms::cpu::plain_desc({l.k}), md(l.y(), any), st,
                                                 dil, pad, pad);
      return dnnl::convolution_backward_weights::primitive_desc(
          d, user_attr(), engine_, forward_pd(l, any, true, a, dnnl::primitive_attr()));
    });
    add(dnnl::convolution_backward_weights(pd), pd.scratchpad_desc(),
        {{DNNL_ARG_SRC, act_[i], pd.src_desc(), true},
         {DNNL_ARG_DIFF_DST, dact_[i], pd.diff_dst_desc(), true},
         {DNNL_ARG_DIFF_WEIGHTS, dw_[i], pd.diff_weights_desc(), false},
         {DNNL_ARG_DIFF_BIAS, db_[i], pd.diff_bias_desc(), false}});
  }

  void execute(size_t s) { steps_[s].prim.execute(stream_, steps_[s].args); }

  static float* data(const memory& m) { return static_cast<float*>(m.get_data_handle()); }

  // loss = mean((y - t)^2); dy = 2 (y - t) / n.
  void mse_gradient() {
    const memory& y = act_.back();
    int64_t n = lms::num_elements(layers_.back().y());
    float *py = data(y), *pt = data(target_), *pd = data(dact_.back());
    double loss = 0;
    for (int64_t i = 0; i < n; ++i) {
      float d = py[i] - pt[i];
      loss += d * d;
      pd[i] = 2 * d / n;
    }
    loss_ = loss / n;
  }

  // p -= lr * g (SGD without momentum: velocity = g).
  void sgd_update() {
    auto update = [](const memory& p, const memory& g) {
      size_t n = p.get_desc().get_size() / sizeof(float);
      float *pp = data(p), *pg = data(g);
      for (size_t i = 0; i < n; ++i) pp[i] -= static_cast<float>(kLearningRate) * pg[i];
    };
    for (size_t i = 0; i < layers_.size(); ++i) {
      update(w_[i], dw_[i]);
      update(b_[i], db_[i]);
    }
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::vector<Layer> layers_;
  std::vector<memory> act_, dact_, w_, b_, dw_, db_;
  memory target_;
  std::vector<Step> steps_;
  size_t backward_from_ = 0;
  double loss_ = 0;
};

// ---- the benchmark ----

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void bench_step(benchmark::State& state) {
  std::vector<Layer> layers = chain(state.range(0));
  ExecutorStep e;
  absl::Status st = build_executor(layers, &e);
  if (!st.ok()) {
    state.SkipWithError(std::string(lms::to_std(st.message())).c_str());
    return;
  }
  std::unique_ptr<DirectStep> direct;
  try {
    direct = std::make_unique<DirectStep>(layers);
  } catch (const dnnl::error& err) {
    state.SkipWithError(err.what());
    return;
  }
  // One step from the same state checks that both do the same work (and
  // touches the device pages first).
  st = direct->copy_state(*e.session, e.feeds);
  lms::StepResult r;
  if (st.ok()) st = e.session->run(e.feeds, &r);
  direct->run();
  double mismatch = direct->weight_mismatch(*e.session);
  if (!st.ok() || mismatch > kMaxWeightMismatch) {
    state.SkipWithError(st.ok() ? "the direct step's weights differ from the executor's"
                                : std::string(lms::to_std(st.message())).c_str());
    return;
  }
  state.counters["weight_mismatch"] = mismatch;
  std::vector<double> exec_s, direct_s, idle_s;
  e.busy.take_s();
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    st = e.session->run(e.feeds, &r);
    exec_s.push_back(seconds_since(t0));
    idle_s.push_back(exec_s.back() - e.busy.take_s());
    if (!st.ok()) {
      state.SkipWithError(std::string(lms::to_std(st.message())).c_str());
      return;
    }
    t0 = std::chrono::steady_clock::now();
    direct->run();
    direct_s.push_back(seconds_since(t0));
    state.SetIterationTime(exec_s.back());
  }
  // Medians: a step hit by another process's burst does not move them.
  double exec = median(exec_s), dir = median(direct_s), gflop = step_flops(layers) * 1e-9;
  state.counters["exec_GFLOP/s"] = gflop / exec;
  state.counters["direct_GFLOP/s"] = gflop / dir;
  state.counters["exec_ms"] = 1e3 * exec;
  state.counters["direct_ms"] = 1e3 * dir;
  state.counters["compute_idle_ms"] = 1e3 * median(idle_s);
  state.counters["exec_over_direct"] = exec / dir;
}

// Over repetitions: the min is the figure least disturbed by other processes.
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

// Arg: the number of 64->64 layers between the 1->64 and 64->1 layers.
BENCHMARK(bench_step)
    ->Name("conv_chain_step")
    ->Arg(1)
    ->Arg(4)
    ->UseManualTime()
    ->ComputeStatistics("min", min_of)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
