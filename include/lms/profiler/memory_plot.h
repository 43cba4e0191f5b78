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

// The SVG text that write_memory_svg writes. Errors: InvalidArgument when
// `series` is empty, a series has no points, or a time is not finite.
absl::StatusOr<std::string> memory_svg(const std::vector<MemorySeries>& series,
                                       uint64_t capacity_bytes, std::string_view title);

// Writes memory_svg(...) to `path` atomically (temp file + rename).
// capacity_bytes = 0 draws no capacity line. Errors: those of memory_svg;
// InvalidArgument for an empty path; Internal naming the path when it cannot
// be written.
absl::Status write_memory_svg(const std::vector<MemorySeries>& series, uint64_t capacity_bytes,
                              const std::string& path, std::string_view title);

}  // namespace lms
