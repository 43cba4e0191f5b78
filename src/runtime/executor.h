// The step executor: issues the nodes of a scheduled graph on a Device and
// keeps the memory contract of docs/memory_model.md (Note [Memory accounting]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "backend/kernel.h"
#include "lms/device.h"
#include "lms/distributed.h"
#include "lms/graph.h"
#include "lms/session.h"
#include "swap/release_plan.h"

namespace lms {

// What the executor needs from a session: immutable after Session::create.
struct ExecutablePlan {
  const Graph* graph = nullptr;
  std::vector<NodeId> order;  // schedule
  // By NodeId; null for swap nodes. Nodes of one spec share their kernel
  // (Note [One kernel per spec]).
  std::vector<std::shared_ptr<Kernel>> kernels;
  std::vector<uint64_t> workspace_bytes;  // by NodeId
  // Per Note [Step layout], every non-persistent device buffer of the
  // step lives at a fixed offset of one arena.
  std::byte* arena = nullptr;
  std::vector<uint64_t> tensor_offset;     // by TensorId (swap::kNoOffset: not in the arena)
  std::vector<uint64_t> placed_bytes;      // by TensorId
  std::vector<uint64_t> workspace_offset;  // by NodeId (swap::kNoOffset: no workspace)
  std::vector<uint64_t> workspace_placed;  // by NodeId
  uint64_t persistent_bytes = 0;           // rounded, allocated before the arena
  std::vector<uint64_t> planned_bytes;     // by position: persistent + arena bytes live there
  swap::ReleasePlan release;               // device releases (Note [Swap-out release])
  std::vector<std::vector<TensorId>> host_release_after;  // by position: pinned blocks freed
  std::vector<std::string> fetch_names;
  std::vector<void*> persistent;  // by TensorId: device buffer of persistent tensors
  int32_t commit = 0;             // Note [Step commit]
  std::string oom_hint;           // appended to device out-of-memory errors
  // all_reduce nodes (Note [All-reduce]); null when the graph has none.
  Communicator* communicator = nullptr;
};

// Runs one step. Owns the per-step buffers and events; reusable across steps.
class Executor {
 public:
  // `sink` (nullable) receives the host waits (on_host_wait, Note [Stall]).
  Executor(const ExecutablePlan& plan, Device& device, EventSink* sink);
  // Fills every StepResult figure but step_s, stall_s and the peaks, which
  // the Session takes from the device.
  // `step` is the session's count of completed steps (KernelArgs::step).
  absl::Status run(const FeedViews& feeds, int64_t step, StepResult* result);

 private:
  struct Deferred {  // a pinned host block waiting for its H2D copy
    std::shared_ptr<Event> event;
    void* ptr;
  };

  absl::Status upload_inputs(const FeedViews& feeds);
  absl::Status upload_input(TensorId t, const void* data, size_t count);
  absl::Status issue(int32_t position);
  void order_commit();
  void wait_for_control_inputs(NodeId id, StreamKind stream);
  absl::Status issue_compute(NodeId id);
  absl::Status issue_swap_out(NodeId id);
  absl::Status issue_swap_in(NodeId id);
  absl::Status issue_all_reduce(NodeId id);
  absl::Status allocate_outputs(NodeId id);
  absl::StatusOr<void*> allocate_host(uint64_t bytes, NodeId id);
  void* place(TensorId t);
  void release_after(int32_t position);
  void release_device(TensorId t);
  void release_host(TensorId t);
  void release_all();
  void poll_deferred();
  int64_t step_ = 0;  // of the run in progress (KernelArgs::step)
  void wait_oldest_deferred(NodeId id);
  void host_wait(Event& event, NodeId id, std::string_view reason);
  void add_host_wait(std::string_view reason, NodeId id, double start_s, double end_s);
  std::shared_ptr<Event> record_on(StreamKind stream);
  absl::Status finish_step(StepResult* result);
  void abandon_step();
  void* buffer(TensorId t) const;

  const ExecutablePlan& plan_;
  Device& device_;
  EventSink* sink_;
  // Per step, by TensorId.
  std::vector<void*> buffers_;
  std::vector<std::shared_ptr<Event>> ready_;      // copy that produced the tensor
  std::vector<std::shared_ptr<Event>> copy_read_;  // last copy that read the tensor
  std::vector<std::shared_ptr<Event>> copy_done_;  // by NodeId: a swap node's copy
  std::deque<Deferred> deferred_;
  std::map<std::string, double, std::less<>> host_wait_by_reason_;  // this step
  uint64_t in_use_ = 0;                      // persistent + arena buffers held
  std::vector<uint64_t> bytes_by_position_;  // this step, as issued
  uint64_t bytes_d2h_ = 0;
  uint64_t bytes_h2d_ = 0;
};

}  // namespace lms
