// The device: device memory (a BFC allocator over one region of fixed
// capacity), a pinned host pool, one compute stream and two copy streams
// (D2H, H2D), events, async copies and kernels. It mirrors CUDA semantics so
// the emulated CPU device and the CUDA device are interchangeable.
//
//   LMS_ASSIGN_OR_RETURN(auto device, lms::make_cpu_device({.capacity_bytes = 256 << 20}));
//   LMS_ASSIGN_OR_RETURN(auto gpu, lms::make_cuda_device({.device_ordinal = 0}));
//   lms::AllocatorStats mem = device->memory_stats();   // capacity, in use, peak
//
// A program hands the device to lms::rewrite (which takes the capacity and the
// kernel workspaces from it) and to lms::Session::create. The stream, event and
// copy calls below are what the executor uses; a user program rarely needs
// them:
//   LMS_ASSIGN_OR_RETURN(void* d, dev->allocate(bytes));
//   auto ev = dev->create_event();
//   dev->copy_h2d(d, host_block, bytes, "x");   // async on the H2D stream
//   dev->record(*ev, StreamKind::kH2D);
//   dev->wait(StreamKind::kCompute, *ev);       // compute waits for the copy
//   LMS_RETURN_IF_ERROR(dev->synchronize());
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/memory_stats.h"
#include "lms/profiler/event_sink.h"

namespace lms {

// Kernels are compiled and launched by the executor; what they are compiled
// from (KernelSpec) and run with (KernelArgs: device pointers of the inputs,
// outputs and workspace) is internal to the library. A user program only
// passes them through, as a Device decorator does.
struct KernelSpec;
struct KernelArgs;

// One compiled compute node.
class Kernel {
 public:
  virtual ~Kernel() = default;
  // Scratch device memory the kernel needs during run(), in bytes. The
  // executor allocates it from the device allocator so accounting is exact.
  virtual uint64_t workspace_bytes() const { return 0; }
  // Runs synchronously on the calling (stream) thread for the CPU backend, or
  // enqueues on the compute stream for CUDA. Internal library errors are
  // returned as Status (InternalError naming the node and library message).
  virtual absl::Status run(const KernelArgs& args) = 0;
};

// A point in a stream's work. Recorded on a stream; complete once everything
// enqueued on that stream before the record has finished. An event never
// recorded counts as complete.
class Event {
 public:
  virtual ~Event() = default;
};

// Which backend a device is. Code that depends on it (the graph passes a
// device's kernels need before planning) switches on this, never on kind()'s
// text.
enum class DeviceKind : uint8_t { kCpu, kCuda };

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;  // "cpu-emulated", "cuda:0"
  virtual DeviceKind device_kind() const = 0;
  // Identifies what a plan depends on beyond the capacity: the backend and
  // its kernels (the same kind of device compiles the same workspaces).
  virtual std::string kind() const = 0;  // "cpu", "cuda"

