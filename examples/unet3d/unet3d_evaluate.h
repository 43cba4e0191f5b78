// `unet3d eval` and `unet3d predict`: the trained network segments whole
// volumes resampled to a cube grid, by a forward-only session with the
// checkpoint's parameters; the predicted class of a voxel is the arg max of
// its softmax probabilities (the lower class on a tie).
//
//   unet3d::EvalOptions opts;
//   opts.checkpoint = "unet3d.ckpt";
//   LMS_ASSIGN_OR_RETURN(unet3d::EvalResult r, unet3d::evaluate(opts, std::cout));
//
// Note [Evaluation grids]: a model trained at grid G segments the volume on
// G^3 voxels (its resolution). Dice is measured on the score grid: the
// prediction is resampled there by nearest neighbour and compared with the
// reference labels resampled to that grid from the source volume. Comparing
// a low- and a high-resolution model on the high-resolution grid is the
// case study's protocol (the low-resolution prediction is resampled up).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/device.h"
#include "lms/io/checkpoint.h"
#include "lms/io/nifti.h"
#include "unet3d_cli.h"
#include "unet3d_trainer.h"

namespace lms::unet3d {

// The class of every voxel of `image` (a cube of side s, s a multiple of
// 2^(levels-1)): NCDHW input [1, 1, s, s, s]; the result is a label volume on
// image's grid. `lms` (may be null) rewrites the forward graph for `device`.
// Errors: InvalidArgument for a side the model cannot take; those of the
// session (ResourceExhausted naming the side when the forward pass does not
// fit: use LMS or a larger --capacity); DataLoss for a checkpoint without the
// model's tensors.
absl::StatusOr<io::Volume> segment(const io::Volume& image, const ModelSpec& model,
                                   const io::Checkpoint& ck, Device& device, const LmsConfig* lms);

struct SubjectScore {
  std::string name;
  std::vector<double> dice;  // per class, background first
  double mean_dice = 0;      // over the foreground classes (1..classes-1)
};

struct EvalResult {
  ModelSpec model;
  int64_t grid = 0;        // inference grid side
  int64_t score_grid = 0;  // where Dice was measured (Note [Evaluation grids])
  std::vector<std::string> class_names;
  std::vector<SubjectScore> subjects;
  std::vector<double> dice;  // per class, the mean over subjects
  double mean_dice = 0;      // foreground mean over subjects
};

// Dice per class of the model of opts.checkpoint on the evaluation subjects
// of opts.run.data_dir (subjects.h), inferred on opts.grid (0: the model's
// training grid) and scored on `score_grid` (0: the inference grid); prints
// a table to `log`. Errors: those of the checkpoint (NotFound, DataLoss,
// FailedPrecondition), of load_subjects, of segment; InvalidArgument for a
// grid that is not a multiple of 2^(levels-1) or data whose class count
// differs from the model's.
absl::StatusOr<EvalResult> evaluate(const EvalOptions& opts, std::ostream& log,
                                    int64_t score_grid = 0);

struct PredictResult {
  std::string nifti_path;     // <out>.nii.gz: labels on the input image's grid
  std::string png_path;       // <out>.png (slices.h)
  io::Volume image_cube;      // the normalised input on the inference grid
  io::Volume prediction;      // labels on the inference grid
  io::Volume reference_cube;  // reference labels on the inference grid; empty without one
  std::vector<double> dice;   // per class against the reference; empty without one
};

// Segments opts.image (or the first evaluation subject of opts.run.data_dir
// with its reference labels) and writes the label map and the PNG. Without
// a reference, the image is normalised over its non-zero voxels (training
// normalises over the labelled brain). Errors: those of read_nifti (naming
// the file), of the checkpoint and of segment; InvalidArgument when the
// reference's grid differs from the image's; the write errors of the outputs.
absl::StatusOr<PredictResult> predict(const PredictOptions& opts, std::ostream& log);

}  // namespace lms::unet3d
