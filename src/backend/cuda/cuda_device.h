// The CUDA device (docs/design.md, "Backends"): device memory is one
// cudaMalloc region of `capacity_bytes` carved by a BfcAllocator ("device");
// the pinned host pool is a second BfcAllocator over one cudaHostAlloc region;
// compute, D2H and H2D are non-blocking CUDA streams; events are cudaEvents;
// copies are cudaMemcpyAsync; kernels are cuDNN calls and small CUDA kernels
// (cuda_kernels.h) enqueued on the compute stream.
//
//   LMS_ASSIGN_OR_RETURN(auto dev, CudaDevice::create({.capacity_bytes = 8ull << 30}));
//   LMS_ASSIGN_OR_RETURN(void* d, dev->allocate(bytes));
//   LMS_ASSIGN_OR_RETURN(void* h, dev->allocate_host(bytes));
//   dev->copy_d2h(h, d, bytes, "conv1/out");   // async, on the D2H stream
//   LMS_RETURN_IF_ERROR(dev->synchronize());
//
// Note [CUDA device async errors]: as on the CPU device, an asynchronous
// operation that fails (a CUDA call refused at enqueue time, a kernel whose
// run() returns an error, a copy naming memory outside the device region, an
// event of another device) stores the first such error, prefixed with what
// failed; synchronize() returns it and clears it. Errors raised by the GPU
// while executing (sticky CUDA errors) surface from cudaStreamSynchronize in
// synchronize(). A launch after an error still runs (CUDA itself fails every
// call after a sticky error).
//
// Note [CUDA profiler events]: with an event sink set, each kernel launch,
// each copy and each compute-stream wait on an event still pending at issue
// (a possible stall) is timed for the sink; with a sink whose wants_spans()
// is false (Session::run without a user sink) only those waits are, for the
// stall figure. Without a sink nothing is added. Two ways:
//   - by default, two CUDA events recorded around the work on its stream
//     (timing-enabled events from a spare list, so no allocation per node).
//     The streams carry no host work, so timing adds no bubble. The spans
//     are converted to now_s() seconds against a clock base (an event
//     recorded while the streams are idle, at creation and at the end of
//     every synchronize(), whose completion the host observes) and reported
//     at synchronize(), which Session::run calls at the end of every step,
//     or at synchronize(event) for the spans that wait let finish.
//     cudaEventElapsedTime resolves about half a microsecond.
//   - when the sink wants_live_spans() (lms/profiler/event_sink.h): two
//     cudaLaunchHostFunc callbacks that take now_s() when the stream reaches
//     them and report at once. Host functions block their stream and share
//     one driver thread: a few microseconds of bubble per node, so step and
//     stall times are an upper bound.
// Stall on CUDA (Note [Stall]): a compute-stream wait on an event pending at
// issue (cudaEventQuery says cudaErrorNotReady) reports on_stall(kCompute,
// "wait for d2h copy" / "wait for h2d copy", named after the stream of the
// event's latest record), from the stream reaching the wait to the stream
// passing it. A wait on an event already complete at issue cannot block and
// is not timed. The sink must outlive the work issued while it was set,
// until the synchronize() that reports it.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/device_memory.h"
#include "backend/kernel.h"
#include "lms/device.h"

namespace lms::cuda {

using lms::CudaDeviceOptions;  // lms/device.h

struct CudaKernelContext;  // cuda_kernels.h

// One span of stream work for the event sink (Note [CUDA profiler events]):
// stamped by host callbacks (live) or timed by two CUDA events.
struct StreamSpan {
  enum Kind : uint8_t { kNode, kCopy, kStall };
  EventSink* sink = nullptr;
  StreamKind stream = StreamKind::kCompute;
  Kind kind = kNode;
  std::string name;  // node, tensor, or the stall's reason
  std::string op;
  uint64_t bytes = 0;
  double start_s = 0;           // live: stamped by the first callback
  cudaEvent_t start = nullptr;  // timed: recorded before the work
  cudaEvent_t end = nullptr;    // timed: recorded after it
};

class CudaDevice : public Device {
 public:
  // FailedPrecondition "no CUDA device ..." when cudaGetDeviceCount reports
  // none or fails (no driver); InvalidArgument for an ordinal out of range or
  // a zero host pool; ResourceExhausted when a region cannot be allocated or
  // the free memory does not exceed reserve_bytes; Internal for other CUDA,
  // or cuDNN failures.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> create(CudaDeviceOptions options);
  // Synchronises every stream before releasing memory, streams and handles.
  ~CudaDevice() override;

  std::string name() const override;  // "cuda:<ordinal>"
  std::string kind() const override { return "cuda"; }
  DeviceKind device_kind() const override { return DeviceKind::kCuda; }

  absl::StatusOr<void*> allocate(uint64_t bytes) override;
  void deallocate(void* ptr) override;
  AllocatorStats memory_stats() const override;
  void reset_peak_memory() override;
  void set_memory_observer(AllocationObserver* observer) override;

