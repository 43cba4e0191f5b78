// lms::profile_step and lms::calibrate_cost_model (lms/profile.h).
#include "lms/profile.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "backend/kernel.h"
#include "common/mutex.h"
#include "graph/op_registry.h"
#include "lms/device.h"
#include "lms/profiler/event_sink.h"
#include "lms/status.h"
#include "lms/units.h"
#include "runtime/kernel_spec.h"
#include "swap/cost_model.h"

namespace lms {
namespace {

// Catches the spans the device reports for kernels and copies, and forwards
// every event to the user's sink. Only one kernel or copy is in flight at a
// time while profiling, so the last span is the one of the work just waited
// for.
class SpanCatcher final : public EventSink {
 public:
  explicit SpanCatcher(EventSink* next) : next_(next) {}

  void clear() {
    MutexLock lock(&mu_);
    span_s_ = -1;
  }
  double span_s() const {  // -1: the device reported none
    MutexLock lock(&mu_);
    return span_s_;
  }

  void on_node(StreamKind stream, std::string_view node, std::string_view op, double start_s,
               double end_s) override {
    if (stream == StreamKind::kCompute) set(end_s - start_s);
    if (next_ != nullptr) next_->on_node(stream, node, op, start_s, end_s);
  }
  void on_copy(StreamKind stream, std::string_view tensor, uint64_t bytes, double start_s,
               double end_s) override {
    set(end_s - start_s);
    if (next_ != nullptr) next_->on_copy(stream, tensor, bytes, start_s, end_s);
  }
  void on_memory(MemoryKind memory, uint64_t bytes_in_use, double t_s) override {
    if (next_ != nullptr) next_->on_memory(memory, bytes_in_use, t_s);
  }
  void on_stall(StreamKind stream, std::string_view reason, std::string_view node, double start_s,
                double end_s) override {
    if (next_ != nullptr) next_->on_stall(stream, reason, node, start_s, end_s);
  }
  void on_issue(std::string_view node, std::string_view op, double t_s) override {
    if (next_ != nullptr) next_->on_issue(node, op, t_s);
  }
  void on_host_wait(std::string_view reason, std::string_view node, double start_s,
                    double end_s) override {
    if (next_ != nullptr) next_->on_host_wait(reason, node, start_s, end_s);
  }
  void on_step(int64_t step, double start_s, double end_s) override {
    if (next_ != nullptr) next_->on_step(step, start_s, end_s);
  }

 private:
  void set(double s) {
    MutexLock lock(&mu_);
    span_s_ = std::max(s, 0.0);
  }

  EventSink* const next_;
  mutable absl::Mutex mu_;
  double span_s_ ABSL_GUARDED_BY(mu_) = -1;
};

// Sets the catcher as the device's sink for the profiler's lifetime, then
// leaves the device with the user's sink.
class SinkScope {
 public:
  SinkScope(Device& device, SpanCatcher* catcher, EventSink* after)
      : device_(device), after_(after) {
    device_.set_event_sink(catcher);
  }
  ~SinkScope() {
    (void)device_.synchronize();  // no event may reach the catcher after this
    device_.set_event_sink(after_);
  }
  SinkScope(const SinkScope&) = delete;
  SinkScope& operator=(const SinkScope&) = delete;

