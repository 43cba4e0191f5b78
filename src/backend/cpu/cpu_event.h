// Events of the emulated CPU device, with cudaEventRecord semantics: every
// record() starts a new generation of the event; query / synchronize / wait
// refer to the generation that was latest when they were called, and a
// generation completes when its stream's worker reaches the record marker.
//
//   CpuEvent ev;
//   ev.state()->record([&](uint64_t g) {               // host, at record()
//     stream.enqueue([s = ev.state(), g] { s->complete(g); });
//   });
//   ev.state()->wait_for(ev.state()->latest());        // host or another stream
//
// The state is shared (shared_ptr) with the closures that complete or wait on
// it, so destroying a CpuEvent while its records are still queued is safe,
// like cudaEventDestroy.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lms/device.h"

namespace lms::cpu {

// Thread-safe generation bookkeeping of one event.
class EventState {
 public:
  // Starts a new generation (pending until complete()), calls
  // enqueue_marker(gen) to enqueue what will complete it, then publishes it
  // as latest(); returns it (1, 2, ...). Records of one event are serialised,
  // so a concurrent wait that sees generation g as latest() always finds g's
  // marker already enqueued: that is what keeps cross-stream waits free of
  // cycles (a wait is always behind the record it names, in enqueue order).
  uint64_t record(const std::function<void(uint64_t gen)>& enqueue_marker);
  // Marks generation `gen` complete and wakes every waiter.
  void complete(uint64_t gen);
  // The newest generation begun, or 0 when the event was never recorded.
  uint64_t latest() const;
  // True when `gen` has completed; generation 0 (never recorded) always has.
  bool is_complete(uint64_t gen) const;
  // Blocks the calling thread until `gen` has completed. Returns true when it
  // had to block (the generation was still pending on entry).
  bool wait_for(uint64_t gen) const;

 private:
  absl::Mutex record_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // held across a whole record()
  mutable absl::Mutex mu_;
  mutable absl::CondVar cv_;
  uint64_t latest_ ABSL_GUARDED_BY(mu_) = 0;    // newest published generation
  uint64_t next_gen_ ABSL_GUARDED_BY(mu_) = 0;  // newest generation begun
  // Generations begun but not completed. Re-recording an event on a different
  // stream can complete generations out of order, so a single counter would
  // not be exact.
  std::set<uint64_t> pending_ ABSL_GUARDED_BY(mu_);
};

class CpuEvent : public Event {
 public:
  CpuEvent() : state_(std::make_shared<EventState>()) {}
  const std::shared_ptr<EventState>& state() const { return state_; }
  // The stream of the latest record (kHost before any), set by
  // CpuDevice::record; a wait names it when it reports a stall
  // (Note [Stall]).
  StreamKind recorded_on() const { return recorded_on_.load(std::memory_order_relaxed); }
  void set_recorded_on(StreamKind stream) { recorded_on_.store(stream, std::memory_order_relaxed); }

 private:
  std::shared_ptr<EventState> state_;
  std::atomic<StreamKind> recorded_on_{StreamKind::kHost};
};

}  // namespace lms::cpu
