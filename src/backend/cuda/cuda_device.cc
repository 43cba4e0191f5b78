#include "backend/cuda/cuda_device.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_memory.h"
#include "backend/cuda/cuda_status.h"
#include "common/mutex.h"
#include "lms/status.h"
#include "lms/strings.h"

namespace lms::cuda {
namespace {

// Note [Event query]: cudaEventQuery on a pending event returns
// cudaErrorNotReady, which is not an error, but the runtime may also leave
// it in the thread's last-error slot; every custom kernel launcher returns
// cudaGetLastError() after its launch, so the next relu or add would report
// NotReady as its own failure and fail the step (PyTorch hit the same:
// its event query clears the error after NotReady). Every query goes
// through here.
cudaError_t query_event(cudaEvent_t event) {
  const cudaError_t err = cudaEventQuery(event);
  if (err == cudaErrorNotReady) (void)cudaGetLastError();
  return err;
}

class CudaEvent : public Event {
 public:
  CudaEvent(int ordinal, cudaEvent_t event) : ordinal_(ordinal), event_(event) {}
  ~CudaEvent() override {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }
  int ordinal() const { return ordinal_; }
  cudaEvent_t get() const { return event_; }
  // The stream of the latest record (kHost before any): a compute-stream
  // wait names it when it reports a stall (Note [Stall]).
  StreamKind recorded_on() const { return recorded_on_.load(std::memory_order_relaxed); }
  void set_recorded_on(StreamKind s) { recorded_on_.store(s, std::memory_order_relaxed); }

 private:
  int ordinal_;
  cudaEvent_t event_;
  std::atomic<StreamKind> recorded_on_{StreamKind::kHost};
};

void CUDART_CB stamp_start(void* data) { static_cast<StreamSpan*>(data)->start_s = now_s(); }

void CUDART_CB report_span(void* data) {
  std::unique_ptr<StreamSpan> span(static_cast<StreamSpan*>(data));
  const double end_s = now_s();
  switch (span->kind) {
    case StreamSpan::kCopy:
      span->sink->on_copy(span->stream, span->name, span->bytes, span->start_s, end_s);
      break;
    case StreamSpan::kNode:
      span->sink->on_node(span->stream, span->name, span->op, span->start_s, end_s);
      break;
    case StreamSpan::kStall:  // `name` holds the reason
      span->sink->on_stall(span->stream, span->name, "", span->start_s, end_s);
      break;
  }
}

absl::Status annotate(const absl::Status& status, std::string_view prefix) {
  return absl::Status(status.code(), absl::StrCat(to_absl(prefix), status.message()));
}

absl::Status no_device_error(cudaError_t err, int count) {
  if (err != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device: cudaGetDeviceCount returned ", cudaGetErrorName(err), " (",
                     cudaGetErrorString(err), ")"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no CUDA device: cudaGetDeviceCount reports ", count, " devices"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::create(CudaDeviceOptions options) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count <= 0) {
    (void)cudaGetLastError();
    return no_device_error(err, count);
  }
  if (options.device_ordinal < 0 || options.device_ordinal >= count) {
    return absl::InvalidArgumentError(absl::StrCat("CudaDeviceOptions.device_ordinal is ",
                                                   options.device_ordinal, "; allowed: 0..",
                                                   count - 1, " (", count, " devices)"));
  }
  if (options.host_pool_bytes == 0) {
    return absl::InvalidArgumentError("CudaDeviceOptions.host_pool_bytes is 0; it must be > 0");
  }
  std::unique_ptr<CudaDevice> device(new CudaDevice());
  LMS_RETURN_IF_ERROR(device->init(options));
  return device;
}

absl::Status CudaDevice::init(CudaDeviceOptions options) {
  options_ = options;
  LMS_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device_ordinal), "cudaSetDevice");
  // The context, the streams and the cuDNN handle first, so the region is
  // sized from the memory they leave (CudaDeviceOptions::reserve_bytes).
  LMS_CUDA_RETURN_IF_ERROR(cudaFree(nullptr), "creating the CUDA context (cudaFree(0))");
  size_t free_before = 0, free_after = 0, total = 0;
  LMS_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo");
  LMS_RETURN_IF_ERROR(init_streams());
  LMS_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_after, &total), "cudaMemGetInfo");
  handle_bytes_ = free_before > free_after ? free_before - free_after : 0;
  LMS_RETURN_IF_ERROR(init_memory(free_after));
  rebase_clock();
  return absl::OkStatus();
}

