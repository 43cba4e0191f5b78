#include "backend/cpu/cpu_device.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backend/cpu/cpu_event.h"
#include "backend/cpu/host_link.h"
#include "backend/cpu/workspace_scale.h"
#include "common/mutex.h"
#include "lms/status.h"
#include "lms/units.h"

namespace lms::cpu {
namespace {

// Memory for one BfcAllocator region: an anonymous private mapping with
// MAP_NORESERVE, so the region costs no RAM until its pages are touched (a
// 4 GiB pinned pool limit is only a limit). With `lock_pages`, the region is
// mlock2()ed with MLOCK_ONFAULT: pages become page-locked as they are first
// touched, which is what pinned memory means without pre-faulting the whole
// limit. Locking is best effort (RLIMIT_MEMLOCK often refuses it).
class MmapSubAllocator : public SubAllocator {
 public:
  explicit MmapSubAllocator(bool lock_pages) : lock_pages_(lock_pages) {}

  void* alloc(uint64_t bytes) override {
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return nullptr;
    if (lock_pages_) locked_ = mlock2(base, bytes, MLOCK_ONFAULT) == 0;
    return base;
  }

  void free(void* base, uint64_t bytes) override {
    if (locked_) munlock(base, bytes);
    munmap(base, bytes);
  }

  bool pages_locked() const override { return locked_; }

 private:
  bool lock_pages_;
  bool locked_ = false;
};

// oneDNN on Debian runs on GNU OpenMP, which libdnnl already loads; the
// symbol is looked up at run time so lms_backend needs no OpenMP link of its
// own (and a oneDNN built on another threading runtime simply ignores it).
void set_openmp_threads(int threads) {
  using SetThreads = void (*)(int);
  auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (fn != nullptr) fn(threads);
}

absl::Status annotate(const absl::Status& status, const std::string& prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// A device throttled by a shared link has no link of its own: two throttles
// would each take their time and the slower would win unnoticed.
absl::Status check_one_link(const CpuDeviceOptions& o) {
  const char* own = o.d2h_bytes_per_s != 0   ? "d2h_bytes_per_s"
                    : o.h2d_bytes_per_s != 0 ? "h2d_bytes_per_s"
                    : o.copy_latency_s != 0  ? "copy_latency_s"
                                             : nullptr;
  if (own == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "CpuDeviceOptions.link and CpuDeviceOptions.", own,
      " are both set; a device sharing a link is throttled by the link's HostLinkOptions, so set "
      "its own d2h_bytes_per_s, h2d_bytes_per_s and copy_latency_s to 0"));
}

absl::Status check_options(const CpuDeviceOptions& o) {
  auto bad_rate = [](double v) { return !std::isfinite(v) || v < 0; };
  if (o.capacity_bytes == 0) {
    return absl::InvalidArgumentError("CpuDeviceOptions.capacity_bytes is 0; it must be > 0");
  }
  if (o.host_pool_bytes == 0) {
    return absl::InvalidArgumentError("CpuDeviceOptions.host_pool_bytes is 0; it must be > 0");
  }
  if (bad_rate(o.d2h_bytes_per_s) || bad_rate(o.h2d_bytes_per_s)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CpuDeviceOptions bandwidths (d2h %g, h2d %g bytes/s) must be finite and >= 0 "
        "(0 = unthrottled)",
        o.d2h_bytes_per_s, o.h2d_bytes_per_s));
  }
  if (bad_rate(o.copy_latency_s)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CpuDeviceOptions.copy_latency_s is %g; it must be finite and >= 0", o.copy_latency_s));
  }
  if (o.link != nullptr) LMS_RETURN_IF_ERROR(check_one_link(o));
  if (o.compute_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("CpuDeviceOptions.compute_threads is ",
                                                   o.compute_threads,
                                                   "; it must be >= 0 (0 = all cores)"));
  }
  const int algorithm = static_cast<int>(o.conv_algorithm);
  if (algorithm < static_cast<int>(CpuConvAlgorithm::kAuto) ||
      algorithm > static_cast<int>(CpuConvAlgorithm::kWinograd)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CpuDeviceOptions.conv_algorithm is ", algorithm,
                     "; it must be CpuConvAlgorithm::kAuto, kDirect or kWinograd"));
  }
  return absl::OkStatus();
}

