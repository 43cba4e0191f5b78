// The profiler's event sink: executor, device and allocators report what
// happens to an injected sink (nullable, never a global). Times are seconds on
// std::chrono::steady_clock (see now_s()); implementations must be
// thread-safe, because stream worker threads report too.
#pragma once

#include <cstdint>
#include <string_view>

namespace lms {

// The streams of a device, plus the host thread that issues work.
// kComm is the communication stream of data-parallel training: the gradient
// all-reduce of src/distributed runs there, overlapping the backward pass.
enum class StreamKind : uint8_t { kHost = 0, kCompute = 1, kD2H = 2, kH2D = 3, kComm = 4 };

// The memory a counter belongs to.
enum class MemoryKind : uint8_t { kDevice = 0, kPinnedHost = 1 };

const char* stream_name(StreamKind stream);  // "host", "compute", "d2h", "h2d", "comm"

// Seconds since an arbitrary fixed origin on steady_clock.
double now_s();

class EventSink {
 public:
  virtual ~EventSink() = default;
  // A kernel (or other node) ran on `stream` from start_s to end_s.
  virtual void on_node(StreamKind stream, std::string_view node, std::string_view op,
                       double start_s, double end_s) = 0;
  // A copy of `bytes` ran on the D2H or H2D stream; `tensor` names what moved.
  virtual void on_copy(StreamKind stream, std::string_view tensor, uint64_t bytes, double start_s,
                       double end_s) = 0;
  // Bytes in use of a memory changed at time t_s.
  virtual void on_memory(MemoryKind memory, uint64_t bytes_in_use, double t_s) = 0;
  // A stall (Note [Stall]): `stream` (the compute stream) was blocked from
  // start_s to end_s on an event recorded on a copy stream; `reason` names
  // that stream ("wait for h2d copy", "wait for d2h copy"). `node` may be
  // empty: a device does not know which node is next.
  virtual void on_stall(StreamKind stream, std::string_view reason, std::string_view node,
                        double start_s, double end_s) = 0;
  // A host wait, not a stall (Note [Stall]): the host thread, issuing `node`
  // (may be empty), blocked in a device call for `reason`. The default
  // ignores it, so sinks written before host waits were reported still build.
  virtual void on_host_wait(std::string_view reason, std::string_view node, double start_s,
                            double end_s) {
    (void)reason, (void)node, (void)start_s, (void)end_s;
  }
  // The host issued `node` (op `op`: a kernel, swap_out or swap_in) to its
  // stream at t_s. Against the node's span on its stream this shows how far
  // the host runs ahead of the device (the trace's issue markers). The
  // default ignores it.
  virtual void on_issue(std::string_view node, std::string_view op, double t_s) {
    (void)node, (void)op, (void)t_s;
  }
  // false: the sink needs no on_node / on_copy spans (stalls, memory, host
  // waits, issue markers and steps still come). A device may then skip
  // timing kernels and copies; on CUDA that saves two host callbacks on the
  // stream per node (Session::run's own stall counter asks for spans only
  // when the session has a user sink). The default wants them.
  virtual bool wants_spans() const { return true; }
  // true: spans must reach the sink while the step runs (a live view). On
  // CUDA that costs two cudaLaunchHostFunc callbacks per kernel, copy and
  // stall: host functions block their stream until they have run and share
  // one driver thread, so expect a bubble of a few microseconds per node and
  // inflated step and stall times. false (the default): the CUDA device
  // times spans with CUDA events (cudaEventElapsedTime) and reports them at
  // the next Device::synchronize(), which Session::run calls at the end of
  // every step; the streams carry no host work. The CPU device reports live
  // either way.
  virtual bool wants_live_spans() const { return false; }
  // One training step (Session::run) spanned start_s..end_s.
  virtual void on_step(int64_t step, double start_s, double end_s) = 0;
};

}  // namespace lms
