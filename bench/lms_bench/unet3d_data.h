// Real 3-D U-Net training volumes for lms-bench: the ch2bet T1 image with the
// AAL atlas mapped to kMriClasses classes, through examples/unet3d
// (mri_data.h: load_brain, to_cube, make_batch). A crop of side S is drawn
// from the pair resampled to a cube grid of side unet3d::grid_side(S,
// levels) (S + S/4 rounded up to a multiple of 2^(levels-1)); the batch of a
// step depends only on (seed, step, S).
//
//   LMS_ASSIGN_OR_RETURN(auto source, lms::bench::load_mri_volumes("data/mri", 1, 3));
//   LMS_ASSIGN_OR_RETURN(auto factory, lms::bench::unet_factory(model, source));
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model_factory.h"

namespace lms::bench {

// The image file load_mri_volumes reads from the folder.
inline constexpr char kMriImageFile[] = "ch2bet.nii.gz";

// Loads <dir>/ch2bet.nii.gz and <dir>/aal.nii.gz with aal.nii.txt
// (scripts/fetch_data.sh). The source fills image [1, 1, S, S, S] and one-hot
// labels [1, kMriClasses, S, S, S] for crop side S: batch 1, left-right
// flips, intensity jitter 0.1, rotations up to 10 degrees about z and
// scalings up to 10%. Each cube grid is computed once per S and kept.
// Errors: those of load_brain (NotFound naming the file when it is missing);
// InvalidArgument for levels outside 1..32; Unimplemented when lms-bench was
// built without examples/unet3d (LMS_BUILD_EXAMPLES=OFF). The source returns
// InvalidArgument for S < 1.
absl::StatusOr<Unet3dBatchSource> load_mri_volumes(const std::string& dir, uint64_t seed,
                                                   int64_t levels);

// unet3d::grid_side(size, levels): the cube grid side crops of side `size`
// come from; 0 when lms-bench was built without examples/unet3d.
int64_t unet_grid_side(int64_t size, int64_t levels);

}  // namespace lms::bench
