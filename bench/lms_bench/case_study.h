// The high-resolution case study (the TFLMS 3-D U-Net study, arXiv
// 1807.02037 Sec. 5, after Isensee et al.'s BraTS 2017 network): train the
// same 3-D U-Net on the real MRI at the largest cube that fits the device
// without LMS and at the largest that fits with LMS, for the same number of
// steps, then compare Dice per class on one common evaluation grid, the
// high-resolution one; the low-resolution prediction is resampled up to it
// (nearest), as the study did.
//
//   CaseStudyOptions o{.data_dir = "data/mri", .no_lms_size = 32, .lms_size = 64};
//   LMS_ASSIGN_OR_RETURN(CaseStudyResult r, run_case_study(o, std::cerr));
//   std::cout << format_case_study(r);
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace lms::bench {

inline constexpr uint64_t kCaseStudyEvalCapacity = uint64_t{4} << 30;  // bytes

struct CaseStudyOptions {
  std::string data_dir;     // the fetched MRI (data/mri) or a folder of pairs
  int64_t no_lms_size = 0;  // training crop side without LMS (voxels)
  int64_t lms_size = 0;     // training crop side with LMS
  int64_t filters = 8;      // the U-Net of the sweep
  int64_t levels = 3;
  int64_t steps = 100;  // training steps of each run
  double lr = 3e-3;     // Adam
  // Poly decay of lr over the steps (lms::Adam::decay_steps = steps, as
  // nnU-Net trains); false = a constant lr.
  bool lr_decay = true;
  uint64_t seed = 1;
  uint64_t capacity_bytes = 0;   // the device both runs train under
  uint64_t host_pool_bytes = 0;  // 0 = the device's default
  int threads = 0;
  std::string lms_file;               // the LMS run's config (TOML); empty = defaults
  std::vector<std::string> lms_sets;  // and overrides
  std::string out_dir;                // checkpoints and prediction PNGs; empty = a temporary folder
};

struct CaseStudyRun {
  bool lms = false;
  int64_t size = 0;  // crop side
  int64_t grid = 0;  // training (and inference) grid side
  double train_s = 0;
  double voxels_per_s = 0;
  uint64_t peak_device_bytes = 0;
  uint64_t bytes_swapped_per_step = 0;  // D2H
  float final_loss = 0;
  std::vector<double> dice;  // per class on the common grid
  double mean_dice = 0;      // foreground mean
  std::string checkpoint;
  std::string png;
};

struct CaseStudyResult {
  int64_t common_grid = 0;
  int64_t steps = 0;
  std::vector<std::string> class_names;
  CaseStudyRun low;   // without LMS
  CaseStudyRun high;  // with LMS
};

// Errors: InvalidArgument for sizes < 1, lms_size <= no_lms_size or steps <
// 1; the errors of unet3d train / eval / predict otherwise (a run that does
// not fit is ResourceExhausted naming the size). Progress goes to `log`.
absl::StatusOr<CaseStudyResult> run_case_study(const CaseStudyOptions& options, std::ostream& log);

// The table: class | Dice trained at no-LMS size | Dice trained at LMS
// size, the foreground means, the runs' time, peak and swap, and the goal
// line (LMS-resolution Dice >= no-LMS-resolution Dice).
std::string format_case_study(const CaseStudyResult& result);

nlohmann::json to_json(const CaseStudyResult& result);

}  // namespace lms::bench
