// Wall time of one VDSR training step (Kim et al., CVPR 2016: 20 3x3 conv
// layers, 64 channels, ReLU, global residual, MSE, Adam) on the emulated CPU
// device, the figure bench/pytorch_vdsr.py measures for PyTorch on the same
// problem (bench/compare_pytorch.sh runs both; results in bench/SPEED.md).
//
//   build-*/bench/vdsr_step_bench --threads 2 --warmup 2 --steps 5 [--profile] [--plain]
//                                 [--no-fuse]
//
// Prints seconds per step (mean, min) and conv GFLOP/s; with --profile, the
// compute-stream time per op (and per conv pass shape) over the timed steps,
// read from the device's node events. The graph goes through lms::rewrite
// with LMS disabled: everything fits the device, so this is pure compute +
// executor overhead, with the activation layouts the rewrite picks (blocked
// between convolutions, Note [Blocked layouts]) and each conv fused with its
// relu (Note [Conv + ReLU fusion]); --no-fuse keeps the relus apart; --plain
// skips the rewrite, so every tensor stays NCHW, every relu is its own node
// and each conv kernel reorders its own.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "flags.h"
#include "fmt/format.h"
#include "lms/device.h"
#include "lms/profiler/event_sink.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/training.h"
#include "models.h"

namespace {

struct Options {
  int threads = 0;  // 0 = all cores (CpuDeviceOptions::compute_threads)
  int warmup = 2;
  int steps = 5;
  int64_t batch = 16;
  int64_t size = 64;
  bool profile = false;
  bool plain = false;    // no lms::rewrite: every tensor NCHW
  bool no_fuse = false;  // rewrite with RewriteOptions::fuse_conv_relu = false
};

// Compute-stream busy time per op, summed over the recorded nodes; conv ops are
// also keyed by the node's layer so the 1->64 and 64->1 layers show apart.
class OpTimes final : public lms::EventSink {
 public:
  explicit OpTimes(int64_t depth) : last_(fmt::format("conv{}", depth)) {}

  void on_node(lms::StreamKind stream, std::string_view node, std::string_view op, double start_s,
               double end_s) override {
    if (stream != lms::StreamKind::kCompute) return;
    std::lock_guard<std::mutex> lock(mu_);
    by_op_[std::string(op)] += end_s - start_s;
    by_node_[std::string(node)] += end_s - start_s;
    busy_s_ += end_s - start_s;
    if (op.starts_with("conv"))
      by_conv_[fmt::format("{} {}", op, layer_kind(node))] += end_s - start_s;
  }
  void on_copy(lms::StreamKind, std::string_view, uint64_t, double, double) override {}
  void on_memory(lms::MemoryKind, uint64_t, double) override {}
  void on_stall(lms::StreamKind, std::string_view, std::string_view, double, double) override {}
  void on_step(int64_t, double start_s, double end_s) override {
    std::lock_guard<std::mutex> lock(mu_);
    step_s_ += end_s - start_s;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    by_op_.clear();
    by_conv_.clear();
    by_node_.clear();
    busy_s_ = step_s_ = 0;
  }

  void print(int steps) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [op, s] : by_op_) rows.push_back({s, op});
    for (const auto& [op, s] : by_conv_) rows.push_back({s, "  " + op});
    std::sort(rows.rbegin(), rows.rend());
    std::printf("per step: step %.3f s, compute busy %.3f s (%.1f%%)\n", step_s_ / steps,
                busy_s_ / steps, 100 * busy_s_ / std::max(step_s_, 1e-12));
    for (const auto& [s, op] : rows) {
      std::printf("  %-34s %8.1f ms %5.1f%%\n", op.c_str(), 1e3 * s / steps, 100 * s / busy_s_);
    }
    std::vector<std::pair<double, std::string>> nodes;
    for (const auto& [node, s] : by_node_) nodes.push_back({s, node});
    std::sort(nodes.rbegin(), nodes.rend());
    nodes.resize(std::min<size_t>(nodes.size(), kSlowestNodes));
    std::printf("slowest nodes:\n");
    for (const auto& [s, node] : nodes)
      std::printf("  %-34s %8.1f ms\n", node.c_str(), 1e3 * s / steps);
  }

 private:
  // VDSR layers are named conv1..convD by build_vdsr (backward nodes
  // "grad/convI/..."); the first and last are the 1->64 and 64->1 layers.
  // A conv fused with its relu is named after the relu ("reluI").
  std::string layer_kind(std::string_view node) const {
    auto is = [&](std::string_view layer) {
      return node == layer || node.find(fmt::format("{}/", layer)) != std::string_view::npos;
    };
    if (is("conv1") || is("relu1")) return "first";
    if (is(last_)) return "last";
    return "64to64";
  }

  static constexpr size_t kSlowestNodes = 12;
  const std::string last_;

  mutable std::mutex mu_;
  std::map<std::string, double> by_op_, by_conv_, by_node_;
  double busy_s_ = 0;
  double step_s_ = 0;
};

