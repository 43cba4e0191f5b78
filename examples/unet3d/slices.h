// The picture `unet3d predict` writes: three orthogonal slices through the
// centre of a cube volume (rows: axial, coronal, sagittal), each shown as
// image | prediction | reference (the reference column only when there is
// one). Prediction and reference panels are the grey image with each
// non-background voxel blended half and half with its class colour.
//
//   LMS_ASSIGN_OR_RETURN(io::Image png, orthogonal_slices(image, pred, &reference));
//   LMS_RETURN_IF_ERROR(io::write_png(png, "pred.png"));
//
// Orientation (RAS volumes, brain_task.h): axial slices (z = side/2) have
// right to the image's right and anterior up; coronal slices (y = side/2)
// right to the right and superior up; sagittal slices (x = side/2) anterior
// to the right and superior up. Each voxel is drawn as zoom x zoom pixels.
#pragma once

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "lms/io/image.h"
#include "lms/io/nifti.h"

namespace lms::unet3d {

inline constexpr int kSliceGap = 4;  // white pixels between panels

// The colour of class c >= 1, RGB in [0, 1] (a fixed palette of 16 colours,
// repeated for higher classes). Class 0 (background) has no colour.
std::array<float, 3> class_colour(int c);

// Pixels per voxel for a cube of `side` voxels: max(1, 160 / side).
int slice_zoom(int64_t side);

// The grey level of an image value: (v - lo) / (hi - lo) clamped to [0, 1],
// lo and hi the volume's 1st and 99th percentiles (the minimum and maximum
// when those are equal).
struct GreyScale {
  float lo = 0, hi = 1;
  float operator()(float v) const;
};
GreyScale grey_scale(const io::Volume& image);

// A blended overlay pixel: grey where label <= 0, else (grey + colour) / 2.
std::array<float, 3> overlay_pixel(float grey, int label);

// The RGB picture: width = columns * side * zoom + (columns - 1) * kSliceGap,
// height = 3 * side * zoom + 2 * kSliceGap, with columns 3 (2 without a
// reference). InvalidArgument when the volumes are not cubes of one side or
// `reference` (when not null) differs in size.
absl::StatusOr<io::Image> orthogonal_slices(const io::Volume& image, const io::Volume& prediction,
                                            const io::Volume* reference);

}  // namespace lms::unet3d
