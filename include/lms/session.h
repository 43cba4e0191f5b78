// Runs a (possibly rewritten) training graph on a Device, one step per run().
//
//   LMS_ASSIGN_OR_RETURN(auto session, lms::Session::create(train, *device));
//   lms::Feeds feeds = {{"lr", lr_batch}, {"hr", hr_batch}};   // NCHW float32
//   lms::StepResult step;
//   LMS_RETURN_IF_ERROR(session->run(feeds, &step));
//   float loss = step.fetched.at("loss")[0];
//
// Execution follows docs/design.md "Execution semantics" and
// docs/memory_model.md: nodes are issued in schedule order from the calling
// thread, compute kernels on the compute stream, swap_out / swap_in on the
// D2H / H2D copy streams, outputs allocated at issue and released after their
// last consumer (stream-ordered for copy-stream readers).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/graph.h"
#include "lms/plan.h"

namespace lms {

class Device;
class EventSink;
class Communicator;

// Host data of graph inputs by name, float32, in the tensor's layout
// (NCHW / NCDHW); sizes must match the input's shape. An input of dtype
// bf16 or f16 is fed here too: its values are rounded to that dtype as
// PyTorch's Tensor.to rounds (nearest, ties to even). A fetched bf16 or f16
// tensor comes back widened to float32 (exact) in StepResult::fetched.
using Feeds = std::map<std::string, std::vector<float>, std::less<>>;

// Host data of the graph inputs of dtype int64 (Graph::input with
// DType::kInt64: the ids embedding reads, the class labels of
// softmax_cross_entropy), by name, row-major; passed to
// Session::run next to the float32 Feeds. An input is fed in the map of its
// dtype: a float32 feed for an int64 input, or the reverse, is an
// InvalidArgument naming the tensor and its dtype.
//
//   lms::Int64Feeds ids = {{"tokens", {3, 1, 4, 1}}};
//   LMS_RETURN_IF_ERROR(session->run({{"target", target}}, ids, &step));
using Int64Feeds = std::map<std::string, std::vector<int64_t>, std::less<>>;

// A graph input's values in memory the caller holds, read in place by
// Session::run_views (no host copy): `elements` values of `dtype`, row-major. The
// memory must stay valid and unchanged until run_views() returns. The Python
// package feeds NumPy arrays this way.
struct FeedView {
  const void* data = nullptr;
  size_t elements = 0;
  DType dtype = DType::kFloat32;
};
using FeedViews = std::map<std::string, FeedView, std::less<>>;

struct SessionOptions {
  // Tensors downloaded after every step, by name (default: the graph's loss).
  // They stay in device memory until the end of the step.
  std::vector<std::string> fetches;
  EventSink* sink = nullptr;  // profiler (nullable, not owned)
  // Required for a graph with all_reduce nodes (TrainingOptions::
  // data_parallel); not owned, outlives the session. Session::create checks
  // with it that every rank holds the same graph, plan and persistent
  // tensors (Note [Rank agreement]).
  Communicator* communicator = nullptr;
};

// Note [Stall]: stall is the time the compute stream waits on a copy, that
// is, is blocked on an event recorded on the D2H or H2D stream. It waits for
//  - a swap-in whose H2D copy has not arrived when a consumer is next (also
//    the event waits of TFLMS sync_mode control edges, and the commit, where
//    compute waits for every copy issued so far: Note [Step commit]);
//  - device memory a swap-out's D2H copy still reads when the schedule
//    releases it (Note [Swap-out release]): the release is stream-ordered, so
//    the compute stream waits for that copy before its next node, not the host.
// The same quantity is
//  - measured: StepResult::stall_s, the sum of the compute-stream waits that
//    really blocked, as the device reports them (EventSink::on_stall on the
//    compute stream). The CPU device times each wait on its compute worker.
//    CUDA brackets each compute-stream wait on an event still pending at
//    issue with two host callbacks (Note [CUDA profiler events]): an upper
//    bound by the callback latency, and not checked on a GPU by the tests;
//  - predicted: RewriteReport::stall_s, the simulator's compute-stream idle
//    time between its first and last node, which in that model comes from
//    exactly these waits (src/swap/simulator.h);
//  - profiled: ProfileSummary::stall_s, the union of the compute-stream stall
//    intervals, drawn with cat "stall" on the compute track of the Chrome
//    trace.
// Host waits are not stall: the issuing thread blocked in a device call (a
// pinned host block still read by an H2D copy, the blocking input upload and
// fetch download, the synchronize at the end of the step). They overlap
// compute unless its queue runs dry, so by themselves they do not lengthen
// the step. StepResult::host_wait_s reports them by reason, and so do
// EventSink::on_host_wait, the summary's "host wait time" row and the trace
// (cat "host_wait" on the host track). Compute idle because the queue ran dry
// while the host waited is in neither figure.
struct StepResult {
  // Fetched float32 tensors by name; a fetched int64 tensor (an int64
  // input) is in fetched_int64 instead.
  std::map<std::string, std::vector<float>, std::less<>> fetched;
  std::map<std::string, std::vector<int64_t>, std::less<>> fetched_int64;
  double step_s = 0;   // wall time of run()
  double stall_s = 0;  // compute-stream waits on copy-stream events (Note [Stall])
  // Host thread blocked in device calls, not stall (Note [Stall]); the sum of
  // host_wait_by_reason, whose keys are the reasons the executor reports
  // ("step end synchronize", "input upload", "fetch download", "pinned host
  // block in use by a swap-in").
  double host_wait_s = 0;
  std::map<std::string, double, std::less<>> host_wait_by_reason;
  // Device allocator peak during the step: the persistent tensors plus the
  // step's arena (RewriteReport::peak_bytes_after), bytes.
  uint64_t peak_device_bytes = 0;
  // By schedule position: the device bytes the executor held while issuing
  // that node (persistent tensors, the arena buffers it had taken and not
  // given up, the node's workspace), counted as it issued the step. Equal
  // to the plan's profile of the step layout when the executor keeps the
  // memory contract (docs/memory_model.md).
  std::vector<uint64_t> device_bytes_by_position;
  uint64_t peak_pinned_host_bytes = 0;
  uint64_t bytes_d2h = 0;  // swapped out during the step
  uint64_t bytes_h2d = 0;  // swapped in during the step
};

class Session {
 public:
  // Schedules and verifies the graph, compiles a kernel per compute node and
  // allocates + initialises the persistent tensors (parameters, optimizer
  // state) in device memory. `graph` and `device` must outlive the session.
  // InvalidArgument for an invalid graph or unknown fetch, Unimplemented for
  // an op the device lacks, ResourceExhausted if the persistent tensors do not
  // fit, FailedPrecondition naming the difference when lms::rewrite planned
  // the graph for another device kind, capacity, budget, alignment, fetch
  // set or kernel workspaces (Graph::plan_record).
  static absl::StatusOr<std::unique_ptr<Session>> create(const Graph& graph, Device& device,
                                                         SessionOptions options = {});
  // The same for a plan (lms::plan_step, lms/plan.h): the session shares the
  // plan's graph (the StepPlan need not outlive it) and runs the step on the
  // plan's own layout, with no layout search, when the plan was made with
  // every kernel's workspace for this device and fetch set; otherwise it
  // lays the step out itself, as for a graph. Errors: those above, the
  // FailedPrecondition of a plan made for another device included.
  static absl::StatusOr<std::unique_ptr<Session>> create(const StepPlan& plan, Device& device,
                                                         SessionOptions options = {});
  ~Session();