CpuEvent* as_cpu_event(Event& event) { return dynamic_cast<CpuEvent*>(&event); }

}  // namespace

absl::StatusOr<std::unique_ptr<CpuDevice>> CpuDevice::create(CpuDeviceOptions options) {
  LMS_RETURN_IF_ERROR(check_options(options));
  std::unique_ptr<CpuDevice> device(new CpuDevice());
  LMS_RETURN_IF_ERROR(device->init(options));
  return device;
}

absl::Status CpuDevice::init(CpuDeviceOptions options) {
  options_ = options;
  LMS_ASSIGN_OR_RETURN(workspace_scale_, workspace_scale_from_env());
  LMS_ASSIGN_OR_RETURN(memory_,
                       DeviceMemory::create({.device = std::make_unique<MmapSubAllocator>(false),
                                             .device_bytes = options.capacity_bytes,
                                             .host = std::make_unique<MmapSubAllocator>(true),
                                             .host_bytes = options.host_pool_bytes},
                                            &sink_));
  try {
    kernel_ctx_.engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
    kernel_ctx_.stream = dnnl::stream(kernel_ctx_.engine);
    kernel_ctx_.conv_algorithm = options.conv_algorithm;
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN could not create the CPU engine: ", e.what()));
  }
  const int threads = options.compute_threads;
  compute_ = std::make_unique<CpuStream>(StreamKind::kCompute, [threads] {
    if (threads > 0) set_openmp_threads(threads);
  });
  d2h_ = std::make_unique<CpuStream>(StreamKind::kD2H);
  h2d_ = std::make_unique<CpuStream>(StreamKind::kH2D);
  comm_ = std::make_unique<CpuStream>(StreamKind::kComm);
  return absl::OkStatus();
}

CpuDevice::~CpuDevice() {
  // Per Note [Stream shutdown], every worker drains before any is destroyed, so
  // a wait on another stream's event always finds that stream running.
  for (CpuStream* s : {compute_.get(), d2h_.get(), h2d_.get(), comm_.get()}) {
    if (s != nullptr) s->synchronize();
  }
  comm_.reset();
  h2d_.reset();
  d2h_.reset();
  compute_.reset();
}

// ---- Memory -------------------------------------------------------------

absl::StatusOr<void*> CpuDevice::allocate(uint64_t bytes) { return memory_->allocate(bytes); }
void CpuDevice::deallocate(void* ptr) { memory_->deallocate(ptr); }
AllocatorStats CpuDevice::memory_stats() const { return memory_->stats(); }
void CpuDevice::reset_peak_memory() { memory_->reset_peak(); }

void CpuDevice::evict_from_caches(const void* device_ptr, uint64_t bytes) {
#if defined(__x86_64__) || defined(__i386__)
  // clflush is SSE2, so on every x86-64 CPU; one per 64-byte line (the
  // line size of every x86-64 CPU lms runs on), then a fence so that the
  // flushes complete before the caller's next kernel.
  const auto* p = static_cast<const char*>(device_ptr);
  for (uint64_t offset = 0; offset < bytes; offset += 64) _mm_clflush(p + offset);
  if (bytes > 0) _mm_mfence();
#else
  (void)device_ptr, (void)bytes;
#endif
}
void CpuDevice::set_memory_observer(AllocationObserver* observer) {
  memory_->set_observer(observer);
}