  absl::StatusOr<void*> allocate_host(uint64_t bytes) override;
  void deallocate_host(void* ptr) override;
  AllocatorStats host_stats() const override;
  void set_host_observer(AllocationObserver* observer) override;

  std::unique_ptr<Event> create_event() override;
  void record(Event& event, StreamKind stream) override;
  void wait(StreamKind stream, Event& event) override;
  bool query(Event& event) override;
  void synchronize(Event& event) override;
  absl::Status synchronize() override;

  // Async copies; the device side must lie inside the device region (else an
  // async InvalidArgument and nothing is copied). The host side should be
  // pinned (allocate_host) for the copy to be truly asynchronous.
  void copy_d2h(void* host, const void* device, uint64_t bytes, std::string_view tensor) override;
  void copy_h2d(void* device, const void* host, uint64_t bytes, std::string_view tensor) override;
  // Blocking; ordered after all work already launched on the compute stream.
  // InvalidArgument for a null pointer or a device range outside the region.
  absl::Status upload(void* device, const void* host, uint64_t bytes) override;
  absl::Status download(void* host, const void* device, uint64_t bytes) override;

  absl::StatusOr<std::unique_ptr<Kernel>> compile(const KernelSpec& spec) override;
  // `kernel` must stay alive until the launch has run; the buffers in `args`
  // until it has completed (an event recorded after it, or synchronize()).
  void launch(Kernel& kernel, const KernelArgs& args, std::string_view node,
              std::string_view op) override;

  // Reports nodes, copies and compute-stream waits on events still pending
  // at issue (on_stall), all stamped by stream callbacks (Note [CUDA profiler
  // events]), and memory counters of both pools; nullable, not owned.
  void set_event_sink(EventSink* sink) override;
  // A CUDA host function (cudaLaunchHostFunc) on the stream; its error is
  // an async error reported at synchronize().
  absl::Status enqueue_host_task(StreamKind stream, std::function<absl::Status()> task,
                                 std::string_view name) override;

  // CudaDevice-specific.
  const CudaDeviceOptions& options() const { return options_; }
  cudaStream_t stream(StreamKind kind) const;  // kHost maps to the compute stream
  const CudaKernelContext& kernel_context() const { return *kernel_ctx_; }
  // Device memory the streams and the cuDNN handle took at creation, bytes
  // (cudaMemGetInfo before and after; other processes' use counts too).
  uint64_t handle_bytes() const { return handle_bytes_; }

 private:
  CudaDevice() = default;
  absl::Status init(CudaDeviceOptions options);
  absl::Status init_memory(uint64_t free_bytes);  // free device memory once the handles exist
  absl::Status init_streams();
  void bind() const;  // cudaSetDevice(ordinal) for the calling thread
  void enqueue_copy(StreamKind kind, void* dst, const void* src, uint64_t bytes,
                    std::string_view tensor);
  absl::Status check_device_range(const void* ptr, uint64_t bytes, const std::string& what) const;
  void set_async_error(absl::Status status);

  // Brackets work enqueued between open_span() and close_span() on the
  // stream of `kind` (Note [CUDA profiler events]).
  struct SpanBracket {
    StreamSpan* live = nullptr;  // owned by the host callbacks once enqueued
    std::unique_ptr<StreamSpan> timed;
    cudaStream_t stream = nullptr;
  };
  SpanBracket open_span(EventSink* sink, StreamKind kind, StreamSpan::Kind what,
                        std::string_view name, std::string_view op, uint64_t bytes);
  void close_span(SpanBracket& span, const std::string& what);
  cudaEvent_t timing_event();         // from the spare list, or a new one; null on failure
  void recycle(StreamSpan& span);     // its events go back to the spare list
  void report_timed_spans(bool all);  // all, or those finished, in issue order
  void rebase_clock();                // clock_base_ <-> now_s(), streams idle

  CudaDeviceOptions options_;
  uint64_t handle_bytes_ = 0;
  std::atomic<EventSink*> sink_{nullptr};
  absl::Mutex spans_mu_;
  // Reported at synchronize().
  std::deque<std::unique_ptr<StreamSpan>> timed_spans_ ABSL_GUARDED_BY(spans_mu_);
  std::vector<cudaEvent_t> spare_timing_events_ ABSL_GUARDED_BY(spans_mu_);
  cudaEvent_t clock_base_ = nullptr;  // completed at clock_base_s_ (now_s())
  double clock_base_s_ = 0;
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<CudaKernelContext> kernel_ctx_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t d2h_ = nullptr;
  cudaStream_t h2d_ = nullptr;
  cudaStream_t comm_ = nullptr;  // the all-reduce (src/distributed)

  mutable absl::Mutex error_mu_;
  absl::Status first_error_ ABSL_GUARDED_BY(error_mu_);
};

}  // namespace lms::cuda