  // Runs one step. InvalidArgument for a null `result`, a missing or
  // mis-sized feed, or a feed that names no graph input (the message lists
  // the inputs); ResourceExhausted naming the node being issued when device
  // or pinned host memory runs out, with a hint that matches how the graph
  // was planned. A step that fails is abandoned: every step buffer is
  // released, the session stays usable, and every persistent tensor
  // (parameters, optimizer state, step counter) is bit-identical to before
  // the step, so a retry equals one clean step (Note [Step commit]: the
  // updates are issued only when nothing after them can fail; an error
  // inside an update kernel itself is the exception).
  absl::Status run(const Feeds& feeds, StepResult* result);
  // The same for a graph with int64 inputs (Graph::input with
  // DType::kInt64): each input is fed from the map of its dtype; also
  // InvalidArgument naming the tensor and its dtype for a feed in the map of
  // the other dtype.
  absl::Status run(const Feeds& feeds, const Int64Feeds& int64_feeds, StepResult* result);
  // The same with every input read in place from the caller's memory
  // (FeedView); also InvalidArgument naming the tensor for a view whose
  // dtype is not the input's, or whose data is null.
  absl::Status run_views(const FeedViews& feeds, StepResult* result);

  // Reads / overwrites a persistent tensor (parameter or optimizer state) by
  // name; NotFound for an unknown name, InvalidArgument for a wrong size.
  absl::StatusOr<std::vector<float>> read(std::string_view name) const;
  absl::Status write(std::string_view name, const std::vector<float>& values);
  // Names of the persistent tensors, in tensor-id order.
  std::vector<std::string> persistent_tensors() const;

  // Workspace bytes of each node's kernel (indexed by NodeId), for the planner.
  const std::vector<uint64_t>& workspace_bytes() const;

  // True when create took the step layout of a StepPlan as it is, with no
  // layout search of its own (the plan was made with the kernels'
  // workspaces, the alignment, the fetch set and the budget of this
  // session). False for a session of a graph: it lays the step out from the
  // graph's plan record, which gives the planned layout for a graph
  // lms::rewrite planned with every fact.
  bool reused_planned_layout() const;

 private:
  class Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Compiles every compute node of `graph` on `device` and returns its kernel's
// workspace bytes (indexed by NodeId; 0 for swap nodes). Lets lms::rewrite
// account for workspace exactly before a session exists.
absl::StatusOr<std::vector<uint64_t>> kernel_workspace_bytes(const Graph& graph, Device& device);

// The same with every convolution (conv, deconv and their backward ops) set
// to workspace = "least" (lms/types.h kWorkspaceAttr): what
// PlanningFacts::least_workspace_bytes takes. Empty when the graph has no
// convolution. Errors: those of kernel_workspace_bytes.
absl::StatusOr<std::vector<uint64_t>> least_kernel_workspace_bytes(const Graph& graph,
                                                                   Device& device);

}  // namespace lms
