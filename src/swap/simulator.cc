#include "swap/simulator.h"

#include <algorithm>
#include <deque>

#include "graph/op_registry.h"

namespace lms::swap {
namespace {

enum Stream : int { kCompute = 0, kD2H = 1, kH2D = 2, kComm = 3 };

Stream stream_of(const Node& n) {
  switch (op_def(n.op).exec) {
    case OpExec::kKernel:
      return kCompute;
    case OpExec::kCopyToHost:
      return kD2H;
    case OpExec::kCopyToDevice:
      return kH2D;
    case OpExec::kCollective:
      return kComm;
  }
  return kCompute;
}

class Simulator {
 public:
  Simulator(const Graph& graph, const Liveness& live, const std::vector<double>& times,
            const SimOptions& options)
      : graph_(graph),
        live_(live),
        times_(times),
        options_(options),
        frees_at_(live.size()),
        outputs_at_(live.size(), 0) {
    result_.start_s.assign(live.size(), 0);
    result_.end_s.assign(live.size(), 0);
  }
  SimResult run();

 private:
  void index_tensors();
  void release_completed();
  void allocate(int32_t p, uint64_t bytes);
  void launch(int32_t p);
  void free_after(int32_t p);

  const Graph& graph_;
  const Liveness& live_;
  const std::vector<double>& times_;  // by position; missing entries count as 0
  double time(int32_t p) const { return p < static_cast<int32_t>(times_.size()) ? times_[p] : 0; }
  const SimOptions& options_;
  std::vector<std::vector<TensorId>> frees_at_;  // tensors freed at (e) of each position
  // By TensorId: the position of the latest swap_out or all_reduce reading
  // the tensor (-1: none); its release waits for that copy or exchange
  // wherever it happens.
  std::vector<int32_t> side_reader_;
  std::vector<uint64_t> outputs_at_;  // device bytes allocated at each issue
  struct Deferred {
    double time;
    uint64_t bytes;
  };
  std::deque<Deferred> deferred_;
  double host_ = 0;
  double stream_free_[4] = {0, 0, 0, 0};
  // The compute stream's next node waits for copies that end by then: D2H
  // copies of buffers released at fixed points (wait_at_release) and, at the
  // commit, every copy issued so far.
  double compute_fence_ = 0;
  // When the compute stream reaches the current issue point: what a copy
  // issued now waits for (Notes [Swap-out] and [Swap-in trigger]).
  double compute_reached() const { return std::max(stream_free_[kCompute], compute_fence_); }
  bool compute_started_ = false;
  uint64_t in_use_ = 0;
  SimResult result_;
};

void Simulator::index_tensors() {
  in_use_ = live_.persistent_bytes;
  for (const TensorLife& t : live_.tensors) {
    if (!t.on_device || t.persistent) continue;
    if (t.input)
      in_use_ += t.bytes;
    else
      outputs_at_[t.first] += t.bytes;
  }
  result_.peak_device_bytes = in_use_;
  for (TensorId id = 0; id < static_cast<TensorId>(live_.tensors.size()); ++id) {
    const TensorLife& t = live_.tensors[id];
    if (t.on_device && !t.persistent && !t.fetched) frees_at_[t.last].push_back(id);
  }
  side_reader_.assign(live_.tensors.size(), -1);
  for (int32_t p = 0; p < live_.size(); ++p) {
    const Node& n = graph_.node(live_.order[p]);
    if (stream_of(n) != kD2H && stream_of(n) != kComm) continue;
    for (TensorId t : n.inputs) side_reader_[t] = std::max(side_reader_[t], p);
  }
}

void Simulator::release_completed() {
  while (!deferred_.empty() && deferred_.front().time <= host_) {
    in_use_ -= deferred_.front().bytes;
    deferred_.pop_front();
  }
}

void Simulator::allocate(int32_t p, uint64_t bytes) {
  release_completed();
  const uint64_t budget = options_.device_budget_bytes;
  while (budget > 0 && in_use_ + bytes > budget && !deferred_.empty()) {
    // Deferred frees complete in D2H order, so the oldest is the earliest.
    const double wait = std::max(0.0, deferred_.front().time - host_);
    result_.host_blocked_s += wait;
    host_ += wait;
    in_use_ -= deferred_.front().bytes;
    deferred_.pop_front();
  }
  if (budget > 0 && in_use_ + bytes > budget && !result_.out_of_memory) {
    result_.out_of_memory = true;
    result_.oom_position = p;
  }
  in_use_ += bytes;
}

void Simulator::launch(int32_t p) {
  const NodeId id = live_.order[p];
  const Node& node = graph_.node(id);
  const Stream stream = stream_of(node);
  double ready = std::max(host_, stream_free_[stream]);
  ready = std::max(ready, stream == kCompute ? compute_fence_ : compute_reached());
  auto wait_for = [&](NodeId dep) {
    if (dep != kNoNode && stream_of(graph_.node(dep)) != stream) {
      ready = std::max(ready, result_.end_s[live_.position[dep]]);
    }
  };
  for (TensorId t : node.inputs) wait_for(graph_.tensor(t).producer);
  for (NodeId c : node.control_inputs) wait_for(c);
  if (stream == kCompute) {
    // Per Note [Stall], the host issues instantly unless it waits for memory, so
    // any idle time of the compute stream is a wait on a copy.
    if (compute_started_) result_.stall_s += ready - stream_free_[kCompute];
    compute_started_ = true;
    result_.compute_s += time(p);
  }
  if (stream == kD2H) result_.bytes_d2h += graph_.tensor(node.inputs[0]).bytes();
  if (stream == kH2D) result_.bytes_h2d += graph_.tensor(node.inputs[0]).bytes();
  result_.start_s[p] = ready;
  result_.end_s[p] = ready + time(p);
  stream_free_[stream] = result_.end_s[p];
}

void Simulator::free_after(int32_t p) {
  const bool copy_stream = stream_of(graph_.node(live_.order[p])) == kD2H;
  // Per Note [Swap-out release], stream-ordered, the compute stream waits for a
  // swap-out (with wait_at_release) or an all-reduce (always:
  // Note [All-reduce]) still reading a buffer released here, whether it is the
  // buffer's last reader or a compute node after it is (the executor waits on
  // the event either way).
  for (TensorId t : frees_at_[p]) {
    const int32_t reader = side_reader_[t];
    if (reader < 0 || reader > p) continue;
    const bool comm = stream_of(graph_.node(live_.order[reader])) == kComm;
    if (comm || options_.wait_at_release) {
      compute_fence_ = std::max(compute_fence_, result_.end_s[reader]);
    }
  }
  for (TensorId t : frees_at_[p]) {
    const uint64_t bytes = live_.tensors[t].bytes;
    // Note [Memory accounting] point 4: a buffer last read by a D2H copy
    // returns to the pool only when that copy has completed.
    if (copy_stream && !options_.wait_at_release) {
      deferred_.push_back({result_.end_s[p], bytes});
    } else {
      in_use_ -= bytes;
    }
  }
}

SimResult Simulator::run() {
  index_tensors();
  host_ = options_.input_upload_s;
  for (int32_t p = 0; p < live_.size(); ++p) {
    if (p == live_.commit) {
      // Per Note [Step commit], compute waits for every copy issued so far.
      compute_fence_ =
          std::max({compute_fence_, stream_free_[kD2H], stream_free_[kH2D], stream_free_[kComm]});
    }
    allocate(p, outputs_at_[p] + live_.workspace[p]);
    result_.peak_device_bytes = std::max(result_.peak_device_bytes, in_use_);
    launch(p);
    in_use_ -= live_.workspace[p];
    free_after(p);
  }
  result_.step_time_s = host_;
  for (double end : result_.end_s) result_.step_time_s = std::max(result_.step_time_s, end);
  return result_;
}

}  // namespace

SimResult simulate(const Graph& graph, const Liveness& live, const std::vector<double>& node_time_s,
                   const SimOptions& options) {
  return Simulator(graph, live, node_time_s, options).run();
}

}  // namespace lms::swap