absl::Status CudaDevice::init_memory(uint64_t free_bytes) {
  uint64_t capacity = options_.capacity_bytes;
  if (capacity == 0) {
    if (free_bytes <= options_.reserve_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cuda:", options_.device_ordinal, " has ", free_bytes,
                       " bytes free after the CUDA context and the cuDNN handle took ",
                       handle_bytes_, ", not more than reserve_bytes = ", options_.reserve_bytes,
                       "; lower CudaDeviceOptions.reserve_bytes or free GPU memory"));
    }
    capacity = free_bytes - options_.reserve_bytes;
    options_.capacity_bytes = capacity;
  }
  const int ordinal = options_.device_ordinal;
  LMS_ASSIGN_OR_RETURN(memory_,
                       DeviceMemory::create({.device = std::make_unique<CudaSubAllocator>(ordinal),
                                             .device_bytes = capacity,
                                             .host = std::make_unique<PinnedSubAllocator>(ordinal),
                                             .host_bytes = options_.host_pool_bytes},
                                            &sink_));
  return absl::OkStatus();
}

absl::Status CudaDevice::init_streams() {
  for (cudaStream_t* s : {&compute_, &d2h_, &h2d_, &comm_}) {
    LMS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking),
                             "cudaStreamCreateWithFlags");
  }
  kernel_ctx_ = std::make_unique<CudaKernelContext>();
  kernel_ctx_->stream = compute_;
  LMS_CUDNN_RETURN_IF_ERROR(cudnnCreate(&kernel_ctx_->cudnn), "cudnnCreate");
  LMS_CUDNN_RETURN_IF_ERROR(cudnnSetStream(kernel_ctx_->cudnn, compute_), "cudnnSetStream");
  return absl::OkStatus();
}

CudaDevice::~CudaDevice() {
  bind();
  for (cudaStream_t s : {compute_, d2h_, h2d_, comm_}) {
    if (s != nullptr) (void)cudaStreamSynchronize(s);
  }
  if (kernel_ctx_ != nullptr) {
    if (kernel_ctx_->cudnn != nullptr) (void)cudnnDestroy(kernel_ctx_->cudnn);
  }
  for (cudaStream_t s : {compute_, d2h_, h2d_, comm_}) {
    if (s != nullptr) (void)cudaStreamDestroy(s);
  }
  // Spans never reported (no synchronize() after them) are dropped.
  for (auto& span : timed_spans_) recycle(*span);
  for (cudaEvent_t ev : spare_timing_events_) (void)cudaEventDestroy(ev);
  if (clock_base_ != nullptr) (void)cudaEventDestroy(clock_base_);
  // memory_ frees its regions (cudaFree / cudaFreeHost) as members are
  // destroyed, after every stream is idle.
}

std::string CudaDevice::name() const { return absl::StrCat("cuda:", options_.device_ordinal); }

void CudaDevice::bind() const { (void)cudaSetDevice(options_.device_ordinal); }

cudaStream_t CudaDevice::stream(StreamKind kind) const {
  switch (kind) {
    case StreamKind::kD2H:
      return d2h_;
    case StreamKind::kH2D:
      return h2d_;
    case StreamKind::kComm:
      return comm_;
    default:
      return compute_;
  }
}

void CudaDevice::set_async_error(absl::Status status) {
  MutexLock lock(&error_mu_);
  if (first_error_.ok()) first_error_ = std::move(status);
}