absl::StatusOr<void*> CpuDevice::allocate_host(uint64_t bytes) {
  return memory_->allocate_host(bytes);
}
void CpuDevice::deallocate_host(void* ptr) { memory_->deallocate_host(ptr); }
AllocatorStats CpuDevice::host_stats() const { return memory_->host_stats(); }
void CpuDevice::set_host_observer(AllocationObserver* observer) {
  memory_->set_host_observer(observer);
}
bool CpuDevice::host_pages_locked() const { return memory_->host_pages_locked(); }

absl::Status CpuDevice::check_device_range(const void* ptr, uint64_t bytes,
                                           const std::string& what) const {
  if (bytes == 0 || memory_->contains(ptr, bytes)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: device range [%p, +%d bytes) lies outside the device memory region [%p, +%d bytes)",
      what, ptr, bytes, memory_->base(), memory_->capacity_bytes()));
}

// ---- Streams and events ---------------------------------------------------

CpuStream& CpuDevice::stream(StreamKind kind) {
  switch (kind) {
    case StreamKind::kD2H:
      return *d2h_;
    case StreamKind::kH2D:
      return *h2d_;
    case StreamKind::kComm:
      return *comm_;
    default:
      return *compute_;  // kHost has no stream; host-ordered work goes to compute
  }
}

std::unique_ptr<Event> CpuDevice::create_event() { return std::make_unique<CpuEvent>(); }

void CpuDevice::record(Event& event, StreamKind kind) {
  CpuEvent* ev = as_cpu_event(event);
  if (ev == nullptr) {
    set_async_error(absl::InvalidArgumentError(
        "record: the event was not created by a CPU device (use CpuDevice::create_event)"));
    return;
  }
  std::shared_ptr<EventState> state = ev->state();
  CpuStream& target = stream(kind);
  ev->set_recorded_on(target.kind());
  state->record([&](uint64_t gen) { target.enqueue([state, gen] { state->complete(gen); }); });
}

void CpuDevice::wait(StreamKind kind, Event& event) {
  CpuEvent* ev = as_cpu_event(event);
  if (ev == nullptr) {
    set_async_error(absl::InvalidArgumentError(
        "wait: the event was not created by a CPU device (use CpuDevice::create_event)"));
    return;
  }
  std::shared_ptr<EventState> state = ev->state();
  const uint64_t gen = state->latest();
  if (gen == 0) return;  // never recorded: complete
  // Per Note [Stall], a compute-stream wait that blocks is a stall. Only
  // an event of a copy stream can block it: the compute worker reaches a
  // wait after every record enqueued on compute before it.
  const char* reason = stall_reason(ev->recorded_on());
  stream(kind).enqueue([this, state, gen, kind, reason] {
    const double start_s = now_s();
    const bool blocked = state->wait_for(gen);
    EventSink* sink = sink_.load();
    if (blocked && sink != nullptr && kind == StreamKind::kCompute) {
      sink->on_stall(StreamKind::kCompute, reason, "", start_s, now_s());
    }
  });
}

bool CpuDevice::query(Event& event) {
  CpuEvent* ev = as_cpu_event(event);
  return ev == nullptr || ev->state()->is_complete(ev->state()->latest());
}

void CpuDevice::synchronize(Event& event) {
  CpuEvent* ev = as_cpu_event(event);
  if (ev != nullptr) ev->state()->wait_for(ev->state()->latest());
}

absl::Status CpuDevice::synchronize() {
  compute_->synchronize();
  d2h_->synchronize();
  h2d_->synchronize();
  comm_->synchronize();
  MutexLock lock(&error_mu_);
  absl::Status error = std::exchange(first_error_, absl::OkStatus());
  error_pending_.store(false);
  return error;
}

void CpuDevice::set_async_error(absl::Status status) {
  MutexLock lock(&error_mu_);
  if (first_error_.ok()) first_error_ = std::move(status);
  error_pending_.store(true);
}

bool CpuDevice::has_async_error() const { return error_pending_.load(); }

// ---- Copies ---------------------------------------------------------------

