// A stream of the emulated CPU device: one worker thread that runs the
// closures enqueued on it one at a time, in enqueue order (FIFO), like a CUDA
// stream runs its work. Cross-stream ordering comes from events
// (cpu_event.h): a closure that waits on another stream's event blocks only
// this worker, never the host.
//
//   CpuStream stream(StreamKind::kCompute);
//   stream.enqueue([] { run_kernel(); });   // returns at once
//   stream.synchronize();                   // host blocks until it has run
//
// Note [Stream shutdown]: the destructor drains the queue (runs every closure
// already enqueued) and then joins the worker. It never drops work, because a
// dropped record marker would leave an event pending forever and hang any
// stream or host waiting on it; since a wait can only name a record enqueued
// before it (host order), draining always terminates as long as each closure
// does.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lms/profiler/event_sink.h"

namespace lms::cpu {

class CpuStream {
 public:
  // `on_start` (optional) runs first on the worker thread, e.g. to set the
  // OpenMP thread count of the compute thread.
  explicit CpuStream(StreamKind kind, std::function<void()> on_start = {});
  ~CpuStream();  // drains, then joins; see Note [Stream shutdown]
  CpuStream(const CpuStream&) = delete;
  CpuStream& operator=(const CpuStream&) = delete;

  // Thread-safe; never blocks on the queued work. Closures must not throw.
  void enqueue(std::function<void()> work);
  // Blocks the caller until everything enqueued before this call has run.
  void synchronize();
  // True when nothing enqueued is waiting or running.
  bool idle() const;
  StreamKind kind() const { return kind_; }

 private:
  void run_worker(const std::function<void()>& on_start);
  // The next closure to run, waiting for one; nullopt once stopping and
  // drained.
  std::optional<std::function<void()>> next_work();

  const StreamKind kind_;
  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;  // worker: new work or shutdown
  absl::CondVar done_cv_;  // synchronize(): progress
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;  // closures ever enqueued
  uint64_t finished_ ABSL_GUARDED_BY(mu_) = 0;  // closures that have run to completion
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;  // last: starts after the state above is built
};

}  // namespace lms::cpu
