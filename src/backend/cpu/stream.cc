#include "backend/cpu/stream.h"

#include <utility>

namespace lms::cpu {

CpuStream::CpuStream(StreamKind kind, std::function<void()> on_start)
    : kind_(kind), worker_([this, start = std::move(on_start)] { run_worker(start); }) {}

CpuStream::~CpuStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_one();
  worker_.join();
}

void CpuStream::enqueue(std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
    ++enqueued_;
  }
  work_cv_.notify_one();
}

void CpuStream::synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = enqueued_;
  done_cv_.wait(lock, [&] { return finished_ >= target; });
}

bool CpuStream::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_ == enqueued_;
}

void CpuStream::run_worker(const std::function<void()>& on_start) {
  if (on_start) on_start();
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    work();
    work = nullptr;  // release captures before reporting completion
    lock.lock();
    ++finished_;
    done_cv_.notify_all();
  }
}

}  // namespace lms::cpu
