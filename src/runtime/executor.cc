#include "runtime/executor.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/float16.h"
#include "lms/profiler/event_sink.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "swap/placement.h"

namespace lms {
namespace {

bool on_host(const Tensor& t) { return t.role == TensorRole::kHost; }

absl::Status with_node(const absl::Status& s, const Node& n) {
  return with_failure_site(with_message(s, absl::StrCat("while issuing node '", n.name, "' (", n.op,
                                                        "): ", s.message())),
                           {kStageNode, n.name});
}

// Host-wait reasons (StepResult::host_wait_by_reason keys).
constexpr std::string_view kWaitPinnedHost = "pinned host block in use by a swap-in";
constexpr std::string_view kWaitUpload = "input upload";
constexpr std::string_view kWaitDownload = "fetch download";
constexpr std::string_view kWaitStepEnd = "step end synchronize";

}  // namespace

Executor::Executor(const ExecutablePlan& plan, Device& device, EventSink* sink)
    : plan_(plan), device_(device), sink_(sink) {}

// Per Note [Stall], the host blocked in a device call is a host wait,
// reported under its reason, never stall. Stall is measured by the device
// on the compute stream (runtime/stall_counter.h).
void Executor::add_host_wait(std::string_view reason, NodeId id, double start_s, double end_s) {
  const double seconds = end_s - start_s;
  auto it = host_wait_by_reason_.find(reason);
  if (it == host_wait_by_reason_.end()) {
    host_wait_by_reason_.emplace(std::string(reason), seconds);
  } else {
    it->second += seconds;
  }
  if (sink_ != nullptr) {
    std::string_view node = id == kNoNode ? std::string_view() : plan_.graph->node(id).name;
    sink_->on_host_wait(reason, node, start_s, end_s);
  }
}

void Executor::host_wait(Event& event, NodeId id, std::string_view reason) {
  const double start = now_s();
  device_.synchronize(event);
  add_host_wait(reason, id, start, now_s());
}

void* Executor::buffer(TensorId t) const {
  return plan_.persistent[t] != nullptr ? plan_.persistent[t] : buffers_[t];
}

std::shared_ptr<Event> Executor::record_on(StreamKind stream) {
  std::shared_ptr<Event> ev = device_.create_event();
  device_.record(*ev, stream);
  return ev;
}

// Pinned host blocks return to the pool lazily, once the H2D copy that read
// them last has completed; the host pool is not the budget the planner
// replays, so timing-dependent order is harmless there.
void Executor::poll_deferred() {
  while (!deferred_.empty() && device_.query(*deferred_.front().event)) {
    device_.deallocate_host(deferred_.front().ptr);
    deferred_.pop_front();
  }
}

void Executor::wait_oldest_deferred(NodeId id) {
  host_wait(*deferred_.front().event, id, kWaitPinnedHost);
  poll_deferred();
}

absl::StatusOr<void*> Executor::allocate_host(uint64_t bytes, NodeId id) {
  poll_deferred();
  while (true) {
    absl::StatusOr<void*> p = device_.allocate_host(bytes);
    if (p.ok() || !absl::IsResourceExhausted(p.status())) return p;
    if (deferred_.empty()) return with_node(p.status(), plan_.graph->node(id));
    wait_oldest_deferred(id);
  }
}

// Per Note [Step layout], a device buffer's address is fixed by the plan; taking
// it needs no allocator and cannot fail. Reusing memory is ordered by
// streams, never by the host (Note [Swap-out release]).
void* Executor::place(TensorId t) {
  LMS_CHECK(plan_.tensor_offset[t] != swap::kNoOffset);
  in_use_ += plan_.placed_bytes[t];
  return plan_.arena + plan_.tensor_offset[t];
}

absl::Status Executor::upload_input(TensorId t, const void* data, size_t count) {
  const Tensor& tensor = plan_.graph->tensor(t);
  if (static_cast<int64_t>(count) != num_elements(tensor.shape)) {
    return absl::InvalidArgumentError(absl::StrCat("feed '", tensor.name, "' has ", count,
                                                   " values, the input needs ",
                                                   num_elements(tensor.shape)));
  }
  buffers_[t] = place(t);
  // bf16 and f16 inputs are fed as float32 values (lms/session.h): rounded
  // here as PyTorch's Tensor.to rounds (common/float16.h).
  std::vector<uint16_t> narrowed;
  if (tensor.dtype == DType::kBFloat16 || tensor.dtype == DType::kFloat16) {
    narrowed.resize(count);
    floats_to_half(static_cast<const float*>(data), static_cast<int64_t>(count), tensor.dtype,
                   narrowed.data());
    data = narrowed.data();
  }
  const double start = now_s();
  absl::Status uploaded = device_.upload(buffers_[t], data, tensor.bytes());
  add_host_wait(kWaitUpload, kNoNode, start, now_s());
  return uploaded;
}

absl::Status Executor::upload_inputs(const FeedViews& feeds) {
  const Graph& g = *plan_.graph;
  for (TensorId t : plan_.release.inputs) {
    const Tensor& tensor = g.tensor(t);
    const bool int64 = tensor.dtype == DType::kInt64;
    const DType fed_as = int64 ? DType::kInt64 : DType::kFloat32;
    auto f = feeds.find(tensor.name);
    if (f == feeds.end()) {
      return absl::InvalidArgumentError(absl::StrCat("no feed for graph input '", tensor.name,
                                                     "' (", dtype_name(tensor.dtype), ")"));
    }
    if (f->second.dtype != fed_as) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph input '", tensor.name, "' has dtype ", dtype_name(tensor.dtype),
                       " but is fed as ", int64 ? "float32 (Feeds)" : "int64 (Int64Feeds)",
                       "; feed it in ", int64 ? "Int64Feeds" : "Feeds"));
    }
    if (f->second.data == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("feed '", tensor.name, "' has no data (a null FeedView::data)"));
    }
    LMS_RETURN_IF_ERROR(upload_input(t, f->second.data, f->second.elements));
  }
  return absl::OkStatus();
}