// ---- Spans for the event sink (Note [CUDA profiler events]) ----

cudaEvent_t CudaDevice::timing_event() {
  {
    MutexLock lock(&spans_mu_);
    if (!spare_timing_events_.empty()) {
      cudaEvent_t ev = spare_timing_events_.back();
      spare_timing_events_.pop_back();
      return ev;
    }
  }
  cudaEvent_t ev = nullptr;
  if (cudaEventCreateWithFlags(&ev, cudaEventDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return ev;
}

CudaDevice::SpanBracket CudaDevice::open_span(EventSink* sink, StreamKind kind,
                                              StreamSpan::Kind what, std::string_view name,
                                              std::string_view op, uint64_t bytes) {
  SpanBracket b;
  b.stream = stream(kind);
  auto span = std::make_unique<StreamSpan>(StreamSpan{.sink = sink,
                                                      .stream = kind,
                                                      .kind = what,
                                                      .name = std::string(name),
                                                      .op = std::string(op),
                                                      .bytes = bytes});
  if (sink->wants_live_spans()) {
    if (cudaLaunchHostFunc(b.stream, stamp_start, span.get()) == cudaSuccess) {
      b.live = span.release();
    } else {
      (void)cudaGetLastError();
    }
    return b;
  }
  span->start = timing_event();
  span->end = timing_event();
  if (span->start == nullptr || span->end == nullptr ||
      cudaEventRecord(span->start, b.stream) != cudaSuccess) {
    (void)cudaGetLastError();
    recycle(*span);
    return b;  // the span is not timed; the work still runs
  }
  b.timed = std::move(span);
  return b;
}

void CudaDevice::close_span(SpanBracket& b, const std::string& what) {
  if (b.live != nullptr) {
    if (cudaLaunchHostFunc(b.stream, report_span, b.live) != cudaSuccess) {
      (void)cudaGetLastError();
      // Not freed: the first callback is enqueued and will still write to
      // it. Leaked on this error path only.
      set_async_error(absl::InternalError(absl::StrCat(what, ": cudaLaunchHostFunc failed")));
    }
    b.live = nullptr;
    return;
  }
  if (b.timed == nullptr) return;
  if (cudaEventRecord(b.timed->end, b.stream) != cudaSuccess) {
    (void)cudaGetLastError();
    recycle(*b.timed);
    b.timed.reset();
    return;
  }
  MutexLock lock(&spans_mu_);
  timed_spans_.push_back(std::move(b.timed));
}

void CudaDevice::recycle(StreamSpan& span) {
  MutexLock lock(&spans_mu_);
  for (cudaEvent_t* ev : {&span.start, &span.end}) {
    if (*ev != nullptr) spare_timing_events_.push_back(*ev);
    *ev = nullptr;
  }
}

void CudaDevice::report_timed_spans(bool all) {
  std::vector<std::unique_ptr<StreamSpan>> done;
  {
    MutexLock lock(&spans_mu_);
    // In issue order, up to the first span still running: one query per
    // span reported plus one, so frequent event waits stay cheap; the rest
    // is reported at the next synchronize().
    size_t n = 0;
    while (n < timed_spans_.size() && (all || query_event(timed_spans_[n]->end) == cudaSuccess)) {
      done.push_back(std::move(timed_spans_[n]));
      ++n;
    }
    timed_spans_.erase(timed_spans_.begin(), timed_spans_.begin() + static_cast<std::ptrdiff_t>(n));
  }
  for (auto& span : done) {
    float start_ms = 0, end_ms = 0;
    const bool timed = clock_base_ != nullptr &&
                       cudaEventElapsedTime(&start_ms, clock_base_, span->start) == cudaSuccess &&
                       cudaEventElapsedTime(&end_ms, clock_base_, span->end) == cudaSuccess;
    if (!timed) {
      (void)cudaGetLastError();  // e.g. after a sticky error: the span is dropped
    } else {
      const double start_s = clock_base_s_ + start_ms * 1e-3;
      const double end_s = clock_base_s_ + end_ms * 1e-3;
      switch (span->kind) {
        case StreamSpan::kCopy:
          span->sink->on_copy(span->stream, span->name, span->bytes, start_s, end_s);
          break;
        case StreamSpan::kNode:
          span->sink->on_node(span->stream, span->name, span->op, start_s, end_s);
          break;
        case StreamSpan::kStall:  // `name` holds the reason
          span->sink->on_stall(span->stream, span->name, "", start_s, end_s);
          break;
      }
    }
    recycle(*span);
  }
}

void CudaDevice::rebase_clock() {
  if (clock_base_ == nullptr) {
    if (cudaEventCreateWithFlags(&clock_base_, cudaEventDefault) != cudaSuccess) {
      (void)cudaGetLastError();
      clock_base_ = nullptr;
      return;
    }
  }
  // The compute stream is idle here (creation, or the end of synchronize()),
  // so the event completes at once and now_s() after the wait is its time,
  // up to the wake-up latency of cudaEventSynchronize (microseconds).
  if (cudaEventRecord(clock_base_, compute_) != cudaSuccess ||
      cudaEventSynchronize(clock_base_) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  clock_base_s_ = now_s();
}

// ---- Memory ----

absl::StatusOr<void*> CudaDevice::allocate(uint64_t bytes) { return memory_->allocate(bytes); }
void CudaDevice::deallocate(void* ptr) { memory_->deallocate(ptr); }
AllocatorStats CudaDevice::memory_stats() const { return memory_->stats(); }
void CudaDevice::reset_peak_memory() { memory_->reset_peak(); }
void CudaDevice::set_memory_observer(AllocationObserver* observer) {
  memory_->set_observer(observer);
}

absl::StatusOr<void*> CudaDevice::allocate_host(uint64_t bytes) {
  return memory_->allocate_host(bytes);
}
void CudaDevice::deallocate_host(void* ptr) { memory_->deallocate_host(ptr); }
AllocatorStats CudaDevice::host_stats() const { return memory_->host_stats(); }
void CudaDevice::set_host_observer(AllocationObserver* observer) {
  memory_->set_host_observer(observer);
}

absl::Status CudaDevice::check_device_range(const void* ptr, uint64_t bytes,
                                            const std::string& what) const {
  if (ptr == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": null pointer"));
  if (!memory_->contains(ptr, bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": device range of ", bytes,
                                                   " bytes lies outside the device region of ",
                                                   memory_->capacity_bytes(), " bytes"));
  }
  return absl::OkStatus();
}

// ---- Streams and events ----

std::unique_ptr<Event> CudaDevice::create_event() {
  bind();
  cudaEvent_t ev = nullptr;
  absl::Status st = cuda_status(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                                "create_event: cudaEventCreateWithFlags");
  if (!st.ok()) {
    set_async_error(st);
    ev = nullptr;  // behaves as a never-recorded event; the error surfaces at synchronize()
  }
  return std::make_unique<CudaEvent>(options_.device_ordinal, ev);
}

namespace {
// The cudaEvent_t of `event` if it was created by device `ordinal` (null for
// one whose creation failed), or an error.
absl::StatusOr<cudaEvent_t> own_event(Event& event, int ordinal, std::string_view call) {
  auto* ev = dynamic_cast<CudaEvent*>(&event);
  if (ev == nullptr || ev->ordinal() != ordinal) {
    return absl::InvalidArgumentError(absl::StrCat(
        to_absl(call), ": the event was not created by this CUDA device (use create_event)"));
  }
  return ev->get();
}

// Called after own_event() accepted `event`.
CudaEvent& as_cuda_event(Event& event) { return static_cast<CudaEvent&>(event); }
}  // namespace

void CudaDevice::record(Event& event, StreamKind kind) {
  absl::StatusOr<cudaEvent_t> ev = own_event(event, options_.device_ordinal, "record");
  if (!ev.ok()) return set_async_error(ev.status());
  if (*ev == nullptr) return;
  bind();
  absl::Status st = cuda_status(cudaEventRecord(*ev, stream(kind)), "record: cudaEventRecord");
  if (!st.ok()) return set_async_error(st);
  as_cuda_event(event).set_recorded_on(kind == StreamKind::kHost ? StreamKind::kCompute : kind);
}

void CudaDevice::wait(StreamKind kind, Event& event) {
  absl::StatusOr<cudaEvent_t> ev = own_event(event, options_.device_ordinal, "wait");
  if (!ev.ok()) return set_async_error(ev.status());
  if (*ev == nullptr) return;
  bind();
  // A compute-stream wait on an event still pending at issue may stall the
  // stream (Note [Stall]): bracket it with host callbacks
  // (Note [CUDA profiler events]) so on_stall reports how long the stream
  // waited. A wait on an event already complete at issue cannot stall and
  // is not bracketed.
  EventSink* sink = sink_.load();
  SpanBracket span;
  if (sink != nullptr && kind == StreamKind::kCompute && query_event(*ev) == cudaErrorNotReady) {
    span = open_span(sink, kind, StreamSpan::kStall,
                     stall_reason(as_cuda_event(event).recorded_on()), "", 0);
  }
  absl::Status st =
      cuda_status(cudaStreamWaitEvent(stream(kind), *ev, 0), "wait: cudaStreamWaitEvent");
  if (!st.ok()) set_async_error(st);
  close_span(span, "wait");
}

bool CudaDevice::query(Event& event) {
  absl::StatusOr<cudaEvent_t> ev = own_event(event, options_.device_ordinal, "query");
  if (!ev.ok()) {
    set_async_error(ev.status());
    return true;  // never hang a caller polling a foreign event
  }
  if (*ev == nullptr) return true;
  bind();
  cudaError_t err = query_event(*ev);
  if (err == cudaErrorNotReady) return false;
  if (err != cudaSuccess) set_async_error(cuda_status(err, "query: cudaEventQuery"));
  return true;
}

void CudaDevice::synchronize(Event& event) {
  absl::StatusOr<cudaEvent_t> ev = own_event(event, options_.device_ordinal, "synchronize");
  if (!ev.ok()) return set_async_error(ev.status());
  if (*ev == nullptr) return;
  bind();
  absl::Status st = cuda_status(cudaEventSynchronize(*ev), "synchronize: cudaEventSynchronize");
  if (!st.ok()) set_async_error(st);
  report_timed_spans(/*all=*/false);  // the spans the wait has let finish
}

absl::Status CudaDevice::synchronize() {
  bind();
  for (StreamKind kind :
       {StreamKind::kCompute, StreamKind::kD2H, StreamKind::kH2D, StreamKind::kComm}) {
    absl::Status st = cuda_status(cudaStreamSynchronize(stream(kind)),
                                  absl::StrCat("synchronize: stream ", stream_name(kind)));
    if (!st.ok()) set_async_error(st);
  }
  // Every stream is idle: report the spans timed by events, then move the
  // clock base here so the next step's spans are measured from a fresh base.
  report_timed_spans(/*all=*/true);
  rebase_clock();
  MutexLock lock(&error_mu_);
  absl::Status first = std::move(first_error_);
  first_error_ = absl::OkStatus();
  return first;
}

// ---- Copies ----

void CudaDevice::enqueue_copy(StreamKind kind, void* dst, const void* src, uint64_t bytes,
                              std::string_view tensor) {
  const bool d2h = kind == StreamKind::kD2H;
  const std::string what =
      absl::StrCat(d2h ? "copy_d2h" : "copy_h2d", " of '", to_absl(tensor), "'");
  absl::Status range = check_device_range(d2h ? src : dst, bytes, what);
  if (!range.ok()) return set_async_error(range);
  if (dst == nullptr || src == nullptr) {
    return set_async_error(absl::InvalidArgumentError(absl::StrCat(what, ": null host pointer")));
  }
  bind();
  cudaStream_t s = stream(kind);
  EventSink* sink = sink_.load();
  SpanBracket span;
  if (sink != nullptr && sink->wants_spans()) {
    span = open_span(sink, kind, StreamSpan::kCopy, tensor, "", bytes);
  }
  absl::Status st = cuda_status(
      cudaMemcpyAsync(dst, src, bytes, d2h ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, s),
      absl::StrCat(what, ": cudaMemcpyAsync"));
  if (!st.ok()) set_async_error(st);
  close_span(span, what);
}

void CudaDevice::copy_d2h(void* host, const void* device, uint64_t bytes, std::string_view tensor) {
  enqueue_copy(StreamKind::kD2H, host, device, bytes, tensor);
}

void CudaDevice::copy_h2d(void* device, const void* host, uint64_t bytes, std::string_view tensor) {
  enqueue_copy(StreamKind::kH2D, device, host, bytes, tensor);
}

absl::Status CudaDevice::upload(void* device, const void* host, uint64_t bytes) {
  LMS_RETURN_IF_ERROR(check_device_range(device, bytes, "upload"));
  if (host == nullptr) return absl::InvalidArgumentError("upload: null host pointer");
  bind();
  LMS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, compute_),
                           "upload");
  LMS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_), "upload: cudaStreamSynchronize");
  return absl::OkStatus();
}

