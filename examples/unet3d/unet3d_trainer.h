// `unet3d train`: Isensee et al.'s 3-D U-Net (models::build_isensee_unet,
// one input channel) trained with Adam and the multi-class soft Dice loss on
// random crops of MRI volumes, optionally under Large Model Support.
//
//   unet3d::TrainOptions opts;   // or parse_command_line({"train", ...})
//   opts.steps = 50;
//   opts.run.lms_overrides = {"policy=auto"};
//   LMS_ASSIGN_OR_RETURN(unet3d::TrainResult r, unet3d::train(opts, std::cout));
//
// Steps are numbered 1..opts.steps. Step s trains on crops drawn from
// (seed, s) alone: which subject, the crop corner, flip, rotation, scaling
// and intensity jitter of each sample (make_batch in mri_data.h). A
// checkpoint written after step k holds every persistent tensor (weights,
// norm parameters, Adam moments and step counter), k, and the model and run
// settings, so `--resume` continues with step k + 1 and reproduces the
// uninterrupted run bit for bit.
//
// With opts.distributed.enabled the process is one rank of an mpirun job
// (Note [Data-parallel runs]): with at least as many training subjects as
// ranks, rank r trains on subjects r, r + ranks, ...; with fewer, every rank
// trains on all of them; either way each rank draws its own crops. Gradients
// are averaged over the ranks, rank 0 alone logs and writes the checkpoint
// and trace, and an error on any rank ends the job.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/io/checkpoint.h"
#include "lms/rewrite.h"
#include "unet3d_cli.h"

namespace lms::unet3d {

// The model a checkpoint describes (its meta "filters", "levels",
// "seg_levels", "classes", "size", "grid"; unet3d_lib writes them).
struct ModelSpec {
  int64_t filters = 0;
  int64_t levels = 0;
  int64_t segmentation_levels = 0;
  int classes = 0;
  int64_t size = 0;  // training crop side
  int64_t grid = 0;  // training grid side
};

// DataLoss naming the path and the key for a checkpoint whose meta lacks a
// field or holds one that is not a positive integer (not written by
// unet3d train).
absl::StatusOr<ModelSpec> model_spec(const io::Checkpoint& ck, const std::string& path);

struct TrainResult {
  int64_t first_step = 1;  // the first step this call ran (k + 1 after a resume)
  // losses[i] is the loss of step first_step + i (the mean over the ranks).
  std::vector<float> losses;
  // Final values of every persistent tensor, by name.
  std::map<std::string, std::vector<float>> persistent;
  ModelSpec model;                  // classes resolved from the data
  RewriteReport lms_report;         // enabled == false without LMS
  uint64_t peak_device_bytes = 0;   // max over steps
  uint64_t bytes_d2h_per_step = 0;  // of the last step
  uint64_t bytes_h2d_per_step = 0;
  // Training voxels (batch x size^3 x ranks) per second, over this call.
  double voxels_per_s = 0;
  double total_s = 0;
};

// Loads the training subjects of opts.run.data_dir (subjects.h), resamples
// them to the run's grid, builds the training graph, applies lms::rewrite
// when opts.run.lms_active(), runs the steps and writes the checkpoint and
// trace. Progress lines and the final summary go to `log`.
// Errors: InvalidArgument for bad options or LMS config; those of
// load_subjects (naming the file); the errno-derived code naming the path for
// an unwritable --checkpoint or --trace (checked before the first step);
// NotFound for a missing checkpoint to resume; FailedPrecondition when it was
// written with different settings or is already at opts.steps;
// ResourceExhausted when a step does not fit the device (the message
// suggests LMS or a smaller --size); Internal for a non-finite loss;
// DataLoss for a corrupt checkpoint.
// With opts.distributed.enabled: FailedPrecondition when not started by
// mpirun, or when the ranks' settings or LMS configs differ (naming the
// ranks; Session::create likewise for their graphs and plans). In a job of
// several ranks an error does not return: it is printed as "rank R: error:
// ..." and ends the job on every rank (examples::Ranks::fail).
absl::StatusOr<TrainResult> train(const TrainOptions& opts, std::ostream& log);

}  // namespace lms::unet3d
