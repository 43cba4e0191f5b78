#include "backend/cpu/cpu_event.h"

namespace lms::cpu {

uint64_t EventState::record(const std::function<void(uint64_t gen)>& enqueue_marker) {
  std::lock_guard<std::mutex> record_lock(record_mu_);
  uint64_t gen = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gen = ++next_gen_;
    pending_.insert(gen);
  }
  enqueue_marker(gen);
  {
    std::lock_guard<std::mutex> lock(mu_);
    latest_ = gen;
  }
  return gen;
}

void EventState::complete(uint64_t gen) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(gen);
  }
  cv_.notify_all();
}

uint64_t EventState::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

bool EventState::is_complete(uint64_t gen) const {
  std::lock_guard<std::mutex> lock(mu_);
  return !pending_.contains(gen);
}

bool EventState::wait_for(uint64_t gen) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (!pending_.contains(gen)) return false;
  cv_.wait(lock, [&] { return !pending_.contains(gen); });
  return true;
}

}  // namespace lms::cpu