absl::Status CudaDevice::download(void* host, const void* device, uint64_t bytes) {
  LMS_RETURN_IF_ERROR(check_device_range(device, bytes, "download"));
  if (host == nullptr) return absl::InvalidArgumentError("download: null host pointer");
  bind();
  LMS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, compute_),
                           "download");
  LMS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_), "download: cudaStreamSynchronize");
  return absl::OkStatus();
}

// ---- Kernels ----

absl::StatusOr<std::unique_ptr<Kernel>> CudaDevice::compile(const KernelSpec& spec) {
  bind();
  return create_cuda_kernel(spec, *kernel_ctx_);
}

void CudaDevice::launch(Kernel& kernel, const KernelArgs& args, std::string_view node,
                        std::string_view op) {
  bind();
  EventSink* sink = sink_.load();
  SpanBracket span;
  if (sink != nullptr && sink->wants_spans()) {
    span = open_span(sink, StreamKind::kCompute, StreamSpan::kNode, node, op, 0);
  }
  absl::Status st = kernel.run(args);
  if (!st.ok()) {
    set_async_error(annotate(
        st, absl::StrCat("kernel of node '", to_absl(node), "' (op ", to_absl(op), "): ")));
  }
  close_span(span, absl::StrCat("launch of node '", to_absl(node), "'"));
}

void CudaDevice::set_event_sink(EventSink* sink) { sink_.store(sink); }

namespace {

struct HostTask {
  CudaDevice* device;
  std::function<absl::Status()> task;
  std::string name;
  std::function<void(absl::Status)> on_error;
};

void CUDART_CB run_host_task(void* data) {
  std::unique_ptr<HostTask> t(static_cast<HostTask*>(data));
  absl::Status status = t->task();
  if (!status.ok()) t->on_error(std::move(status));
}

}  // namespace

absl::Status CudaDevice::enqueue_host_task(StreamKind kind, std::function<absl::Status()> task,
                                           std::string_view name) {
  if (!task) return absl::InvalidArgumentError("enqueue_host_task: the task is empty");
  bind();
  auto t = std::make_unique<HostTask>();
  t->device = this;
  t->task = std::move(task);
  t->name = std::string(name);
  t->on_error = [this, n = t->name](absl::Status s) {
    set_async_error(annotate(s, absl::StrCat("'", n, "': ")));
  };
  LMS_CUDA_RETURN_IF_ERROR(cudaLaunchHostFunc(stream(kind), run_host_task, t.get()),
                           "cudaLaunchHostFunc");
  t.release();
  return absl::OkStatus();
}

}  // namespace lms::cuda