void CpuDevice::move_bytes(StreamKind direction, void* dst, const void* src, uint64_t bytes,
                           double start_s) const {
  if (options_.link != nullptr) {
    return options_.link->copy(direction, dst, src, bytes, start_s);
  }
  if (bytes > 0) std::memcpy(dst, src, bytes);
  const double rate =
      direction == StreamKind::kD2H ? options_.d2h_bytes_per_s : options_.h2d_bytes_per_s;
  double duration_s = options_.copy_latency_s;
  if (rate > 0) duration_s += static_cast<double>(bytes) / rate;
  const double remaining_s = start_s + duration_s - now_s();
  if (remaining_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(remaining_s));
}

void CpuDevice::enqueue_copy(StreamKind kind, void* dst, const void* src, uint64_t bytes,
                             std::string_view tensor) {
  const bool to_host = kind == StreamKind::kD2H;
  const std::string what =
      absl::StrCat(to_host ? "copy_d2h" : "copy_h2d", " of tensor '", std::string(tensor), "'");
  absl::Status valid = check_device_range(to_host ? src : dst, bytes, what);
  if (valid.ok() && bytes > 0 && (dst == nullptr || src == nullptr)) {
    valid = absl::InvalidArgumentError(absl::StrCat(what, ": null pointer for ", bytes, " bytes"));
  }
  stream(kind).enqueue([this, kind, dst, src, bytes, valid, name = std::string(tensor)] {
    if (!valid.ok()) return set_async_error(valid);
    const double start_s = now_s();
    move_bytes(kind, dst, src, bytes, start_s);
    if (EventSink* sink = sink_.load(); sink != nullptr && sink->wants_spans()) {
      sink->on_copy(kind, name, bytes, start_s, now_s());
    }
  });
}

void CpuDevice::copy_d2h(void* host, const void* device, uint64_t bytes, std::string_view tensor) {
  enqueue_copy(StreamKind::kD2H, host, device, bytes, tensor);
}

void CpuDevice::copy_h2d(void* device, const void* host, uint64_t bytes, std::string_view tensor) {
  enqueue_copy(StreamKind::kH2D, device, host, bytes, tensor);
}

absl::Status CpuDevice::blocking_copy(StreamKind direction, void* dst, const void* src,
                                      uint64_t bytes) {
  const bool to_host = direction == StreamKind::kD2H;
  LMS_RETURN_IF_ERROR(
      check_device_range(to_host ? src : dst, bytes, to_host ? "download" : "upload"));
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(to_host ? "download" : "upload", ": null pointer for ", bytes, " bytes"));
  }
  // On the compute stream, so it is ordered after every kernel launched so far.
  // `done` is shared with the closure: the host may return (and drop its
  // reference) the moment complete() releases the event's lock.
  auto done = std::make_shared<EventState>();
  const uint64_t gen = done->record([&](uint64_t g) {
    compute_->enqueue([this, direction, dst, src, bytes, done, g] {
      move_bytes(direction, dst, src, bytes, now_s());
      done->complete(g);
    });
  });
  done->wait_for(gen);
  return absl::OkStatus();
}

absl::Status CpuDevice::upload(void* device, const void* host, uint64_t bytes) {
  return blocking_copy(StreamKind::kH2D, device, host, bytes);
}

absl::Status CpuDevice::upload_many(std::span<const Upload> uploads) {
  for (const Upload& u : uploads) {
    LMS_RETURN_IF_ERROR(check_device_range(u.device, u.bytes, "upload"));
    if (u.bytes > 0 && (u.device == nullptr || u.host == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("upload: null pointer for ", u.bytes, " bytes"));
    }
  }
  if (uploads.empty()) return absl::OkStatus();
  // As blocking_copy, on the compute stream, one job for every range; each
  // range is timed as its own upload (copy_latency_s + bytes / bandwidth).
  auto done = std::make_shared<EventState>();
  const uint64_t gen = done->record([&](uint64_t g) {
    compute_->enqueue([this, uploads, done, g] {
      for (const Upload& u : uploads) {
        if (u.bytes > 0) move_bytes(StreamKind::kH2D, u.device, u.host, u.bytes, now_s());
      }
      done->complete(g);
    });
  });
  done->wait_for(gen);
  return absl::OkStatus();
}

