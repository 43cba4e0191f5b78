// Training data of examples/unet3d: an MRI volume and its class labels on a
// cube grid, and random batches from it with augmentation.
//
//   LMS_ASSIGN_OR_RETURN(BrainPair full, load_brain("data/mri", "ch2bet.nii.gz"));
//   LMS_ASSIGN_OR_RETURN(BrainPair grid, to_cube(full, 96));   // 96^3 voxels
//   std::vector<float> image, onehot;
//   LMS_RETURN_IF_ERROR(make_batch(grid, {.crop = 64, .batch = 2}, /*seed=*/1, /*step=*/0,
//                                  &image, &onehot));
//
// Shapes: a batch is NCDHW, image [batch, 1, crop, crop, crop] and one-hot
// labels [batch, classes, crop, crop, crop] (BatchOptions::classes, 13 for
// the brain task), with W along the volume's x (Right), H along y
// (Anterior), D along z (Superior), so voxel (x, y, z) of a crop is element
// ((z * crop) + y) * crop + x of its channel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "brain_task.h"
#include "lms/io/nifti.h"

namespace lms::unet3d {

// An image and its class labels (class ids stored as floats) on one grid.
struct BrainPair {
  io::Volume image;   // intensities, normalised: zero mean, unit variance over labelled voxels
  io::Volume labels;  // class ids 0..kBrainClasses-1 (brain_task.h)
};

// Reads `dir`/`image_file` and the AAL atlas `dir`/aal.nii.gz with its
// table aal.nii.txt (as scripts/fetch_data.sh places them), maps the atlas
// to classes (aal_classes) and normalises the image. The result is on the
// atlas grid (181x217x181 voxels of 1 mm). An image on another grid (other
// dims, spacing or affine) is resampled onto it in world space
// (io::resample_to_grid, trilinear; where the image does not reach, its
// minimum). ch2better.nii.gz is another acquisition of the same subject as
// ch2bet (Colin Holmes: ch2 is the 1 mm average of his scans, ch2bet its
// brain; ch2better the higher-resolution scan), 0.5 mm voxels over x
// -75..75, y -107..78, z -69.5..88 mm (a smaller field of view than the
// atlas's): it is moved onto the AAL's 1 mm grid this way.
// Errors: those of read_nifti and aal_classes (naming the files), those of
// resample_to_grid (naming both files; e.g. an image whose affine cannot be
// inverted), and InvalidArgument when no voxel is labelled.
absl::StatusOr<BrainPair> load_brain(const std::string& dir, const std::string& image_file);

// The pair resampled to side^3 isotropic voxels covering the volume's
// longest extent, centred (image trilinear, labels nearest); voxels beyond
// the volume along its shorter axes are background (the image's minimum,
// label 0). The image is normalised again on the new grid. InvalidArgument
// for side < 1.
absl::StatusOr<BrainPair> to_cube(const BrainPair& pair, int64_t side);

// The side of the cube grid (to_cube) that crops of side `size` are drawn
// from for a U-Net of `levels` levels: size + size/4 (so crops land at
// different places of the head), rounded up to a multiple of
// 2^(levels - 1), i.e. 2^(levels-1) * ceil(5 size / (4 * 2^(levels-1))).
// grid_side(32, 3) = 40, grid_side(48, 4) = 64, grid_side(16, 1) = 20.
// Returns 0 for size < 1, size > 2^40 or levels outside 1..32.
int64_t grid_side(int64_t size, int64_t levels);

// Normalises `image` in place to zero mean and unit variance over the
// voxels whose label is not 0 (all voxels when none is).
void normalise(io::Volume& image, const io::Volume& labels);

struct BatchOptions {
  int64_t crop = 64;  // cube side of each sample, <= the grid's smallest side
  int64_t batch = 1;  // samples
  bool flips = true;  // left-right mirror with probability 1/2, swapping L and R classes
  double intensity_jitter = 0.1;  // image * (1 + u) + v, u, v uniform in [-j, j]
  // Contrast: before the jitter, each intensity is mapped to t in [0, 1]
  // over the grid's range [lo, hi] and becomes lo + (hi - lo) t^gamma, gamma
  // log-uniform in [1 / (1 + max_gamma), 1 + max_gamma] (the gamma
  // augmentation of nnU-Net, Isensee et al., Nature Methods 2021). Another
  // scan of the same head differs from the training scan mostly in its grey /
  // white matter contrast, which this varies. 0: off.
  double max_gamma = 0;
  // A rotation about the superior (z) axis by an angle uniform in
  // [-max_rotation_deg, max_rotation_deg] and an isotropic scaling by a
  // factor uniform in [1 - max_scaling, 1 + max_scaling], both about the
  // crop's centre: the image is sampled trilinearly, the labels by nearest
  // voxel; what falls outside the grid is background (label 0, the image's
  // lowest value). 0 and 0: a plain crop.
  double max_rotation_deg = 0;
  double max_scaling = 0;
  int classes = kBrainClasses;  // one-hot channels; every label must be below
  bool swap_left_right = true;  // flips swap L and R classes (mirrored_class); false: keep labels
};

// One batch: random crop corners, flips and intensity jitter drawn from
// (seed, step) alone, so a step's batch is the same on every run and after a
// resume. InvalidArgument for a crop larger than the grid or < 1, batch < 1, classes < 1,
// a negative jitter, a max_gamma outside [0, 2], a rotation outside [0, 180] degrees, a scaling
// outside [0, 0.5], grids that differ, or a label outside the classes.
absl::Status make_batch(const BrainPair& pair, const BatchOptions& options, uint64_t seed,
                        int64_t step, std::vector<float>* image, std::vector<float>* onehot);

}  // namespace lms::unet3d
