// The host link that emulated CPU devices share (lms/device.h: HostLink,
// make_host_link, CpuDeviceOptions::link): memcpy paced to a bandwidth that
// concurrent copies in one direction divide between them.
//
//   LMS_ASSIGN_OR_RETURN(std::shared_ptr<HostLink> link,
//                        HostLink::create({.d2h_bytes_per_s = 2e9, .h2d_bytes_per_s = 2e9}));
//   link->copy(StreamKind::kH2D, device_ptr, host_ptr, bytes, now_s());   // blocks
//
// Note [Shared host link]: each direction is a channel with one cursor,
// `busy_until_s`, the end of the last slot reserved on it. A copy moves in
// chunks of chunk_bytes; for each chunk it reserves, under the channel's
// mutex, the slot [max(ready, busy_until_s), + chunk / bandwidth), copies
// the chunk and sleeps until the slot ends. `ready` is the end of the copy's
// own previous slot (its start + latency for the first chunk), not the time
// its thread woke up, so a sleep that overshoots costs no bandwidth: a copy
// alone takes latency + bytes / bandwidth, as the device's own throttle
// does. A copy holds at most one future slot, so a chunk of another copy
// that reserves meanwhile is served next: k copies at once alternate their
// chunks and each moves at about 1/k of the bandwidth. Assumptions: times
// are lms::now_s(); a copy's own memcpy of a chunk is faster than its slot
// (otherwise the copy runs at memcpy speed, as an unthrottled one does).
// The simulator's counterpart is CostOptions::link_devices
// (swap/cost_model.h).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lms/device.h"
#include "lms/profiler/event_sink.h"

namespace lms {

class HostLink {
 public:
  // InvalidArgument naming the field for a negative or non-finite bandwidth
  // or latency, or a zero chunk_bytes.
  static absl::StatusOr<std::shared_ptr<HostLink>> create(HostLinkOptions options);
  HostLink(const HostLink&) = delete;
  HostLink& operator=(const HostLink&) = delete;

  const HostLinkOptions& options() const { return options_; }

  // Copies `bytes` from `src` to `dst` over `direction` (kD2H or kH2D) for a
  // copy that started at `start_s` (lms::now_s()); returns when its last
  // chunk's slot has ended (Note [Shared host link]). Thread-safe.
  void copy(StreamKind direction, void* dst, const void* src, uint64_t bytes, double start_s);

  // Reserves the next free slot of `direction` for `bytes`, starting no
  // earlier than `ready_s`, and returns its end in seconds. copy() calls it
  // once per chunk; tests call it to check the schedule without sleeping.
  double reserve(StreamKind direction, uint64_t bytes, double ready_s);

 private:
  struct Channel {
    double bytes_per_s = 0;  // 0: unthrottled, no slots
    absl::Mutex mu;
    double busy_until_s ABSL_GUARDED_BY(mu) = 0;
  };

  explicit HostLink(const HostLinkOptions& options);
  Channel& channel(StreamKind direction);

  const HostLinkOptions options_;
  Channel d2h_;
  Channel h2d_;
};

}  // namespace lms