absl::Status Executor::allocate_outputs(NodeId id) {
  const Graph& g = *plan_.graph;
  for (TensorId t : g.node(id).outputs) {
    const Tensor& tensor = g.tensor(t);
    if (on_host(tensor)) {
      LMS_ASSIGN_OR_RETURN(buffers_[t], allocate_host(tensor.bytes(), id));
    } else {
      buffers_[t] = place(t);
    }
  }
  return absl::OkStatus();
}

// A control input that is a copy (swap_out / swap_in) on another stream is an
// event wait: TFLMS sync_mode 1-3 makes compute wait for a swap-out this way.
// Control inputs on the compute stream are ordered by the stream already.
void Executor::wait_for_control_inputs(NodeId id, StreamKind stream) {
  for (NodeId c : plan_.graph->node(id).control_inputs) {
    if (copy_done_[c] == nullptr) continue;
    const OpKind op = plan_.graph->node(c).op;
    StreamKind other = op == OpKind::kSwapOut  ? StreamKind::kD2H
                       : op == OpKind::kSwapIn ? StreamKind::kH2D
                                               : StreamKind::kComm;
    if (other != stream) device_.wait(stream, *copy_done_[c]);
  }
}

absl::Status Executor::issue_compute(NodeId id) {
  const Node& n = plan_.graph->node(id);
  wait_for_control_inputs(id, StreamKind::kCompute);
  KernelArgs args;
  for (TensorId t : n.inputs) {
    // A tensor produced on a copy stream (swap-in) must be complete before
    // the kernel reads it; one wait per tensor per step suffices because the
    // compute stream is ordered.
    if (ready_[t] != nullptr) {
      device_.wait(StreamKind::kCompute, *ready_[t]);
      ready_[t] = nullptr;
    }
    args.inputs.push_back(static_cast<float*>(buffer(t)));
  }
  for (TensorId t : n.outputs) args.outputs.push_back(static_cast<float*>(buffers_[t]));
  // Per Note [Step buffers], the node's own workspace, live while it runs.
  args.workspace = plan_.workspace_offset[id] != swap::kNoOffset
                       ? plan_.arena + plan_.workspace_offset[id]
                       : nullptr;
  args.step = step_;
  device_.launch(*plan_.kernels[id], args, n.name, op_name(n.op));
  return absl::OkStatus();
}

