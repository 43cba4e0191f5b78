#pragma once

// The scoped lock every absl::Mutex in lms is taken with, so that members
// marked ABSL_GUARDED_BY are checked by Clang's -Wthread-safety and the
// synchronisation stays visible to ThreadSanitizer.
//
//   mutable absl::Mutex mu_;
//   uint64_t finished_ ABSL_GUARDED_BY(mu_) = 0;
//   absl::CondVar done_cv_;
//   ...
//   MutexLock lock(&mu_);
//   while (finished_ < target) lock.wait(&done_cv_);
//
// Note [TSan and absl::Mutex]: Debian's Abseil is built without
// ThreadSanitizer, so TSan cannot see absl::Mutex's (or absl::CondVar's)
// synchronisation and reports races on everything the mutex guards. Under
// TSan this guard states the happens-before edges itself: release at unlock,
// acquire at lock, and both around a condition-variable wait, which unlocks
// and relocks the mutex inside Abseil.

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace lms {

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(absl::Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
    acquired();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
    releasing();
    mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Releases the mutex until `cv` is signalled (or spuriously), then holds it
  // again: callers loop on their condition.
  void wait(absl::CondVar* cv) {
    releasing();
    cv->Wait(mu_);
    acquired();
  }

 private:
  void acquired() {
#if defined(__SANITIZE_THREAD__)
    __tsan_acquire(mu_);
#endif
  }
  void releasing() {
#if defined(__SANITIZE_THREAD__)
    __tsan_release(mu_);
#endif
  }

  absl::Mutex* const mu_;
};

}  // namespace lms
