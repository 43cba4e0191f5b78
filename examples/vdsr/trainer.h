// `vdsr train`: VDSR (Kim et al., CVPR 2016) trained with Adam on x2 bicubic
// patches of the Y channel, optionally under Large Model Support.
//
//   vdsr::TrainOptions opts;          // or parse_command_line({"train", ...})
//   opts.steps = 100;
//   opts.lms_overrides = {"policy=auto"};
//   LMS_ASSIGN_OR_RETURN(vdsr::TrainResult r, vdsr::train(opts, std::cout));
//
// Steps are numbered 1..opts.steps; step s trains on Dataset::batch(s - 1)
// (Note [Batch determinism]). A checkpoint written after step k
// holds every persistent tensor (weights, biases, Adam moments and step
// counter) and k, so `--resume` continues with step k + 1 and reproduces the
// uninterrupted run bit for bit.
//
// With opts.distributed.enabled the process is one rank of an mpirun job
// (Note [Data-parallel runs]): it trains on images rank, rank + ranks, ...
// with its own batches, gradients are averaged over the ranks, rank 0 alone
// logs and writes the checkpoint and trace, and an error on any rank ends
// the job.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli.h"
#include "lms/rewrite.h"

namespace lms::vdsr {

struct TrainResult {
  int64_t first_step = 1;  // the first step this call ran (k + 1 after a resume)
  // losses[i] is the loss of step first_step + i (the mean over the ranks).
  std::vector<float> losses;
  // Final values of every persistent tensor, by name.
  std::map<std::string, std::vector<float>> persistent;
  RewriteReport lms_report;         // enabled == false without LMS
  uint64_t peak_device_bytes = 0;   // max over steps (this rank's)
  uint64_t bytes_d2h_per_step = 0;  // of the last step
  uint64_t bytes_h2d_per_step = 0;
  double images_per_s = 0;  // over all steps of this call and all ranks
  double total_s = 0;
};

// Loads <run.data_dir>/train, builds the training graph, applies lms::rewrite
// when opts.lms_active(), runs the steps and writes the checkpoint and trace.
// Progress lines and the final summary go to `log`.
// Before loading data or running a step it checks the host buffers the
// options size (check_host_memory in cli.h) and that the checkpoint and trace
// locations are writable (io::check_writable: parent folders are created,
// a probe file is created and removed).
// Errors: InvalidArgument for bad options, LMS config, host buffers larger
// than the machine or a crop larger than every image; the errno-derived code
// naming the path for an unwritable --checkpoint or --trace; NotFound for a
// missing data folder or checkpoint to resume, or a folder without a
// decodable image (the message gives each file's reason); FailedPrecondition
// when the checkpoint to resume was written with different model or data
// settings, is already at or past opts.steps, or holds non-finite values or
// a negative step; ResourceExhausted when a step does not fit the device
// (the message suggests LMS or a smaller batch); DataLoss for a corrupt
// checkpoint.
// With opts.distributed.enabled: FailedPrecondition when not started by
// mpirun, or when the ranks' settings or LMS configs differ (naming the
// ranks; Session::create likewise for their graphs and plans);
// InvalidArgument when the folder has fewer images than ranks. In a job of
// several ranks an error does not return: it is printed as "rank R: error:
// ..." and ends the job on every rank (examples::Ranks::fail).
absl::StatusOr<TrainResult> train(const TrainOptions& opts, std::ostream& log);

}  // namespace lms::vdsr