  // Device memory (BFC; see BfcAllocator for the ResourceExhausted message).
  virtual absl::StatusOr<void*> allocate(uint64_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual AllocatorStats memory_stats() const = 0;
  // Sets the peaks of memory_stats() and host_stats() (the pinned host
  // pool) to their bytes in use, so each peak is that of what follows: a
  // Session calls it at the start of every step.
  virtual void reset_peak_memory() = 0;
  virtual void set_memory_observer(AllocationObserver* observer) = 0;
  // Drops `bytes` of device memory at `device_ptr` from the caches the
  // device's kernels read through, so that the next kernel reads them from
  // memory, as a kernel of a step does with a tensor written long before
  // (lms::profile_step, ProfileOptions::cold_input_min_bytes). Call it only
  // while no stream uses the range. The CPU-emulated device flushes the
  // host's cache lines of the range (the tensors are host memory); the
  // default, and the CUDA device, do nothing.
  virtual void evict_from_caches(const void* device_ptr, uint64_t bytes) {
    (void)device_ptr, (void)bytes;
  }

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
  // One range of upload_many: `bytes` from ordinary host memory at `host`
  // to device memory at `device`.
  struct Upload {
    void* device;
    const void* host;
    uint64_t bytes;
  };
  // Blocking copies of many ranges, each what upload() does, in one round
  // trip to the device where the device can: the CPU device validates every
  // range, then copies them all in one job on its compute stream (one upload
  // at a time was a hand-off to that stream per tensor: 66,000 of them for
  // the persistent tensors of a 100,000-node graph). Session::create uploads
  // the initial values of the persistent tensors with it. The default calls
  // upload() for each in turn. Errors: upload()'s, for the first range that
  // fails (the CPU device checks all before copying any, so on an error
  // nothing was copied).
  virtual absl::Status upload_many(std::span<const Upload> uploads) {
    for (const Upload& u : uploads) {
      if (absl::Status s = upload(u.device, u.host, u.bytes); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Kernels. compile() returns Unimplemented for an op the backend lacks and
  // InvalidArgument for attributes or shapes it cannot handle.
  virtual absl::StatusOr<std::unique_ptr<Kernel>> compile(const KernelSpec& spec) = 0;
  // Enqueues kernel.run(args) on the compute stream (the device keeps its
  // own copy of `args`). `node` and `op` name it for the profiler and error
  // messages; errors surface at synchronize(). A decorating Device (a test
  // that injects faults, a logger) forwards compile() and launch() as they
  // are, without needing the kernel types.
  virtual void launch(Kernel& kernel, const KernelArgs& args, std::string_view node,
                      std::string_view op) = 0;

  // Profiler sink (nullable, not owned).
  virtual void set_event_sink(EventSink* sink) = 0;

  // Runs `task` on the host in `stream`'s order: after everything enqueued
  // on that stream before, before anything enqueued after, as a CUDA host
  // function does (cudaLaunchHostFunc). The MPI communicator of
  // lms/distributed.h runs each gradient all-reduce this way on
  // StreamKind::kComm. `task` must not call the device; an error it returns
  // is an async error reported by synchronize(), as a kernel's is. `name`
  // labels it for the profiler. The default returns Unimplemented: a device
  // decorator forwards this call.
  virtual absl::Status enqueue_host_task(StreamKind stream, std::function<absl::Status()> task,
                                         std::string_view name);
};

// A host link that several emulated CPU devices share, as GPUs behind one
// PCIe switch share its uplink. Full duplex: each direction is a channel of
// its own, and concurrent copies in one direction share its bandwidth
// fairly. A copy moves in chunks of `chunk_bytes`; each chunk takes the
// direction's next free slot of chunk / bandwidth seconds, so k devices
// copying at once interleave their chunks and each gets about 1/k of the
// bandwidth. A copy alone takes latency_s + bytes / bandwidth, exactly what
// a device's own throttle (CpuDeviceOptions) gives.
//
//   LMS_ASSIGN_OR_RETURN(std::shared_ptr<lms::HostLink> pcie,
//                        lms::make_host_link({.d2h_bytes_per_s = 12e9, .h2d_bytes_per_s = 12e9}));
//   LMS_ASSIGN_OR_RETURN(auto gpu0, lms::make_cpu_device({.link = pcie}));
//   LMS_ASSIGN_OR_RETURN(auto gpu1, lms::make_cpu_device({.link = pcie}));
//
// The simulator's model of this contention is LmsConfig::link_devices
// (lms/config.h).
struct HostLinkOptions {
  double d2h_bytes_per_s = 0;  // device -> host bandwidth, bytes/s; 0 = unthrottled
  double h2d_bytes_per_s = 0;  // host -> device bandwidth, bytes/s; 0 = unthrottled
  // Seconds from the start of a copy until its first byte moves. It does not
  // occupy the link: concurrent copies wait out their latencies together.
  double latency_s = 0;
  // The unit of fair sharing, bytes, > 0. Smaller chunks share more evenly
  // and cost more sleeps.
  uint64_t chunk_bytes = uint64_t{512} << 10;
};

// Opaque: made by make_host_link, held by the devices that share it
// (CpuDeviceOptions::link). Thread-safe.
class HostLink;

// Errors: InvalidArgument naming the field for a negative or non-finite
// bandwidth or latency, or a zero chunk_bytes.
absl::StatusOr<std::shared_ptr<HostLink>> make_host_link(HostLinkOptions options);

// Algorithm of the emulated CPU device's convolutions. Results differ
// between algorithms only in rounding (Winograd: up to ~1e-5 of the sum of
// absolute terms); each is deterministic, so a graph gives the same bits
// with and without LMS under any of them.
enum class CpuConvAlgorithm {
  // Winograd F(4x4, 3x3) (Lavin & Gray, "Fast Algorithms for Convolutional
  // Neural Networks", CVPR 2016) where it pays: oneDNN's own on AVX-512 CPUs
  // when oneDNN's heuristic picks it; on CPUs below AVX-512, where oneDNN
  // 2.6 has none, lms's, whose matrix products run on oneDNN's matmul (2-D
  // 3x3 stride-1 convolutions, pad <= 2, with >= 16 input and output
  // channels that fill whole channel blocks; all three passes). Direct
  // convolution everywhere else.
  kAuto,
  // oneDNN's direct convolution everywhere (what PyTorch's CPU path runs).
  kDirect,
  // lms's Winograd wherever it applies, also on AVX-512 CPUs (it needs AVX2
  // and FMA; direct elsewhere): for comparisons and tests.
  kWinograd,
};

// The emulated CPU device: device memory is one region of `capacity_bytes`
// carved by the same BFC allocator the CUDA device uses, streams are worker
// threads, copies are memcpy throttled to an emulated link, kernels are
// oneDNN primitives. Anything that overflows the capacity fails as on a GPU.
struct CpuDeviceOptions {
  // Device memory region in bytes; reserved, so pages cost RAM only once
  // touched.
  uint64_t capacity_bytes = uint64_t{256} << 20;
  // Limit of the pinned host pool in bytes. Reserved lazily (mmap with
  // MAP_NORESERVE), so a large limit costs no RAM until blocks are used.
  uint64_t host_pool_bytes = uint64_t{4} << 30;
  // The device's own emulated link: every async copy and blocking
  // upload / download takes copy_latency_s + bytes / bandwidth seconds at
  // least, whatever other devices do.
  double d2h_bytes_per_s = 0;  // emulated link bandwidth, bytes/s; 0 = unthrottled
  double h2d_bytes_per_s = 0;
  double copy_latency_s = 0;  // seconds added to every async copy (and upload/download)
  // A link shared with other devices (make_host_link); when set, every async
  // copy and blocking upload / download is throttled by it instead (so a
  // device's own upload and swap-in also share its H2D channel), and the
  // three fields above must be 0.
  std::shared_ptr<HostLink> link = nullptr;
  // OpenMP threads for the kernels on the compute thread; 0 = all cores.
  int compute_threads = 0;
  CpuConvAlgorithm conv_algorithm = CpuConvAlgorithm::kAuto;
};

// Errors: InvalidArgument for a zero capacity or host pool, a negative or
// non-finite bandwidth or latency, a link together with a nonzero bandwidth
// or latency of the device's own (naming both), negative compute_threads or
// a conv_algorithm that is none of the enumerators;
// ResourceExhausted when a region cannot be reserved; Internal when oneDNN
// fails to start.
absl::StatusOr<std::unique_ptr<Device>> make_cpu_device(CpuDeviceOptions options);

// A CUDA GPU: cudaMalloc of one region under the BFC allocator, cudaHostAlloc
// for the pinned pool, non-blocking streams, cudaEvent, cuDNN.
struct CudaDeviceOptions {
  int device_ordinal = 0;
  // Device memory region in bytes; 0 = the free memory reported by
  // cudaMemGetInfo minus `reserve_bytes`.
  uint64_t capacity_bytes = 0;
  // With capacity_bytes = 0: bytes left free outside the region. The region
  // is allocated after the CUDA context and the cuDNN handle exist, so what
  // they take is measured, not guessed; the reserve is for what loads lazily
  // at first use (cuDNN's and lms's kernel modules) and for cuDNN's own
  // allocations.
  uint64_t reserve_bytes = uint64_t{256} << 20;
  // Limit of the pinned host pool in bytes. cudaHostAlloc pins it all up front.
  uint64_t host_pool_bytes = uint64_t{1} << 30;
};

// Errors: Unimplemented, saying why, when the library was built without the
// CUDA backend (nvcc or cuDNN not found at configure time) or no GPU is
// present (no driver, or cudaGetDeviceCount reports none); InvalidArgument
// for an ordinal out of range or a zero host pool; ResourceExhausted when a
// region cannot be allocated; Internal for other CUDA or cuDNN errors.
absl::StatusOr<std::unique_ptr<Device>> make_cuda_device(CudaDeviceOptions options);

// Whether this build of the library contains the CUDA backend.
bool cuda_backend_built();

}  // namespace lms
