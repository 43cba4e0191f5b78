// lms-bench output: the table and limits as text, and everything as JSON.
//
//   std::cout << lms::bench::format_table(result) << lms::bench::format_limits(result);
//   LMS_RETURN_IF_ERROR(lms::bench::write_json(lms::bench::to_json(result), "out/bench.json"));
#pragma once

#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "sweep.h"

namespace lms::bench {

// One line per run: size | LMS | time/step (s, mean after the first step) |
// peak device MiB (measured) | planned MiB (the planner's predicted peak) |
// pinned host MiB | swapped MiB/step | status; then the goal line: how many
// runs' measured peak equals the predicted one to the byte.
std::string format_table(const SweepResult& result);

// The searched limits, their ratio (for volumes also the voxel ratio) and
// the share of the working-set limit, and for unet3d the goal line with
// what was reached; empty when the sweep did not search.
std::string format_limits(const SweepResult& result);

// LMS max / no-LMS max (0 when no-LMS max is 0) and LMS max / working-set
// max in percent (0 when the latter is 0).
double lms_ratio(const Limits& limits);
double working_set_pct(const Limits& limits);
// lms_ratio cubed (volumes: voxels grow with the side's cube) and squared (2-D).
double voxel_ratio(const Limits& limits);
double area_ratio(const Limits& limits);

// The 3-D U-Net's goals in voxels, LMS max^3 / no-LMS max^3, each at >= 99%
// of the working-set limit: the TFLMS case study and TFLMS v2.
inline constexpr double kCaseStudyVoxelRatio = 2.4;
inline constexpr double kTflmsV2VoxelRatio = 5.6;

nlohmann::json to_json(const CaseResult& row);
nlohmann::json to_json(const SweepResult& result);

// Writes json.dump(2) atomically (temp file + rename). Errors of
// write_file_atomically (InvalidArgument for an empty path, Internal naming
// the path otherwise).
absl::Status write_json(const nlohmann::json& json, const std::string& path);

}  // namespace lms::bench
