// The emulated CPU device (docs/design.md, "Backends"): a faithful stand-in for
// a GPU, not a mock. Device memory is one region of `capacity_bytes` carved by
// a BfcAllocator ("device"); pinned host memory is a second BfcAllocator
// ("pinned host") over page-locked memory (mlock best effort); compute, D2H and
// H2D are worker threads running their queues in order; events are real
// synchronisation; copies are memcpy, optionally throttled to a link bandwidth
// and latency (PCIe, NVLink) of the device's own or shared with other devices
// (host_link.h); kernels are oneDNN primitives from cpu/kernels,
// run on the compute thread.
//
//   LMS_ASSIGN_OR_RETURN(auto dev, CpuDevice::create({.capacity_bytes = 256 << 20,
//                                                     .d2h_bytes_per_s = 12e9,
//                                                     .h2d_bytes_per_s = 12e9}));
//   LMS_ASSIGN_OR_RETURN(void* d, dev->allocate(bytes));
//   LMS_ASSIGN_OR_RETURN(void* h, dev->allocate_host(bytes));
//   dev->copy_d2h(h, d, bytes, "conv1/out");   // async, on the D2H worker
//   LMS_RETURN_IF_ERROR(dev->synchronize());
//
// Note [CPU device async errors]: an async operation that fails (a kernel
// returning an error, a copy naming memory outside the device region, an
// event of another device) stores the first such error, prefixed with what
// failed. From then on, launched kernels are skipped (as after a sticky CUDA
// error: their inputs may be garbage) while copies, records and waits still
// run, so no stream or host waiter can hang. synchronize() returns the error
// and clears it; kernels launched after that run again.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/cpu/kernels/cpu_kernels.h"
#include "backend/cpu/stream.h"
#include "backend/device_memory.h"
#include "backend/kernel.h"
#include "lms/device.h"

namespace lms::cpu {

using lms::CpuDeviceOptions;  // lms/device.h

class CpuDevice : public Device {
 public:
  // InvalidArgument for a zero capacity or host pool, a negative or non-finite
  // bandwidth or latency, a link with a nonzero bandwidth or latency of the
  // device's own, or negative compute_threads; ResourceExhausted when
  // a region cannot be reserved; InternalError when oneDNN fails to start.
  static absl::StatusOr<std::unique_ptr<CpuDevice>> create(CpuDeviceOptions options);
  // Drains every stream (Note [Stream shutdown]) before freeing memory.
  ~CpuDevice() override;

  std::string name() const override { return "cpu-emulated"; }
  std::string kind() const override { return "cpu"; }
  DeviceKind device_kind() const override { return DeviceKind::kCpu; }

  absl::StatusOr<void*> allocate(uint64_t bytes) override;
  void deallocate(void* ptr) override;
  AllocatorStats memory_stats() const override;
  void reset_peak_memory() override;
  void evict_from_caches(const void* device_ptr, uint64_t bytes) override;
  void set_memory_observer(AllocationObserver* observer) override;

  absl::StatusOr<void*> allocate_host(uint64_t bytes) override;
  void deallocate_host(void* ptr) override;
  AllocatorStats host_stats() const override;
  void set_host_observer(AllocationObserver* observer) override;

  // Events are CpuEvents (cpu_event.h). StreamKind::kHost names no stream of
  // its own: record/wait on it act on the compute stream. A compute-stream
  // wait that really blocks is a stall (Note [Stall]), reported as
  // on_stall(kCompute, "wait for d2h copy" / "wait for h2d copy"), timed on
  // the compute worker from reaching the wait to passing it.
  std::unique_ptr<Event> create_event() override;
  void record(Event& event, StreamKind stream) override;
  void wait(StreamKind stream, Event& event) override;
  bool query(Event& event) override;
  void synchronize(Event& event) override;
  absl::Status synchronize() override;

  // Async copies. The device side must lie inside the device region (else an
  // async InvalidArgument, and nothing is copied); the host side may be any
  // host memory, though the pinned pool is what the executor uses.
  void copy_d2h(void* host, const void* device, uint64_t bytes, std::string_view tensor) override;
  void copy_h2d(void* device, const void* host, uint64_t bytes, std::string_view tensor) override;
  // Blocking; ordered after all work already launched on the compute stream
  // and throttled like the async copies. InvalidArgument for a null pointer or
  // a device range outside the device region.
  absl::Status upload(void* device, const void* host, uint64_t bytes) override;
  absl::Status download(void* host, const void* device, uint64_t bytes) override;
  absl::Status upload_many(std::span<const Upload> uploads) override;

  absl::StatusOr<std::unique_ptr<Kernel>> compile(const KernelSpec& spec) override;
  // `kernel` and the buffers in `args` must stay alive until the launch has
  // run (synchronize() or an event recorded after it).
  void launch(Kernel& kernel, const KernelArgs& args, std::string_view node,
              std::string_view op) override;

  // Reports nodes, copies, compute-stream event waits (on_stall) and memory
  // counters (on_memory, both pools, from every allocate/deallocate) to
  // `sink`; nullable, not owned, and must outlive the work already enqueued.
  // Memory observers set above are called in addition, not instead.
  void set_event_sink(EventSink* sink) override;
  // Runs `task` on the stream's worker thread; reported as on_node(stream,
  // name, "host_task"); its error is an async error (it runs even after an
  // earlier async error, like copies, so a peer waiting on it never hangs).
  absl::Status enqueue_host_task(StreamKind stream, std::function<absl::Status()> task,
                                 std::string_view name) override;

  // CpuDevice-specific.
  const CpuDeviceOptions& options() const { return options_; }
  // Whether the pinned pool's pages are really locked (mlock may be refused).
  bool host_pages_locked() const;
  // The oneDNN engine and stream the kernels use.
  const CpuKernelContext& kernel_context() const { return kernel_ctx_; }

 private:
  CpuDevice() = default;
  absl::Status init(CpuDeviceOptions options);
  CpuStream& stream(StreamKind kind);
  void enqueue_copy(StreamKind kind, void* dst, const void* src, uint64_t bytes,
                    std::string_view tensor);
  absl::Status blocking_copy(StreamKind direction, void* dst, const void* src, uint64_t bytes);
  absl::Status check_device_range(const void* ptr, uint64_t bytes, const std::string& what) const;
  // memcpy for a copy that started at `start_s`, returning no earlier than
  // the link allows: the shared link's (Note [Shared host link]) when
  // options_.link is set, else start + copy_latency_s + bytes / bandwidth.
  void move_bytes(StreamKind direction, void* dst, const void* src, uint64_t bytes,
                  double start_s) const;
  void set_async_error(absl::Status status);
  bool has_async_error() const;

  CpuDeviceOptions options_;
  CpuKernelContext kernel_ctx_;
  double workspace_scale_ = 1;  // Note [Workspace scale test hook]
  std::atomic<EventSink*> sink_{nullptr};
  // Memory outlives the streams (declared before them), so work still
  // queued at destruction touches valid memory.
  std::unique_ptr<DeviceMemory> memory_;

  mutable absl::Mutex error_mu_;
  absl::Status first_error_ ABSL_GUARDED_BY(error_mu_);
  std::atomic<bool> error_pending_{false};

  std::unique_ptr<CpuStream> compute_;
  std::unique_ptr<CpuStream> d2h_;
  std::unique_ptr<CpuStream> h2d_;
  std::unique_ptr<CpuStream> comm_;
};

}  // namespace lms::cpu

namespace lms {
// Callers outside the backend may spell it without cpu::.
using cpu::CpuDevice;
}  // namespace lms