// Note [Swap-out]: the D2H stream waits for the compute stream to reach this
// point (the producer has run), then copies into the pinned host block.
absl::Status Executor::issue_swap_out(NodeId id) {
  const Node& n = plan_.graph->node(id);
  TensorId src = n.inputs[0], dst = n.outputs[0];
  device_.wait(StreamKind::kD2H, *record_on(StreamKind::kCompute));
  if (ready_[src] != nullptr) device_.wait(StreamKind::kD2H, *ready_[src]);
  wait_for_control_inputs(id, StreamKind::kD2H);
  uint64_t bytes = plan_.graph->tensor(src).bytes();
  device_.copy_d2h(buffers_[dst], buffer(src), bytes,
                   to_std(absl::string_view(plan_.graph->tensor(src).name)));
  ready_[dst] = record_on(StreamKind::kD2H);
  copy_read_[src] = ready_[dst];
  copy_done_[id] = ready_[dst];
  bytes_d2h_ += bytes;
  return absl::OkStatus();
}

// Note [Swap-in trigger]: issued right after its trigger node. The H2D copy
// waits for the compute stream to reach the trigger (so device buffers freed
// by compute before this point are no longer read) and for the swap-out.
absl::Status Executor::issue_swap_in(NodeId id) {
  const Node& n = plan_.graph->node(id);
  TensorId src = n.inputs[0], dst = n.outputs[0];
  device_.wait(StreamKind::kH2D, *record_on(StreamKind::kCompute));
  if (ready_[src] != nullptr) device_.wait(StreamKind::kH2D, *ready_[src]);
  wait_for_control_inputs(id, StreamKind::kH2D);
  uint64_t bytes = plan_.graph->tensor(dst).bytes();
  device_.copy_h2d(buffers_[dst], buffers_[src], bytes,
                   to_std(absl::string_view(plan_.graph->tensor(dst).name)));
  ready_[dst] = record_on(StreamKind::kH2D);
  copy_read_[src] = ready_[dst];
  copy_done_[id] = ready_[dst];
  bytes_h2d_ += bytes;
  return absl::OkStatus();
}

// Note [All-reduce]: an all_reduce node averages one bucket of gradients
// over the ranks on the communication stream, overlapping the rest of the
// backward pass. Like a swap-out's copy, the exchange waits for the compute
// stream to reach its issue point (its inputs are final, and its outputs'
// addresses are free of earlier occupants) and for inputs a swap-in brings
// back. Its outputs are ready at an event on the comm stream, which their
// compute readers wait for; its inputs are read on the comm stream, so
// their release is stream-ordered (Note [Swap-out release]) at the node
// named by release_after, by which the exchange is expected to be done.
absl::Status Executor::issue_all_reduce(NodeId id) {
  const Node& n = plan_.graph->node(id);
  if (plan_.communicator == nullptr) {
    return absl::FailedPreconditionError(
        "an all_reduce node needs a communicator (SessionOptions::communicator)");
  }
  device_.wait(StreamKind::kComm, *record_on(StreamKind::kCompute));
  wait_for_control_inputs(id, StreamKind::kComm);
  std::vector<const float*> in;
  std::vector<float*> out;
  std::vector<int64_t> counts;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const TensorId src = n.inputs[i];
    if (ready_[src] != nullptr) device_.wait(StreamKind::kComm, *ready_[src]);
    in.push_back(static_cast<const float*>(buffer(src)));
    out.push_back(static_cast<float*>(buffers_[n.outputs[i]]));
    counts.push_back(num_elements(plan_.graph->tensor(src).shape));
  }
  const float scale = 1.0f / static_cast<float>(plan_.communicator->size());
  LMS_RETURN_IF_ERROR(plan_.communicator->enqueue_all_reduce(device_, in, out, counts, scale,
                                                             to_std(absl::string_view(n.name))));
  std::shared_ptr<Event> done = record_on(StreamKind::kComm);
  for (TensorId t : n.outputs) ready_[t] = done;
  for (TensorId t : n.inputs) copy_read_[t] = done;
  copy_done_[id] = done;
  return absl::OkStatus();
}