 private:
  Device& device_;
  EventSink* const after_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One timed piece of work: `issue` enqueues it on `stream`; the time is the
// span the device reports, else the host's from issue to the completion of
// an event recorded after it. `*from_device` is cleared when any run had no
// device span.
template <typename Issue>
double time_once(Device& device, SpanCatcher& catcher, Event& done, StreamKind stream, Issue issue,
                 bool* from_device) {
  catcher.clear();
  const double start_s = now_s();
  issue();
  device.record(done, stream);
  device.synchronize(done);
  const double host_s = now_s() - start_s;
  const double span_s = catcher.span_s();
  if (span_s >= 0) return span_s;
  *from_device = false;
  return host_s;
}

absl::Status check_options(const ProfileOptions& o) {
  auto bad = [](absl::string_view field, auto value, absl::string_view allowed) {
    return absl::InvalidArgumentError(absl::StrCat("profile_step: ProfileOptions::", field, " is ",
                                                   value, "; allowed: ", allowed));
  };
  if (o.warmup_runs < 0) return bad("warmup_runs", o.warmup_runs, ">= 0");
  if (o.runs < 1) return bad("runs", o.runs, ">= 1");
  if (o.copy_runs < 1) return bad("copy_runs", o.copy_runs, ">= 1");
  if (o.link && o.copy_sizes.empty()) {
    return bad("copy_sizes", "empty", "at least one size > 0 when `link` is true");
  }
  for (uint64_t s : o.copy_sizes) {
    if (s == 0) return bad("copy_sizes", "holding 0", "sizes > 0 bytes");
  }
  return absl::OkStatus();
}

// Device buffers of deterministic input data, reused across nodes by size
// (uploads can be slow: an emulated link throttles them too), and freed
// when memory is needed.
class InputPool {
 public:
  InputPool(Device& device, uint64_t seed) : device_(device), seed_(seed) {}
  ~InputPool() { release_all(); }
  InputPool(const InputPool&) = delete;
  InputPool& operator=(const InputPool&) = delete;

  // A filled buffer of `bytes` not yet taken for the current node. Float
  // inputs get the random pattern; int64 inputs (embedding ids) zeros, an
  // id every table has.
  absl::StatusOr<void*> take(uint64_t bytes, DType dtype) {
    for (Buffer& b : buffers_) {
      if (!b.taken && b.bytes == bytes && b.dtype == dtype) {
        b.taken = true;
        return b.ptr;
      }
    }
    LMS_ASSIGN_OR_RETURN(void* p, allocate(bytes));
    buffers_.push_back({p, bytes, dtype, true});
    absl::Status filled = dtype == DType::kInt64 ? fill_zeros(p, bytes) : fill(p, bytes);
    if (!filled.ok()) {
      buffers_.back().taken = false;
      return filled;
    }
    return p;
  }

  // Device memory for outputs and workspace; frees idle input buffers and
  // tries again when the device is full.
  absl::StatusOr<void*> allocate(uint64_t bytes) {
    absl::StatusOr<void*> p = device_.allocate(bytes);
    if (p.ok() || !absl::IsResourceExhausted(p.status())) return p;
    if (!release_idle()) return p;
    return device_.allocate(bytes);
  }

  void end_node() {
    for (Buffer& b : buffers_) b.taken = false;
  }

  void release_all() {
    end_node();
    release_idle();
  }

 private:
  struct Buffer {
    void* ptr;
    uint64_t bytes;
    DType dtype;
    bool taken;
  };

  bool release_idle() {
    const size_t before = buffers_.size();
    std::erase_if(buffers_, [&](const Buffer& b) {
      if (b.taken) return false;
      device_.deallocate(b.ptr);
      return true;
    });
    return buffers_.size() != before;
  }

  absl::Status fill_zeros(void* p, uint64_t bytes) {
    const std::vector<char> zeros(bytes, 0);
    return device_.upload(p, zeros.data(), bytes);
  }

  absl::Status fill(void* p, uint64_t bytes) {
    constexpr uint64_t kPatternFloats = uint64_t{1} << 20;  // 4 MiB, repeated
    if (pattern_.empty()) {
      pattern_.resize(kPatternFloats);
      std::mt19937_64 gen(seed_);
      std::uniform_real_distribution<float> u(1.0f, 2.0f);
      for (float& x : pattern_) x = u(gen);
    }
    const uint64_t chunk = pattern_.size() * sizeof(float);
    for (uint64_t off = 0; off < bytes; off += chunk) {
      LMS_RETURN_IF_ERROR(device_.upload(static_cast<char*>(p) + off, pattern_.data(),
                                         std::min(chunk, bytes - off)));
    }
    return absl::OkStatus();
  }

  Device& device_;
  const uint64_t seed_;
  std::vector<float> pattern_;
  std::vector<Buffer> buffers_;
};

// The device buffers of one node's run, freed on destruction (inputs go back
// to the pool).
class NodeBuffers {
 public:
  NodeBuffers(Device& device, InputPool& pool) : device_(device), pool_(pool) {}
  ~NodeBuffers() {
    for (void* p : owned_) device_.deallocate(p);
    pool_.end_node();
  }
  NodeBuffers(const NodeBuffers&) = delete;
  NodeBuffers& operator=(const NodeBuffers&) = delete;

