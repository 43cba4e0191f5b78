#include "backend/cpu/stream.h"

#include <utility>

#include "common/mutex.h"

namespace lms::cpu {

CpuStream::CpuStream(StreamKind kind, std::function<void()> on_start)
    : kind_(kind), worker_([this, start = std::move(on_start)] { run_worker(start); }) {}

CpuStream::~CpuStream() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_cv_.Signal();
  worker_.join();
}

void CpuStream::enqueue(std::function<void()> work) {
  {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(work));
    ++enqueued_;
  }
  work_cv_.Signal();
}

void CpuStream::synchronize() {
  MutexLock lock(&mu_);
  const uint64_t target = enqueued_;
  while (finished_ < target) lock.wait(&done_cv_);
}

bool CpuStream::idle() const {
  MutexLock lock(&mu_);
  return finished_ == enqueued_;
}

void CpuStream::run_worker(const std::function<void()>& on_start) {
  if (on_start) on_start();
  while (std::optional<std::function<void()>> work = next_work()) {
    (*work)();
    work.reset();  // release captures before reporting completion
    MutexLock lock(&mu_);
    ++finished_;
    done_cv_.SignalAll();
  }
}

std::optional<std::function<void()>> CpuStream::next_work() {
  MutexLock lock(&mu_);
  while (!stopping_ && queue_.empty()) lock.wait(&work_cv_);
  if (queue_.empty()) return std::nullopt;  // stopping and drained
  std::function<void()> work = std::move(queue_.front());
  queue_.pop_front();
  return work;
}

}  // namespace lms::cpu
