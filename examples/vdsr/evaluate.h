// `vdsr eval`: PSNR of VDSR against bicubic interpolation on held-out photos,
// following Kim et al.'s evaluation (VDSR's Demo_SR.m): Y channel, modcrop to
// the scale, imresize bicubic down and back up, 8-bit quantisation, PSNR with
// a border of `scale` pixels shaved.
//
//   vdsr::EvalOptions opts;
//   opts.checkpoint = "vdsr.ckpt";
//   LMS_ASSIGN_OR_RETURN(vdsr::EvalResult r, vdsr::evaluate(opts, std::cout));
//
// Note [Eval crop]: each photo is degraded as a whole and then a centre
// window of eval_crop x eval_crop pixels (the whole image with eval_crop 0
// or when it is smaller) is run through a forward-only session, so memory is
// bounded by the crop rather than the photo. VDSR is fully convolutional;
// the window differs from a whole-image run only within `depth` pixels of
// its edge (zero padding), which the PSNR border only partly shaves, so the
// figures are slightly conservative.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli.h"

namespace lms::vdsr {

struct EvalRow {
  std::string name;
  int width = 0;  // evaluated window
  int height = 0;
  double psnr_bicubic_db = 0;
  double psnr_vdsr_db = 0;
};

struct EvalResult {
  std::vector<EvalRow> rows;  // in file-name order
  double mean_bicubic_db = 0;
  double mean_vdsr_db = 0;
};

// Reads the model from opts.checkpoint (depth and channels are taken from
// its tensors), evaluates every image of <run.data_dir>/eval, prints a table
// to `log` and, with opts.out, writes bicubic | VDSR | ground truth of the
// first image's window as one grey PNG.
// Errors: NotFound / DataLoss for a missing or corrupt checkpoint or one
// without VDSR weights; FailedPrecondition naming the tensor for one with
// non-finite values or a negative step (io::validate_checkpoint); NotFound when no eval image
// decodes; ResourceExhausted when a window does not fit --capacity (use --eval-crop); the write
// error of opts.out.
absl::StatusOr<EvalResult> evaluate(const EvalOptions& opts, std::ostream& log);

}  // namespace lms::vdsr
