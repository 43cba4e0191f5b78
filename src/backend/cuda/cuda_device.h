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
// each copy and each compute-stream wait on a pending event is bracketed by two cudaLaunchHostFunc
// callbacks that take now_s() when the stream reaches them; on_node / on_copy / on_stall report
// that span. The start stamp is taken when the preceding work of the stream is done, so it is the
// real start up to the host-callback latency (a few microseconds), and the callbacks themselves
// serialise the stream slightly: timings taken with a sink are an upper bound. Without a sink
// nothing is added; with a sink whose wants_spans() is false (Session::run without a user
// sink) only the pending waits are bracketed, for the stall. The sink must outlive the work issued
// while it was set (call synchronize() first). Stall on CUDA (Note [Stall] in lms/session.h): a
// compute-stream wait on an event that is still pending when the wait is issued (cudaEventQuery
// says cudaErrorNotReady) is bracketed as above and reported as on_stall(kCompute, "wait for d2h
// copy" / "wait for h2d copy", named after the stream of the event's latest record). The span runs
// from the stream reaching the wait to the stream passing it, plus the latency of the second
// callback: an upper bound on the wait. A wait issued on an event already complete is not
// bracketed, as it cannot block. With a Session the sink is always set (its stall counter), so
// these callbacks are always on. The tests of this project run without a GPU: none of these figures
// has been checked against a GPU timeline (nsys) here.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/kernel.h"
#include "backend/memory_tee.h"
#include "lms/device.h"

namespace lms::cuda {

using lms::CudaDeviceOptions;  // lms/device.h

struct CudaKernelContext;  // cuda_kernels.h

class CudaDevice : public Device {
 public:
  // FailedPrecondition "no CUDA device ..." when cudaGetDeviceCount reports
  // none or fails (no driver); InvalidArgument for an ordinal out of range or
  // a zero host pool; ResourceExhausted when a region cannot be allocated or
  // the free memory does not exceed reserve_bytes; Internal for other CUDA,
  // cuDNN or cuBLAS failures.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> create(CudaDeviceOptions options);
  // Synchronises every stream before releasing memory, streams and handles.
  ~CudaDevice() override;

  std::string name() const override;  // "cuda:<ordinal>"
  std::string kind() const override { return "cuda"; }

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

  // CudaDevice-specific.
  const CudaDeviceOptions& options() const { return options_; }
  cudaStream_t stream(StreamKind kind) const;  // kHost maps to the compute stream
  const CudaKernelContext& kernel_context() const { return *kernel_ctx_; }

 private:
  CudaDevice() = default;
  absl::Status init(CudaDeviceOptions options);
  absl::Status init_memory();
  absl::Status init_streams();
  void bind() const;  // cudaSetDevice(ordinal) for the calling thread
  void enqueue_copy(StreamKind kind, void* dst, const void* src, uint64_t bytes,
                    std::string_view tensor);
  absl::Status check_device_range(const void* ptr, uint64_t bytes, const std::string& what) const;
  void set_async_error(absl::Status status);

  CudaDeviceOptions options_;
  std::atomic<EventSink*> sink_{nullptr};
  std::unique_ptr<MemoryTee> device_tee_;
  std::unique_ptr<MemoryTee> host_tee_;
  std::unique_ptr<BfcAllocator> device_mem_;
  std::unique_ptr<BfcAllocator> host_mem_;
  std::unique_ptr<CudaKernelContext> kernel_ctx_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t d2h_ = nullptr;
  cudaStream_t h2d_ = nullptr;

  mutable std::mutex error_mu_;
  absl::Status first_error_;
};

}  // namespace lms::cuda