// Per Note [Swap-out release], a device buffer is given up at its fixed point of
// the schedule, the end of its live range in the plan's layout; a later
// buffer placed at the same address may be written from the next position
// on. The host never waits for that: the release is stream-ordered. If a
// copy may still be reading the buffer (a swap-out's D2H, an all-reduce's
// exchange) or writing it (a swap-in's H2D or an all-reduce whose output no
// kernel waited for), the compute stream
// waits for that copy before its next node, and the host goes on. Every
// later writer of the memory is ordered after that wait: kernels run on
// the compute stream, and a swap-in's H2D copy waits for the compute stream
// to reach its issue point (Note [Swap-in trigger]); D2H copies write host
// memory only. A wait that blocks is a stall (Note [Stall]), the one the
// simulator predicts at the release point.
void Executor::release_device(TensorId t) {
  void* p = buffers_[t];
  if (p == nullptr) return;
  buffers_[t] = nullptr;
  if (ready_[t] != nullptr && !device_.query(*ready_[t])) {
    device_.wait(StreamKind::kCompute, *ready_[t]);
  }
  ready_[t] = nullptr;
  if (copy_read_[t] != nullptr && !device_.query(*copy_read_[t])) {
    device_.wait(StreamKind::kCompute, *copy_read_[t]);
  }
  copy_read_[t] = nullptr;
  in_use_ -= plan_.placed_bytes[t];
}

void Executor::release_host(TensorId t) {
  void* p = buffers_[t];
  if (p == nullptr) return;
  buffers_[t] = nullptr;
  ready_[t] = nullptr;
  std::shared_ptr<Event> reader = std::move(copy_read_[t]);
  if (reader != nullptr && !device_.query(*reader)) {
    deferred_.push_back({std::move(reader), p});
  } else {
    device_.deallocate_host(p);
  }
}

void Executor::release_all() {
  const Graph& g = *plan_.graph;
  for (TensorId t = 0; t < static_cast<TensorId>(buffers_.size()); ++t) {
    if (g.tensor(t).role == TensorRole::kHost) {
      release_host(t);
    } else {
      release_device(t);
    }
  }
}

void Executor::release_after(int32_t position) {
  for (TensorId t : plan_.release.release_after[position]) release_device(t);
  for (TensorId t : plan_.host_release_after[position]) release_host(t);
}

// Per Note [Step commit], the first node that writes a persistent tensor is
// issued only when nothing after it can fail on the host: the plan puts every
// allocation before it (swap/liveness.h). Device errors are asynchronous, so
// the compute stream also waits here for every copy and all-reduce issued so
// far; an error
// in any earlier kernel or copy is then recorded before the first update
// runs, and the device skips the updates (Note [CPU device async errors];
// CUDA errors are sticky). What stays open: an error inside the update
// kernels themselves, after some of them have run.
void Executor::order_commit() {
  device_.wait(StreamKind::kCompute, *record_on(StreamKind::kD2H));
  device_.wait(StreamKind::kCompute, *record_on(StreamKind::kH2D));
  if (plan_.communicator != nullptr) {
    device_.wait(StreamKind::kCompute, *record_on(StreamKind::kComm));
  }
}