void add_flags(CLI::App& app, Options& o) {
  lms::flags::add_int(app, "--threads", &o.threads, "compute threads, 0 = all cores");
  lms::flags::add_int(app, "--warmup", &o.warmup, "untimed steps first");
  lms::flags::add_int(app, "--steps", &o.steps, "timed steps", {.min = 1});
  lms::flags::add_int(app, "--batch", &o.batch, "images per step", {.min = 1});
  lms::flags::add_int(app, "--size", &o.size, "image side in pixels", {.min = 8});
  lms::flags::add_switch(app, "--profile", &o.profile,
                         "compute-stream time per op (and per conv pass shape)");
  lms::flags::add_switch(app, "--plain", &o.plain,
                         "skip lms::rewrite: every tensor NCHW, every relu its own node");
  lms::flags::add_switch(app, "--no-fuse", &o.no_fuse, "keep the relus apart from the convs");
}

// Conv FLOPs of one training step (2*MACs): forward and backward weights of
// every layer, backward data of all but the first (the input needs no gradient).
double step_flops(const lms::models::VdsrConfig& c) {
  double per_ck = 2.0 * c.batch * c.height * c.width * 9;
  double first = per_ck * c.channels, mid = per_ck * c.channels * c.channels;
  double fwd = 2 * first + (c.depth - 2) * mid;
  return 3 * fwd - first;
}

// The fetched loss (the session's default fetch), NaN if absent.
double loss_of(const lms::StepResult& r) {
  auto it = r.fetched.find("loss");
  return it == r.fetched.end() || it->second.empty() ? NAN : it->second[0];
}

std::vector<float> random_values(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

absl::Status run(const Options& o) {
  lms::models::VdsrConfig cfg{.batch = o.batch, .height = o.size, .width = o.size};
  lms::Graph g;
  lms::models::ModelTensors m = lms::models::build_vdsr(g, cfg);
  LMS_RETURN_IF_ERROR(g.status());
  LMS_ASSIGN_OR_RETURN(lms::Graph train, lms::training_graph(g, m.loss, lms::Adam{.lr = 1e-4}));
  LMS_ASSIGN_OR_RETURN(auto device, lms::make_cpu_device({.capacity_bytes = uint64_t{6} << 30,
                                                          .compute_threads = o.threads}));
  if (!o.plain) {
    lms::LmsConfig no_swaps;
    no_swaps.enabled = false;
    LMS_RETURN_IF_ERROR(
        lms::rewrite(train, no_swaps, *device, {.fuse_conv_relu = !o.no_fuse}).status());
  }
  OpTimes times(cfg.depth);
  LMS_ASSIGN_OR_RETURN(
      auto session,
      lms::Session::create(train, *device, {.fetches = {}, .sink = o.profile ? &times : nullptr}));
  const uint32_t seed = 1;
  std::printf(
      "VDSR step: batch %lld, %lldx%lld, depth %lld, %lld channels, Adam; threads %d; "
      "seed %u; OMP_WAIT_POLICY=%s\n",
      static_cast<long long>(o.batch), static_cast<long long>(o.size),
      static_cast<long long>(o.size), static_cast<long long>(cfg.depth),
      static_cast<long long>(cfg.channels), o.threads, seed,
      std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "(unset)");
  std::mt19937 rng(seed);
  int64_t n = o.batch * o.size * o.size;
  lms::Feeds feeds = {{"lr", random_values(n, rng)}, {"hr", random_values(n, rng)}};
  std::vector<double> step_s;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    lms::StepResult r;
    if (i == o.warmup) times.clear();
    LMS_RETURN_IF_ERROR(session->run(feeds, &r));
    if (i >= o.warmup) step_s.push_back(r.step_s);
    std::printf("step %d%s: %.3f s, loss %.6f\n", i, i < o.warmup ? " (warm-up)" : "", r.step_s,
                loss_of(r));
  }
  double mean = 0;
  for (double s : step_s) mean += s / step_s.size();
  double best = *std::min_element(step_s.begin(), step_s.end());
  double gflop = step_flops(cfg) * 1e-9;
  std::printf("lms seconds/step: mean %.3f min %.3f  (%.1f GFLOP conv, %.1f GFLOP/s at mean)\n",
              mean, best, gflop, gflop / mean);
  if (o.profile) times.print(o.steps);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("vdsr_step_bench: wall time of one VDSR training step on the emulated CPU device.",
               "vdsr_step_bench");
  add_flags(app, o);
  if (std::optional<int> exit = lms::flags::parse_main(app, argc, argv, 1)) return *exit;
  absl::Status st = run(o);
  if (!st.ok()) {
    std::fprintf(stderr, "vdsr_step_bench: %s\n", std::string(lms::to_std(st.message())).c_str());
    return 1;
  }
  return 0;
}
