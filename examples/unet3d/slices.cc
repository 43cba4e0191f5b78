#include "slices.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace lms::unet3d {
namespace {

bool is_cube(const io::Volume& v) {
  return v.dims[0] == v.dims[1] && v.dims[1] == v.dims[2] &&
         static_cast<int64_t>(v.voxels.size()) == v.voxel_count();
}

// Voxel of `view` (0 axial, 1 coronal, 2 sagittal) at picture column u and
// row r of a side x side panel (row 0 at the top).
size_t voxel_at(const io::Volume& v, int view, int64_t u, int64_t r) {
  const int64_t s = v.dims[0], mid = s / 2, up = s - 1 - r;
  switch (view) {
    case 0:
      return v.index(u, up, mid);
    case 1:
      return v.index(u, mid, up);
    default:
      return v.index(mid, u, up);
  }
}

}  // namespace

std::array<float, 3> class_colour(int c) {
  static constexpr std::array<std::array<float, 3>, 16> kPalette = {{
      {0.90f, 0.10f, 0.10f},
      {0.10f, 0.45f, 0.95f},
      {0.95f, 0.55f, 0.05f},
      {0.00f, 0.75f, 0.75f},
      {0.95f, 0.85f, 0.10f},
      {0.55f, 0.25f, 0.85f},
      {0.20f, 0.80f, 0.20f},
      {0.95f, 0.40f, 0.70f},
      {0.60f, 0.35f, 0.15f},
      {0.50f, 0.70f, 1.00f},
      {1.00f, 0.70f, 0.45f},
      {0.55f, 0.95f, 0.55f},
      {0.80f, 0.80f, 0.80f},
      {0.40f, 0.10f, 0.40f},
      {0.10f, 0.40f, 0.20f},
      {0.95f, 0.95f, 0.60f},
  }};
  return kPalette[static_cast<size_t>(std::max(c, 1) - 1) % kPalette.size()];
}

int slice_zoom(int64_t side) { return static_cast<int>(std::max<int64_t>(1, 160 / side)); }

float GreyScale::operator()(float v) const { return std::clamp((v - lo) / (hi - lo), 0.0f, 1.0f); }

GreyScale grey_scale(const io::Volume& image) {
  if (image.voxels.empty()) return {};
  std::vector<float> sorted = image.voxels;
  std::sort(sorted.begin(), sorted.end());
  auto at = [&](double q) {
    return sorted[static_cast<size_t>(q * static_cast<double>(sorted.size() - 1))];
  };
  GreyScale g{at(0.01), at(0.99)};
  if (!(g.hi > g.lo)) g = {sorted.front(), sorted.back()};
  if (!(g.hi > g.lo)) g = {g.lo, g.lo + 1};
  return g;
}

std::array<float, 3> overlay_pixel(float grey, int label) {
  if (label <= 0) return {grey, grey, grey};
  const std::array<float, 3> c = class_colour(label);
  return {(grey + c[0]) / 2, (grey + c[1]) / 2, (grey + c[2]) / 2};
}

absl::StatusOr<io::Image> orthogonal_slices(const io::Volume& image, const io::Volume& prediction,
                                            const io::Volume* reference) {
  if (!is_cube(image) || image.dims != prediction.dims || !is_cube(prediction) ||
      (reference != nullptr && (reference->dims != image.dims || !is_cube(*reference)))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "orthogonal_slices: image, prediction and reference must be cubes of one side (image ",
        image.dims[0], "x", image.dims[1], "x", image.dims[2], ", prediction ", prediction.dims[0],
        "x", prediction.dims[1], "x", prediction.dims[2], ")"));
  }
  const int64_t side = image.dims[0];
  const int zoom = slice_zoom(side);
  const int panel = static_cast<int>(side) * zoom;
  const int columns = reference == nullptr ? 2 : 3;
  io::Image out;
  out.width = columns * panel + (columns - 1) * kSliceGap;
  out.height = 3 * panel + 2 * kSliceGap;
  out.channels = 3;
  out.data.assign(static_cast<size_t>(out.width) * out.height * 3, 1.0f);
  const GreyScale grey = grey_scale(image);
  const io::Volume* labels[3] = {nullptr, &prediction, reference};
  for (int view = 0; view < 3; ++view) {
    for (int col = 0; col < columns; ++col) {
      for (int py = 0; py < panel; ++py) {
        for (int px = 0; px < panel; ++px) {
          const size_t v = voxel_at(image, view, px / zoom, py / zoom);
          const float g = grey(image.voxels[v]);
          const int label =
              labels[col] == nullptr ? 0 : static_cast<int>(std::lround(labels[col]->voxels[v]));
          const std::array<float, 3> rgb = overlay_pixel(g, label);
          const int x = col * (panel + kSliceGap) + px, y = view * (panel + kSliceGap) + py;
          std::copy(rgb.begin(), rgb.end(),
                    out.data.begin() + (static_cast<ptrdiff_t>(y) * out.width + x) * 3);
        }
      }
    }
  }
  return out;
}

}  // namespace lms::unet3d
