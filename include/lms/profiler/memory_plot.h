// Memory-over-time plot as a standalone SVG file, e.g. device bytes in use
// over one step with LMS and without LMS, overlaid against the capacity.
//
//   std::vector<lms::MemorySeries> s = {lms::device_series(with_lms, "LMS on", 3),
//                                       lms::device_series(without, "LMS off", 3)};
//   LMS_RETURN_IF_ERROR(lms::write_memory_svg(s, 256 << 20, "memory.svg", "VDSR batch 32"));
//
// Each series' time is normalised to its own span (x = 0 at its first sample,
// 1 at its last), so runs of different length line up step for step. Bytes in
// use is a step function, so a series of n samples is drawn as a polyline of
// 2n - 1 points (2 points when n = 1: a flat line over the whole width).
// y is MiB (2^20 bytes) from 0, with ticks; the capacity is a dashed red line.
//
// The same plot over schedule positions instead of time, planned against
// measured (x = the fraction of the step's nodes issued):
//
//   std::vector<lms::MemorySeries> s = {
//       lms::position_series(report.device_bytes_by_position, "planned"),
//       lms::position_series(step.device_bytes_by_position, "measured")};
//   LMS_RETURN_IF_ERROR(lms::write_memory_svg(s, capacity, "by_position.svg", "VDSR",
//                                             lms::kPositionAxis));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/profiler/recorder.h"

namespace lms {

struct MemorySeries {
  std::string label;
  std::vector<std::pair<double, uint64_t>> points;  // (t_s, bytes in use)
};

// The device-memory samples of `recorder`. With step >= 0, only that step's
// window [start_s, end_s], starting from the value in use when it began;
// step < 0 means the whole recording. A step that was not recorded gives a
// series with no points (which write_memory_svg rejects).
MemorySeries device_series(const Recorder& recorder, std::string label, int64_t step = -1);

// Bytes by schedule position (RewriteReport or StepResult
// ::device_bytes_by_position) as a series over x = position: point p holds
// bytes[p] from p to p + 1, so the last position has a width too. An empty
// vector gives a series with no points.
MemorySeries position_series(const std::vector<uint64_t>& bytes_by_position, std::string label);

// x-axis labels of memory_svg.
inline constexpr std::string_view kTimeAxis = "time (fraction of each series' span)";
inline constexpr std::string_view kPositionAxis = "schedule position (fraction of the step)";

// The SVG text that write_memory_svg writes. Errors: InvalidArgument when
// `series` is empty, a series has no points, or a time is not finite.
absl::StatusOr<std::string> memory_svg(const std::vector<MemorySeries>& series,
                                       uint64_t capacity_bytes, std::string_view title,
                                       std::string_view x_label = kTimeAxis);

// Writes memory_svg(...) to `path` atomically (temp file + rename).
// capacity_bytes = 0 draws no capacity line. Errors: those of memory_svg;
// InvalidArgument for an empty path; Internal naming the path when it cannot
// be written.
absl::Status write_memory_svg(const std::vector<MemorySeries>& series, uint64_t capacity_bytes,
                              const std::string& path, std::string_view title,
                              std::string_view x_label = kTimeAxis);

}  // namespace lms