absl::Status Executor::issue(int32_t position) {
  NodeId id = plan_.order[position];
  const Node& n = plan_.graph->node(id);
  if (position == plan_.commit) order_commit();
  LMS_RETURN_IF_ERROR(allocate_outputs(id));
  bytes_by_position_[position] = in_use_ + plan_.workspace_placed[id];
  if (sink_ != nullptr) sink_->on_issue(n.name, op_name(n.op), now_s());
  if (n.op == OpKind::kSwapOut) {
    LMS_RETURN_IF_ERROR(issue_swap_out(id));
  } else if (n.op == OpKind::kSwapIn) {
    LMS_RETURN_IF_ERROR(issue_swap_in(id));
  } else if (n.op == OpKind::kAllReduce) {
    LMS_RETURN_IF_ERROR(issue_all_reduce(id));
  } else {
    LMS_RETURN_IF_ERROR(issue_compute(id));
  }
  release_after(position);
  return absl::OkStatus();
}

void Executor::abandon_step() {
  (void)device_.synchronize();
  release_all();
  poll_deferred();
  LMS_CHECK(deferred_.empty());
}

absl::Status Executor::finish_step(StepResult* result) {
  double start = now_s();
  absl::Status synced = device_.synchronize();
  add_host_wait(kWaitStepEnd, kNoNode, start, now_s());
  LMS_RETURN_IF_ERROR(synced);
  const Graph& g = *plan_.graph;
  for (const std::string& name : plan_.fetch_names) {
    TensorId t = g.find_tensor(name);
    const Tensor& tensor = g.tensor(t);
    std::vector<float> values;
    std::vector<int64_t> ids;
    std::vector<uint16_t> narrow;  // bf16 and f16 values, fetched as float32
    void* host = nullptr;
    const int64_t n = num_elements(tensor.shape);
    if (tensor.dtype == DType::kInt64) {
      ids.resize(n);
      host = ids.data();
    } else if (tensor.dtype == DType::kFloat32) {
      values.resize(n);
      host = values.data();
    } else {
      narrow.resize(n);
      host = narrow.data();
    }
    start = now_s();
    absl::Status downloaded = device_.download(host, buffer(t), tensor.bytes());
    add_host_wait(kWaitDownload, kNoNode, start, now_s());
    LMS_RETURN_IF_ERROR(downloaded);
    if (!narrow.empty()) {
      values.resize(n);
      half_to_floats(narrow.data(), n, tensor.dtype, values.data());
    }
    if (tensor.dtype == DType::kInt64) {
      result->fetched_int64[name] = std::move(ids);
    } else {
      result->fetched[name] = std::move(values);
    }
  }
  release_all();
  poll_deferred();
  LMS_CHECK(deferred_.empty());
  return absl::OkStatus();
}

absl::Status Executor::run(const FeedViews& feeds, int64_t step, StepResult* result) {
  step_ = step;
  const Graph& g = *plan_.graph;
  buffers_.assign(g.num_tensors(), nullptr);
  ready_.assign(g.num_tensors(), nullptr);
  copy_read_.assign(g.num_tensors(), nullptr);
  copy_done_.assign(g.num_nodes(), nullptr);
  in_use_ = plan_.persistent_bytes;
  bytes_by_position_.assign(plan_.order.size(), 0);
  host_wait_by_reason_.clear();
  bytes_d2h_ = bytes_h2d_ = 0;
  *result = StepResult{};
  absl::Status s = upload_inputs(feeds);
  for (int32_t pos = 0; s.ok() && pos < static_cast<int32_t>(plan_.order.size()); ++pos) {
    s = issue(pos);
  }
  if (s.ok()) s = finish_step(result);
  if (!s.ok()) {
    abandon_step();
    return s;
  }
  // stall_s is the device's measure (Session, Note [Stall]).
  result->host_wait_s = 0;
  for (const auto& [reason, seconds] : host_wait_by_reason_) result->host_wait_s += seconds;
  result->host_wait_by_reason = host_wait_by_reason_;
  result->device_bytes_by_position = bytes_by_position_;
  result->bytes_d2h = bytes_d2h_;
  result->bytes_h2d = bytes_h2d_;
  return absl::OkStatus();
}

}  // namespace lms
