// The device interface: memory (a BFC allocator over one region of fixed
// capacity), a pinned host pool, one compute stream and two copy streams
// (D2H, H2D), events, async copies and kernels. It mirrors CUDA semantics so
// the emulated CPU device and the CUDA device are interchangeable.
//
//   LMS_ASSIGN_OR_RETURN(auto dev, CpuDevice::create({.capacity_bytes = 256 << 20}));
//   LMS_ASSIGN_OR_RETURN(void* d, dev->allocate(bytes));
//   auto ev = dev->create_event();
//   dev->copy_h2d(d, host_block, bytes, "x");   // async on the H2D stream
//   dev->record(*ev, StreamKind::kH2D);
//   dev->wait(StreamKind::kCompute, *ev);       // compute waits for the copy
//   dev->launch(*kernel, args);                 // async on the compute stream
//   LMS_RETURN_IF_ERROR(dev->synchronize());
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/bfc_allocator.h"
#include "backend/kernel.h"
#include "profiler/event_sink.h"

namespace lms {

// A point in a stream's work. Recorded on a stream; complete once everything
// enqueued on that stream before the record has finished. An event never
// recorded counts as complete.
class Event {
 public:
  virtual ~Event() = default;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;  // "cpu-emulated", "cuda:0"

  // Device memory (BFC; see BfcAllocator for the ResourceExhausted message).
  virtual absl::StatusOr<void*> allocate(uint64_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual AllocatorStats memory_stats() const = 0;
  virtual void reset_peak_memory() = 0;
  virtual void set_memory_observer(AllocationObserver* observer) = 0;

  // Pinned (page-locked) host memory from the host pool, with its own limit.
  virtual absl::StatusOr<void*> allocate_host(uint64_t bytes) = 0;
  virtual void deallocate_host(void* ptr) = 0;
  virtual AllocatorStats host_stats() const = 0;
  virtual void set_host_observer(AllocationObserver* observer) = 0;

  // Streams and events (host-side calls; all non-blocking except synchronize).
  virtual std::unique_ptr<Event> create_event() = 0;
  virtual void record(Event& event, StreamKind stream) = 0;
  virtual void wait(StreamKind stream, Event& event) = 0;  // stream waits, host does not
  virtual bool query(Event& event) = 0;                    // complete yet?
  virtual void synchronize(Event& event) = 0;              // host blocks until complete
  // Blocks until every stream is idle; returns the first error any async
  // operation hit since the last call (and clears it).
  virtual absl::Status synchronize() = 0;

  // Async copies between device memory and pinned host memory on the D2H /
  // H2D stream; `tensor` names what is copied for the profiler.
  virtual void copy_d2h(void* host, const void* device, uint64_t bytes,
                        std::string_view tensor) = 0;
  virtual void copy_h2d(void* device, const void* host, uint64_t bytes,
                        std::string_view tensor) = 0;
  // Blocking copies from/to ordinary host memory (feeds, fetches, checkpoints).
  virtual absl::Status upload(void* device, const void* host, uint64_t bytes) = 0;
  virtual absl::Status download(void* host, const void* device, uint64_t bytes) = 0;

  // Kernels. compile() returns Unimplemented for an op the backend lacks and
  // InvalidArgument for attributes or shapes it cannot handle.
  virtual absl::StatusOr<std::unique_ptr<Kernel>> compile(const KernelSpec& spec) = 0;
  // Enqueues kernel.run(args) on the compute stream. `node` and `op` name it
  // for the profiler and error messages; errors surface at synchronize().
  virtual void launch(Kernel& kernel, KernelArgs args, std::string_view node,
                      std::string_view op) = 0;

  // Profiler sink (nullable, not owned).
  virtual void set_event_sink(EventSink* sink) = 0;
};

}  // namespace lms
