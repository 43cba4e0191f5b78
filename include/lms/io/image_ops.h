// Image operations (namespace lms::io, part of liblms) for super-resolution
// data preparation and evaluation, as VDSR (Kim et al., CVPR 2016) prepares
// its data in MATLAB: the Y channel of rgb2ycbcr, imresize-style bicubic
// degradation, patch crops and flips, and PSNR on Y with a border shaved off.
//
//   LMS_ASSIGN_OR_RETURN(Plane hr, rgb_to_y(photo));             // [16/255, 235/255]
//   LMS_ASSIGN_OR_RETURN(hr, modcrop(hr, 2));
//   LMS_ASSIGN_OR_RETURN(Plane lr, resize_bicubic(hr, hr.width / 2, hr.height / 2));
//   LMS_ASSIGN_OR_RETURN(Plane input, resize_bicubic(lr, hr.width, hr.height));
//   LMS_ASSIGN_OR_RETURN(double db, psnr(input, hr, /*border=*/2));
//
// Sizes and coordinates are in pixels. All functions validate their
// Plane/Image arguments and return InvalidArgument naming the bad value
// instead of crashing.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/io/image.h"

namespace lms::io {

// One channel, row-major: data[y * width + x]; values nominally in [0, 1].
struct Plane {
  int width = 0;
  int height = 0;
  std::vector<float> data;
};

// OK when width, height > 0 and data.size() == width * height.
absl::Status validate_plane(const Plane& plane);

// Luma of ITU-R BT.601 as MATLAB rgb2ycbcr computes it for [0, 1] input:
//   Y = 16/255 + (65.481 R + 128.553 G + 24.966 B) / 255, in [16/255, 235/255].
// A 1-channel image is treated as R = G = B (Y = 16/255 + 219/255 * gray).
absl::StatusOr<Plane> rgb_to_y(const Image& image);

// Full conversion (MATLAB rgb2ycbcr): channels Y, Cb, Cr with
//   Cb = 128/255 + (-37.797 R - 74.203 G + 112.000 B) / 255
//   Cr = 128/255 + (112.000 R - 93.786 G - 18.214 B) / 255.
// Needs a 3-channel image.
absl::StatusOr<Image> rgb_to_ycbcr(const Image& image);

// Exact inverse of rgb_to_ycbcr (the matrix is inverted in double), not
// clamped: callers clamp when writing (write_png does).
absl::StatusOr<Image> ycbcr_to_rgb(const Image& image);

// Channel `c` of `image` as a Plane, and the reverse: planes of equal size
// interleaved into a 1- or 3-channel Image.
absl::StatusOr<Plane> extract_channel(const Image& image, int c);
absl::StatusOr<Image> merge_planes(const std::vector<Plane>& planes);

// Bicubic resize as MATLAB imresize(..., 'bicubic') with an output size:
// Keys' cubic with a = -0.5, separable, scale = out/in per axis, and when
// downscaling (scale < 1) the kernel is stretched by 1/scale (antialiasing).
// Borders are mirrored (symmetric padding) and weights normalised to sum 1.
// Axes are resized most-shrinking first, as imresize orders them.
// Errors: InvalidArgument for an invalid plane or out_w/out_h <= 0.
absl::StatusOr<Plane> resize_bicubic(const Plane& in, int out_w, int out_h);

// The w x h window whose top-left pixel is (x, y); must lie inside `in`.
absl::StatusOr<Plane> crop(const Plane& in, int x, int y, int w, int h);

// Crops right/bottom so width and height are multiples of `scale` (>= 1),
// as VDSR's modcrop.m does before degrading.
absl::StatusOr<Plane> modcrop(const Plane& in, int scale);

// Mirror left-right / top-bottom.
absl::StatusOr<Plane> flip_horizontal(const Plane& in);
absl::StatusOr<Plane> flip_vertical(const Plane& in);

// Rotates by k * 90 degrees counter-clockwise (any integer k).
absl::StatusOr<Plane> rotate90(const Plane& in, int k);

// Rounds every value to the nearest of 256 levels in [0, 1] (clamped), as
// MATLAB's uint8 conversion does before VDSR's PSNR.
absl::StatusOr<Plane> quantize_8bit(const Plane& in);

// Peak signal-to-noise ratio in dB for pixel range [0, 1]:
// 10 log10(1 / MSE), MSE over the pixels at least `border` away from every
// edge. Identical inputs return +infinity (MSE == 0).
// Errors: InvalidArgument for invalid or differently sized planes, border < 0,
// or a border that leaves no pixel.
absl::StatusOr<double> psnr(const Plane& a, const Plane& b, int border);

}  // namespace lms::io
