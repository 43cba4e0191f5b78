#include "backend/cpu/cpu_event.h"

#include "common/mutex.h"

namespace lms::cpu {

uint64_t EventState::record(const std::function<void(uint64_t gen)>& enqueue_marker) {
  MutexLock record_lock(&record_mu_);
  uint64_t gen = 0;
  {
    MutexLock lock(&mu_);
    gen = ++next_gen_;
    pending_.insert(gen);
  }
  enqueue_marker(gen);
  {
    MutexLock lock(&mu_);
    latest_ = gen;
  }
  return gen;
}

void EventState::complete(uint64_t gen) {
  {
    MutexLock lock(&mu_);
    pending_.erase(gen);
  }
  cv_.SignalAll();
}

uint64_t EventState::latest() const {
  MutexLock lock(&mu_);
  return latest_;
}

bool EventState::is_complete(uint64_t gen) const {
  MutexLock lock(&mu_);
  return !pending_.contains(gen);
}

bool EventState::wait_for(uint64_t gen) const {
  MutexLock lock(&mu_);
  if (!pending_.contains(gen)) return false;
  while (pending_.contains(gen)) lock.wait(&cv_);
  return true;
}

}  // namespace lms::cpu