  absl::Status allocate(const Graph& g, const Node& n, uint64_t workspace) {
    for (TensorId t : n.inputs) {
      const uint64_t bytes = g.tensor(t).bytes();
      float* p = nullptr;
      if (bytes > 0) {
        LMS_ASSIGN_OR_RETURN(void* v, pool_.take(bytes, g.tensor(t).dtype));
        p = static_cast<float*>(v);
      }
      args.inputs.push_back(p);
    }
    for (TensorId t : n.outputs) {
      LMS_ASSIGN_OR_RETURN(void* p, own(g.tensor(t).bytes()));
      args.outputs.push_back(static_cast<float*>(p));
    }
    LMS_ASSIGN_OR_RETURN(args.workspace, own(workspace));
    return absl::OkStatus();
  }

  KernelArgs args;

 private:
  absl::StatusOr<void*> own(uint64_t bytes) {
    if (bytes == 0) return nullptr;
    LMS_ASSIGN_OR_RETURN(void* p, pool_.allocate(bytes));
    owned_.push_back(p);
    return p;
  }

  Device& device_;
  InputPool& pool_;
  std::vector<void*> owned_;
};

// Bytes node `n` needs alone, for the error message.
std::string node_bytes_text(const Graph& g, const Node& n, uint64_t workspace) {
  uint64_t in = 0, out = 0;
  for (TensorId t : n.inputs) in += g.tensor(t).bytes();
  for (TensorId t : n.outputs) out += g.tensor(t).bytes();
  return absl::StrCat(format_bytes(in + out + workspace), " (inputs ", format_bytes(in),
                      ", outputs ", format_bytes(out), ", workspace ", format_bytes(workspace),
                      ")");
}

struct NodeTimer {
  Device& device;
  SpanCatcher& catcher;
  Event& done;
  const ProfileOptions& options;
  InputPool& pool;
  bool from_device = true;

  // One attempt at timing node `id`; ResourceExhausted when its buffers do
  // not fit.
  absl::StatusOr<double> attempt(const Graph& g, NodeId id, Kernel& kernel) {
    const Node& n = g.node(id);
    NodeBuffers buffers(device, pool);
    LMS_RETURN_IF_ERROR(buffers.allocate(g, n, kernel.workspace_bytes()));
    // ProfileOptions::cold_input_min_bytes: the large inputs, evicted from
    // the caches before each run.
    std::vector<std::pair<const void*, uint64_t>> cold;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const uint64_t bytes = g.tensor(n.inputs[i]).bytes();
      if (buffers.args.inputs[i] != nullptr && bytes >= options.cold_input_min_bytes) {
        cold.emplace_back(buffers.args.inputs[i], bytes);
      }
    }
    std::vector<double> times;
    for (int r = 0; r < options.warmup_runs + options.runs; ++r) {
      for (const auto& [ptr, bytes] : cold) device.evict_from_caches(ptr, bytes);
      const double t = time_once(
          device, catcher, done, StreamKind::kCompute,
          [&] { device.launch(kernel, buffers.args, n.name, op_name(n.op)); }, &from_device);
      if (r >= options.warmup_runs) times.push_back(t);
    }
    absl::Status ran = device.synchronize();
    if (!ran.ok()) {
      return absl::Status(ran.code(), absl::StrCat("profile_step: running node '", n.name, "' (op ",
                                                   n.op, "): ", ran.message()));
    }
    return median(std::move(times));
  }

