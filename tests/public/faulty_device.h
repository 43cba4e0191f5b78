// A Device decorator for fault injection, written against include/lms alone:
// it forwards everything to a real device and, when armed, fails the k-th
// device or pinned-host allocation from then on with ResourceExhausted. It
// can also claim another device kind, to test plan checks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "lms/device.h"

namespace lms::user {

class FaultyDevice : public Device {
 public:
  explicit FaultyDevice(std::unique_ptr<Device> inner, std::string kind = "")
      : inner_(std::move(inner)), kind_(std::move(kind)) {}

  // Counts allocations from now on and fails the `k`-th (1-based); k = 0
  // only counts.
  void arm(int64_t k) {
    fail_at_ = k;
    count_ = 0;
    failed_ = false;
  }
  void disarm() { fail_at_ = -1; }
  int64_t allocations() const { return count_; }  // since arm()
  bool failed() const { return failed_; }

  std::string name() const override { return "faulty(" + inner_->name() + ")"; }
  std::string kind() const override { return kind_.empty() ? inner_->kind() : kind_; }
  DeviceKind device_kind() const override { return inner_->device_kind(); }

  absl::StatusOr<void*> allocate(uint64_t bytes) override {
    if (absl::Status s = maybe_fail("device", bytes); !s.ok()) return s;
    return inner_->allocate(bytes);
  }
  void deallocate(void* ptr) override { inner_->deallocate(ptr); }
  AllocatorStats memory_stats() const override { return inner_->memory_stats(); }
  void reset_peak_memory() override { inner_->reset_peak_memory(); }
  void set_memory_observer(AllocationObserver* o) override { inner_->set_memory_observer(o); }
  // Forwarded, and counted: the calls and their bytes since construction or
  // clear_evictions().
  void evict_from_caches(const void* ptr, uint64_t bytes) override {
    ++evictions_;
    evicted_bytes_ += bytes;
    least_evicted_bytes_ = std::min(least_evicted_bytes_, bytes);
    inner_->evict_from_caches(ptr, bytes);
  }
  void clear_evictions() {
    evictions_ = 0;
    evicted_bytes_ = 0;
    least_evicted_bytes_ = UINT64_MAX;
  }
  int64_t evictions() const { return evictions_; }
  uint64_t evicted_bytes() const { return evicted_bytes_; }
  uint64_t least_evicted_bytes() const { return least_evicted_bytes_; }  // max when none

  absl::StatusOr<void*> allocate_host(uint64_t bytes) override {
    if (absl::Status s = maybe_fail("pinned host", bytes); !s.ok()) return s;
    return inner_->allocate_host(bytes);
  }
  void deallocate_host(void* ptr) override { inner_->deallocate_host(ptr); }
  AllocatorStats host_stats() const override { return inner_->host_stats(); }
  void set_host_observer(AllocationObserver* o) override { inner_->set_host_observer(o); }

  std::unique_ptr<Event> create_event() override { return inner_->create_event(); }
  void record(Event& e, StreamKind s) override { inner_->record(e, s); }
  void wait(StreamKind s, Event& e) override { inner_->wait(s, e); }
  bool query(Event& e) override { return inner_->query(e); }
  void synchronize(Event& e) override { inner_->synchronize(e); }
  absl::Status synchronize() override { return inner_->synchronize(); }

  void copy_d2h(void* host, const void* device, uint64_t bytes, std::string_view t) override {
    inner_->copy_d2h(host, device, bytes, t);
  }
  void copy_h2d(void* device, const void* host, uint64_t bytes, std::string_view t) override {
    inner_->copy_h2d(device, host, bytes, t);
  }
  absl::Status upload(void* device, const void* host, uint64_t bytes) override {
    return inner_->upload(device, host, bytes);
  }
  absl::Status download(void* host, const void* device, uint64_t bytes) override {
    return inner_->download(host, device, bytes);
  }

  absl::StatusOr<std::unique_ptr<Kernel>> compile(const KernelSpec& spec) override {
    return inner_->compile(spec);
  }
  void launch(Kernel& kernel, const KernelArgs& args, std::string_view node,
              std::string_view op) override {
    inner_->launch(kernel, args, node, op);
  }
  void set_event_sink(EventSink* sink) override { inner_->set_event_sink(sink); }

 private:
  absl::Status maybe_fail(std::string_view what, uint64_t bytes) {
    if (fail_at_ < 0) return absl::OkStatus();
    ++count_;
    if (fail_at_ == 0 || count_ != fail_at_) return absl::OkStatus();
    failed_ = true;
    return absl::ResourceExhaustedError(absl::StrCat("injected failure of ", std::string(what),
                                                     " allocation #", count_, " (", bytes,
                                                     " bytes)"));
  }

  std::unique_ptr<Device> inner_;
  std::string kind_;
  int64_t fail_at_ = -1;
  int64_t count_ = 0;
  bool failed_ = false;
  int64_t evictions_ = 0;
  uint64_t evicted_bytes_ = 0;
  uint64_t least_evicted_bytes_ = UINT64_MAX;
};

}  // namespace lms::user