absl::Status CpuDevice::download(void* host, const void* device, uint64_t bytes) {
  return blocking_copy(StreamKind::kD2H, host, device, bytes);
}

// ---- Kernels --------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Kernel>> CpuDevice::compile(const KernelSpec& spec) {
  // Primitives are created on the compute thread: oneDNN sizes its parallel
  // work by the OpenMP thread count of the creating thread, and kernels must
  // be deterministic for the compute thread's count.
  absl::StatusOr<std::unique_ptr<Kernel>> result = absl::InternalError("compile did not run");
  auto done = std::make_shared<EventState>();
  const uint64_t gen = done->record([&](uint64_t g) {
    compute_->enqueue([this, &spec, &result, done, g] {
      try {
        result = create_cpu_kernel(spec, kernel_ctx_);
        if (result.ok()) *result = scale_workspace(*std::move(result), workspace_scale_);
      } catch (const std::exception& e) {
        result = absl::InternalError(
            absl::StrCat("compiling the kernel of node '", spec.name, "' threw: ", e.what()));
      }
      done->complete(g);
    });
  });
  done->wait_for(gen);
  return result;
}

void CpuDevice::launch(Kernel& kernel, const KernelArgs& args, std::string_view node,
                       std::string_view op) {
  compute_->enqueue(
      [this, k = &kernel, args = args, node = std::string(node), op = std::string(op)] {
        if (has_async_error()) return;  // Note [CPU device async errors]
        const double start_s = now_s();
        absl::Status status;
        try {
          status = k->run(args);
        } catch (const std::exception& e) {
          status = absl::InternalError(absl::StrCat("threw: ", e.what()));
        }
        const double end_s = now_s();
        if (EventSink* sink = sink_.load(); sink != nullptr && sink->wants_spans()) {
          sink->on_node(StreamKind::kCompute, node, op, start_s, end_s);
        }
        if (!status.ok()) {
          set_async_error(
              annotate(status, absl::StrCat("kernel of node '", node, "' (op ", op, "): ")));
        }
      });
}

void CpuDevice::set_event_sink(EventSink* sink) { sink_.store(sink); }

absl::Status CpuDevice::enqueue_host_task(StreamKind kind, std::function<absl::Status()> task,
                                          std::string_view name) {
  if (!task) return absl::InvalidArgumentError("enqueue_host_task: the task is empty");
  stream(kind).enqueue([this, kind, task = std::move(task), name = std::string(name)] {
    const double start_s = now_s();
    absl::Status status = task();
    if (EventSink* sink = sink_.load(); sink != nullptr && sink->wants_spans()) {
      sink->on_node(kind == StreamKind::kHost ? StreamKind::kCompute : kind, name, "host_task",
                    start_s, now_s());
    }
    if (!status.ok()) set_async_error(annotate(status, absl::StrCat("'", name, "': ")));
  });
  return absl::OkStatus();
}

}  // namespace lms::cpu

namespace lms {

absl::Status Device::enqueue_host_task(StreamKind, std::function<absl::Status()>,
                                       std::string_view) {
  return absl::UnimplementedError(absl::StrCat(
      "device '", name(), "' does not run host tasks on its streams (Device::enqueue_host_task)"));
}

absl::StatusOr<std::unique_ptr<Device>> make_cpu_device(CpuDeviceOptions options) {
  LMS_ASSIGN_OR_RETURN(std::unique_ptr<cpu::CpuDevice> device, cpu::CpuDevice::create(options));
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace lms