  // The node's time, or ResourceExhausted naming it when even an empty pool
  // leaves too little device memory.
  absl::StatusOr<double> time_node(const Graph& g, NodeId id) {
    const Node& n = g.node(id);
    LMS_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, compile_node(g, id, device));
    absl::StatusOr<double> t = attempt(g, id, *kernel);
    if (!absl::IsResourceExhausted(t.status())) return t;
    pool.release_all();  // start from a device without the pool's buffers
    t = attempt(g, id, *kernel);
    if (!absl::IsResourceExhausted(t.status())) return t;
    pool.release_all();  // the figures below are the device's, not ours
    const AllocatorStats mem = device.memory_stats();
    return absl::ResourceExhaustedError(absl::StrCat(
        "profile_step: node '", n.name, "' (op ", n.op, ") needs ",
        node_bytes_text(g, n, kernel->workspace_bytes()),
        " of device memory on its own, more than ", device.name(), " can give (capacity ",
        format_bytes(mem.capacity_bytes), ", in use ", format_bytes(mem.bytes_in_use),
        ", largest free chunk ", format_bytes(mem.largest_free_chunk),
        "); a node's inputs, outputs and workspace must fit the device together: use a "
        "larger device or a smaller batch. Allocator: ",
        t.status().message()));
  }
};

struct LineFit {
  double bytes_per_s = 0;
  double latency_s = 0;
};

// seconds = latency + bytes / bandwidth, least squares over (bytes, seconds);
// through the origin when the intercept comes out negative.
LineFit fit_line(const std::vector<std::pair<double, double>>& points) {
  const double n = static_cast<double>(points.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double det = n * sxx - sx * sx;
  double slope = det > 0 ? (n * sxy - sx * sy) / det : 0;
  double intercept = det > 0 ? (sy - slope * sx) / n : -1;
  if (intercept < 0 || slope <= 0) {
    intercept = 0;
    slope = sxx > 0 ? sxy / sxx : 0;
  }
  LineFit fit;
  fit.latency_s = intercept;
  // A link so fast that no time was measured: report the best single copy.
  fit.bytes_per_s = slope > 0 ? 1.0 / slope : (sy > 0 ? sx / sy : 1e15);
  return fit;
}

absl::Status profile_link(Device& device, SpanCatcher& catcher, Event& done,
                          const ProfileOptions& o, StepProfile& out) {
  const uint64_t device_cap = device.memory_stats().capacity_bytes / 4;
  const uint64_t host_cap = device.host_stats().capacity_bytes / 4;
  std::vector<uint64_t> sizes;
  for (uint64_t s : o.copy_sizes)
    sizes.push_back(std::max<uint64_t>(std::min({s, device_cap, host_cap}), 1));
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const uint64_t largest = sizes.back();
  absl::StatusOr<void*> dev = device.allocate(largest);
  if (!dev.ok()) {
    return absl::Status(dev.status().code(),
                        absl::StrCat("profile_step: allocating ", format_bytes(largest),
                                     " of device memory to time copies: ", dev.status().message()));
  }
  absl::StatusOr<void*> host = device.allocate_host(largest);
  if (!host.ok()) {
    device.deallocate(*dev);
    return absl::Status(
        host.status().code(),
        absl::StrCat("profile_step: allocating ", format_bytes(largest),
                     " of pinned host memory to time copies: ", host.status().message()));
  }
  std::vector<std::pair<double, double>> d2h, h2d;
  bool from_device = true;
  for (uint64_t s : sizes) {
    for (StreamKind dir : {StreamKind::kD2H, StreamKind::kH2D}) {
      std::vector<double> times;
      for (int r = 0; r < 1 + o.copy_runs; ++r) {
        const double t = time_once(
            device, catcher, done, dir,
            [&] {
              if (dir == StreamKind::kD2H) {
                device.copy_d2h(*host, *dev, s, "profile_step/link");
              } else {
                device.copy_h2d(*dev, *host, s, "profile_step/link");
              }
            },
            &from_device);
        if (r > 0) times.push_back(t);
      }
      (dir == StreamKind::kD2H ? d2h : h2d).push_back({static_cast<double>(s), median(times)});
    }
  }
  absl::Status copied = device.synchronize();
  device.deallocate_host(*host);
  device.deallocate(*dev);
  if (!copied.ok()) {
    return absl::Status(copied.code(),
                        absl::StrCat("profile_step: timing copies: ", copied.message()));
  }
  const LineFit down = fit_line(d2h), up = fit_line(h2d);
  out.link.d2h_bytes_per_s = down.bytes_per_s;
  out.link.h2d_bytes_per_s = up.bytes_per_s;
  out.d2h_latency_s = down.latency_s;
  out.h2d_latency_s = up.latency_s;
  out.link.copy_latency_s = 0.5 * (down.latency_s + up.latency_s);
  out.link_measured = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StepProfile> profile_step(const Graph& graph, Device& device,
                                         const ProfileOptions& options) {
  const double start_s = now_s();
  LMS_RETURN_IF_ERROR(check_options(options));
  LMS_RETURN_IF_ERROR(verify(graph));
  StepProfile out;
  out.device = device.name();
  out.node_time_s.assign(graph.num_nodes(), -1.0);
  // Work left on the device would be timed with ours, and its error taken for ours.
  if (absl::Status pending = device.synchronize(); !pending.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("profile_step: device ", device.name(),
                     " holds an error of earlier work (read it with Device::synchronize() "
                     "first): ",
                     pending.message()));
  }
  SpanCatcher catcher(options.sink);
  SinkScope scope(device, &catcher, options.sink);
  std::unique_ptr<Event> done = device.create_event();
  if (options.link) LMS_RETURN_IF_ERROR(profile_link(device, catcher, *done, options, out));
  if (options.nodes) {
    InputPool pool(device, options.seed);
    NodeTimer timer{device, catcher, *done, options, pool};
    std::vector<bool> timed(graph.num_nodes(), options.only_nodes.empty());
    for (NodeId id : options.only_nodes) {
      if (id < 0 || id >= graph.num_nodes()) {
        return absl::InvalidArgumentError(absl::StrCat("profile_step: only_nodes holds node id ",
                                                       id, "; allowed: 0 to ",
                                                       graph.num_nodes() - 1));
      }
      timed[id] = true;
    }
    for (NodeId id = 0; id < graph.num_nodes(); ++id) {
      const Node& n = graph.node(id);
      if (has_no_kernel(n) || !timed[id]) continue;
      absl::StatusOr<double> t = timer.time_node(graph, id);
      if (absl::IsResourceExhausted(t.status()) && options.skip_nodes_that_do_not_fit) {
        out.unprofiled.push_back(n.name);
        continue;
      }
      LMS_RETURN_IF_ERROR(t.status());
      out.node_time_s[id] = *t;
    }
    out.from_device_events = timer.from_device;
  }
  out.elapsed_s = now_s() - start_s;
  return out;
}

absl::StatusOr<StepProfile> profile_least_workspace_kernels(
    const Graph& graph, Device& device, const std::vector<uint64_t>& workspace_bytes,
    const std::vector<uint64_t>& least_workspace_bytes) {
  Graph lean = graph;
  ProfileOptions options;
  options.link = false;
  options.skip_nodes_that_do_not_fit = true;
  const size_t n = std::min(workspace_bytes.size(), least_workspace_bytes.size());
  for (NodeId id = 0; id < static_cast<NodeId>(n) && id < graph.num_nodes(); ++id) {
    if (least_workspace_bytes[id] >= workspace_bytes[id]) continue;
    lean.mutable_node(id).attrs[std::string(kWorkspaceAttr)] = std::string(kWorkspaceLeast);
    options.only_nodes.push_back(id);
  }
  if (options.only_nodes.empty()) return StepProfile{.device = device.name()};
  return profile_step(lean, device, options);
}

CostModelConfig calibrate_cost_model(const StepProfile& profile, const Graph& graph) {
  CostModelConfig c;
  double best_conv = 0, best_flops = 0, best_bytes = 0, shortest = -1;
  const NodeId n =
      std::min<NodeId>(graph.num_nodes(), static_cast<NodeId>(profile.node_time_s.size()));
  for (NodeId id = 0; id < n; ++id) {
    const double t = profile.node_time_s[id];
    const Node& node = graph.node(id);
    if (!(t >= 0) || has_no_kernel(node)) continue;
    if (shortest < 0 || t < shortest) shortest = t;
    if (t == 0) continue;
    const double flops = node_flops(graph, id);
    if (is_conv_family(node.op)) {
      best_conv = std::max(best_conv, flops / t);
    } else {
      best_bytes = std::max(best_bytes, swap::node_bytes_touched(graph, id) / t);
    }
    best_flops = std::max(best_flops, flops / t);
  }
  if (best_conv > 0) {
    c.compute_flops_per_s = best_conv;
  } else if (best_flops > 0) {
    c.compute_flops_per_s = best_flops;
  }
  if (best_bytes > 0) c.memory_bytes_per_s = best_bytes;
  if (shortest >= 0) c.kernel_launch_s = shortest;
  return c;
}

}  // namespace lms
