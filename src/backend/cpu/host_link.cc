#include "backend/cpu/host_link.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/mutex.h"
#include "lms/status.h"

namespace lms {
namespace {

absl::Status check_non_negative(const char* field, double value, const char* zero_means) {
  if (std::isfinite(value) && value >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "HostLinkOptions.%s is %g; it must be finite and >= 0%s", field, value, zero_means));
}

absl::Status check_options(const HostLinkOptions& o) {
  LMS_RETURN_IF_ERROR(
      check_non_negative("d2h_bytes_per_s", o.d2h_bytes_per_s, " bytes/s (0 = unthrottled)"));
  LMS_RETURN_IF_ERROR(
      check_non_negative("h2d_bytes_per_s", o.h2d_bytes_per_s, " bytes/s (0 = unthrottled)"));
  LMS_RETURN_IF_ERROR(check_non_negative("latency_s", o.latency_s, " seconds"));
  if (o.chunk_bytes == 0) {
    return absl::InvalidArgumentError(
        "HostLinkOptions.chunk_bytes is 0; it must be > 0 (the unit of fair sharing, bytes)");
  }
  return absl::OkStatus();
}

void sleep_until(double t_s) {
  const double remaining_s = t_s - now_s();
  if (remaining_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(remaining_s));
}

}  // namespace

absl::StatusOr<std::shared_ptr<HostLink>> HostLink::create(HostLinkOptions options) {
  LMS_RETURN_IF_ERROR(check_options(options));
  return std::shared_ptr<HostLink>(new HostLink(options));
}

HostLink::HostLink(const HostLinkOptions& options) : options_(options) {
  d2h_.bytes_per_s = options.d2h_bytes_per_s;
  h2d_.bytes_per_s = options.h2d_bytes_per_s;
}

HostLink::Channel& HostLink::channel(StreamKind direction) {
  LMS_CHECK(direction == StreamKind::kD2H || direction == StreamKind::kH2D);
  return direction == StreamKind::kD2H ? d2h_ : h2d_;
}

double HostLink::reserve(StreamKind direction, uint64_t bytes, double ready_s) {
  Channel& c = channel(direction);
  if (c.bytes_per_s <= 0) return ready_s;
  MutexLock lock(&c.mu);
  c.busy_until_s = std::max(ready_s, c.busy_until_s) + static_cast<double>(bytes) / c.bytes_per_s;
  return c.busy_until_s;
}

void HostLink::copy(StreamKind direction, void* dst, const void* src, uint64_t bytes,
                    double start_s) {
  double ready_s = start_s + options_.latency_s;
  if (bytes == 0 || channel(direction).bytes_per_s <= 0) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return sleep_until(ready_s);
  }
  // Per Note [Shared host link], one slot per chunk, the next reserved only
  // after this one has ended.
  for (uint64_t offset = 0; offset < bytes; offset += options_.chunk_bytes) {
    const uint64_t n = std::min(options_.chunk_bytes, bytes - offset);
    ready_s = reserve(direction, n, ready_s);
    std::memcpy(static_cast<char*>(dst) + offset, static_cast<const char*>(src) + offset, n);
    sleep_until(ready_s);
  }
}

absl::StatusOr<std::shared_ptr<HostLink>> make_host_link(HostLinkOptions options) {
  return HostLink::create(options);
}

}  // namespace lms
