// Resampling a volume to other dims and spacing, or onto another volume's
// grid through both affines (lms/io/nifti.h); reading and writing NIfTI
// files is in nifti.cc.
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "io/volume_checks.h"
#include "lms/checked.h"
#include "lms/io/host_memory.h"
#include "lms/io/nifti.h"
#include "lms/status.h"

namespace lms::io {
namespace {

// Output index o samples input coordinate scale * o + offset (voxel units).
struct AxisSampling {
  double scale = 1;
  double offset = 0;
};

AxisSampling axis_sampling(int64_t n_in, double sp_in, int64_t n_out, double sp_out) {
  const double ratio = sp_out / sp_in;
  // Centres aligned: (o + 0.5 - n_out / 2) * sp_out = (x + 0.5 - n_in / 2) * sp_in.
  return {ratio,
          (0.5 - static_cast<double>(n_out) / 2) * ratio + static_cast<double>(n_in) / 2 - 0.5};
}

// For each output index: the two input indices around it and the weight of
// the second (0 for nearest).
struct Taps {
  std::vector<int64_t> lo, hi;
  std::vector<float> w;
};

Taps axis_taps(int64_t n_in, int64_t n_out, AxisSampling s, Interpolation interp) {
  Taps t;
  t.lo.resize(n_out), t.hi.resize(n_out), t.w.resize(n_out);
  for (int64_t o = 0; o < n_out; ++o) {
    const double x =
        std::clamp(s.scale * static_cast<double>(o) + s.offset, 0.0, static_cast<double>(n_in - 1));
    if (interp == Interpolation::kNearest) {
      t.lo[o] = t.hi[o] = std::llround(x);
      t.w[o] = 0;
    } else {
      t.lo[o] = static_cast<int64_t>(std::floor(x));
      t.hi[o] = std::min(t.lo[o] + 1, n_in - 1);
      t.w[o] = static_cast<float>(x - static_cast<double>(t.lo[o]));
    }
  }
  return t;
}

float lerp(float a, float b, float w) { return w == 0 ? a : (1 - w) * a + w * b; }

}  // namespace

absl::StatusOr<Volume> resample(const Volume& volume, const std::array<int64_t, 3>& dims,
                                const std::array<double, 3>& spacing_mm,
                                Interpolation interpolation) {
  LMS_RETURN_IF_ERROR(check_volume(volume, "resample: input"));
  const std::optional<uint64_t> count = checked_product({dims[0], dims[1], dims[2]});
  if (!count || *count > static_cast<uint64_t>(kMaxNiftiVoxels)) {
    return absl::InvalidArgumentError(absl::StrCat("resample: target dims ", dims_text(dims),
                                                   " exceed ", kMaxNiftiVoxels, " voxels"));
  }
  Volume out;
  out.dims = dims;
  out.spacing_mm = spacing_mm;
  out.voxels.resize(*count);
  LMS_RETURN_IF_ERROR(check_volume(out, "resample: target grid"));
  std::array<Taps, 3> taps;
  std::array<AxisSampling, 3> s;
  for (int a = 0; a < 3; ++a) {
    s[a] = axis_sampling(volume.dims[a], volume.spacing_mm[a], dims[a], spacing_mm[a]);
    taps[a] = axis_taps(volume.dims[a], dims[a], s[a], interpolation);
  }
  size_t dst = 0;
  for (int64_t z = 0; z < dims[2]; ++z) {
    for (int64_t y = 0; y < dims[1]; ++y) {
      for (int64_t x = 0; x < dims[0]; ++x) {
        auto v = [&](int64_t i, int64_t j, int64_t k) { return volume.at(i, j, k); };
        const int64_t x0 = taps[0].lo[x], x1 = taps[0].hi[x], y0 = taps[1].lo[y],
                      y1 = taps[1].hi[y], z0 = taps[2].lo[z], z1 = taps[2].hi[z];
        const float wx = taps[0].w[x], wy = taps[1].w[y], wz = taps[2].w[z];
        const float c0 = lerp(lerp(v(x0, y0, z0), v(x1, y0, z0), wx),
                              lerp(v(x0, y1, z0), v(x1, y1, z0), wx), wy);
        const float c1 = lerp(lerp(v(x0, y0, z1), v(x1, y0, z1), wx),
                              lerp(v(x0, y1, z1), v(x1, y1, z1), wx), wy);
        out.voxels[dst++] = lerp(c0, c1, wz);
      }
    }
  }
  if (volume.affine) {
    std::array<double, 12> a = *volume.affine, b = a;
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) {
        b[r * 4 + c] = a[r * 4 + c] * s[c].scale;
        b[r * 4 + 3] += a[r * 4 + c] * s[c].offset;
      }
    }
    out.affine = b;
  }
  return out;
}

namespace {

// `v`'s voxel-to-world affine as a row-major 3x4 [R | t]; diag(spacing_mm)
// at the origin when unset.
std::array<double, 12> affine_or_default(const Volume& v) {
  if (v.affine) return *v.affine;
  return {v.spacing_mm[0], 0, 0, 0, 0, v.spacing_mm[1], 0, 0, 0, 0, v.spacing_mm[2], 0};
}

// The inverse of the 3x4 affine `a` (world to voxel), or InvalidArgument
// naming `what` for a non-finite or singular one.
absl::StatusOr<std::array<double, 12>> invert_affine(const std::array<double, 12>& a,
                                                     const std::string& what) {
  if (!std::all_of(a.begin(), a.end(), [](double x) { return std::isfinite(x); })) {
    return absl::InvalidArgumentError(
        absl::StrCat("resample_to_grid: ", what, "'s affine is not finite"));
  }
  auto r = [&](int i, int j) { return a[i * 4 + j]; };
  // Cofactors of R; det = row 0 . cofactors of row 0.
  const double c[3][3] = {
      {r(1, 1) * r(2, 2) - r(1, 2) * r(2, 1), r(1, 2) * r(2, 0) - r(1, 0) * r(2, 2),
       r(1, 0) * r(2, 1) - r(1, 1) * r(2, 0)},
      {r(0, 2) * r(2, 1) - r(0, 1) * r(2, 2), r(0, 0) * r(2, 2) - r(0, 2) * r(2, 0),
       r(0, 1) * r(2, 0) - r(0, 0) * r(2, 1)},
      {r(0, 1) * r(1, 2) - r(0, 2) * r(1, 1), r(0, 2) * r(1, 0) - r(0, 0) * r(1, 2),
       r(0, 0) * r(1, 1) - r(0, 1) * r(1, 0)}};
  const double det = r(0, 0) * c[0][0] + r(0, 1) * c[0][1] + r(0, 2) * c[0][2];
  double scale = 1;  // product of the column norms: |det| <= scale
  for (int j = 0; j < 3; ++j) scale *= std::hypot(r(0, j), r(1, j), r(2, j));
  if (!(std::fabs(det) > 1e-12 * scale)) {
    return absl::InvalidArgumentError(absl::StrCat("resample_to_grid: ", what,
                                                   "'s affine is singular (determinant ", det,
                                                   "); it cannot map world to voxels"));
  }
  std::array<double, 12> inv{};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) inv[i * 4 + j] = c[j][i] / det;  // adjugate / det
  }
  for (int i = 0; i < 3; ++i) {
    inv[i * 4 + 3] = -(inv[i * 4] * r(0, 3) + inv[i * 4 + 1] * r(1, 3) + inv[i * 4 + 2] * r(2, 3));
  }
  return inv;
}

// A grid for resample_to_grid: valid dims and spacing, at most
// kMaxNiftiVoxels voxels, and no voxels or exactly dims' worth.
absl::Status check_grid(const Volume& grid) {
  const std::string what = "resample_to_grid: grid";
  LMS_RETURN_IF_ERROR(check_geometry(grid, what));
  const std::optional<uint64_t> count = checked_product({grid.dims[0], grid.dims[1], grid.dims[2]});
  if (!count || *count > static_cast<uint64_t>(kMaxNiftiVoxels)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": dims ", dims_text(grid.dims),
                                                   " exceed ", kMaxNiftiVoxels, " voxels"));
  }
  return grid.voxels.empty() ? absl::OkStatus() : check_volume(grid, what);
}

}  // namespace

float sample_at(const Volume& volume, double x, double y, double z, Interpolation interpolation,
                float outside) {
  const auto& d = volume.dims;
  const double p[3] = {x, y, z};
  int64_t lo[3];
  double f[3];
  for (int a = 0; a < 3; ++a) {
    const double last = static_cast<double>(d[a] - 1);
    if (!(p[a] >= -0.5 && p[a] <= last + 0.5)) return outside;  // NaN too
    if (interpolation == Interpolation::kNearest) {
      lo[a] = std::clamp<int64_t>(static_cast<int64_t>(std::floor(p[a] + 0.5)), 0, d[a] - 1);
      f[a] = 0;
    } else {
      const double q = std::clamp(p[a], 0.0, last);
      lo[a] = std::min<int64_t>(static_cast<int64_t>(std::floor(q)), d[a] - 1);
      f[a] = q - static_cast<double>(lo[a]);
    }
  }
  double sum = 0;
  for (int corner = 0; corner < 8; ++corner) {
    double w = 1;
    int64_t at[3];
    for (int a = 0; a < 3; ++a) {
      const bool up = (corner >> a) & 1;
      at[a] = std::min<int64_t>(lo[a] + (up ? 1 : 0), d[a] - 1);
      w *= up ? f[a] : 1 - f[a];
    }
    if (w != 0) sum += w * volume.at(at[0], at[1], at[2]);
  }
  return static_cast<float>(sum);
}

absl::StatusOr<Volume> resample_to_grid(const Volume& volume, const Volume& grid,
                                        Interpolation interpolation, float outside) {
  LMS_RETURN_IF_ERROR(check_volume(volume, "resample_to_grid: volume"));
  LMS_RETURN_IF_ERROR(check_grid(grid));
  const std::array<double, 12> g = affine_or_default(grid);
  using Affine = std::array<double, 12>;
  LMS_ASSIGN_OR_RETURN(const Affine inv, invert_affine(affine_or_default(volume), "volume"));
  LMS_RETURN_IF_ERROR(invert_affine(g, "grid").status());
  // m = inv * g: grid voxel (i, j, k) to volume voxel coordinates.
  std::array<double, 12> m{};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      double sum = j == 3 ? inv[i * 4 + 3] : 0.0;
      for (int k = 0; k < 3; ++k) sum += inv[i * 4 + k] * g[k * 4 + j];
      m[i * 4 + j] = sum;
    }
  }
  Volume out;
  out.dims = grid.dims;
  out.spacing_mm = grid.spacing_mm;
  out.affine = grid.affine;
  out.voxels.resize(static_cast<size_t>(grid.voxel_count()));
  constexpr double kSnap = 1e-6;  // voxels: closer to a voxel centre counts as on it
  size_t dst = 0;
  for (int64_t z = 0; z < grid.dims[2]; ++z) {
    for (int64_t y = 0; y < grid.dims[1]; ++y) {
      for (int64_t x = 0; x < grid.dims[0]; ++x) {
        double p[3];
        for (int a = 0; a < 3; ++a) {
          p[a] = m[a * 4] * static_cast<double>(x) + m[a * 4 + 1] * static_cast<double>(y) +
                 m[a * 4 + 2] * static_cast<double>(z) + m[a * 4 + 3];
          const double nearest = std::nearbyint(p[a]);
          if (std::fabs(p[a] - nearest) < kSnap) p[a] = nearest;
        }
        out.voxels[dst++] = sample_at(volume, p[0], p[1], p[2], interpolation, outside);
      }
    }
  }
  return out;
}

absl::Status check_same_grid(const Volume& image, const Volume& labels,
                             const std::string& image_path, const std::string& labels_path) {
  if (image.dims != labels.dims) {
    return absl::InvalidArgumentError(absl::StrCat(
        image_path, " and ", labels_path, " differ in dims: ", dims_text(image.dims), " vs ",
        dims_text(labels.dims), "; the label map must be on the image's grid"));
  }
  for (int i = 0; i < 3; ++i) {
    const double a = image.spacing_mm[i], b = labels.spacing_mm[i];
    if (!(std::fabs(a - b) <= 1e-4 * std::max(std::fabs(a), std::fabs(b)))) {
      return absl::InvalidArgumentError(absl::StrCat(
          image_path, " and ", labels_path,
          " differ in spacing_mm: ", spacing_text(image.spacing_mm), " vs ",
          spacing_text(labels.spacing_mm), "; the label map must be on the image's grid"));
    }
  }
  // Same dims and spacing can still be another grid: shifted, or rotated
  // (oblique). An unset affine is diag(spacing_mm) at the origin.
  auto affine = [](const Volume& v) {
    return v.affine.value_or(std::array<double, 12>{v.spacing_mm[0], 0, 0, 0, 0, v.spacing_mm[1], 0,
                                                    0, 0, 0, v.spacing_mm[2], 0});
  };
  const std::array<double, 12> a = affine(image), b = affine(labels);
  for (int i = 0; i < 12; ++i) {
    // Float header rounding is tolerated: 1e-4 relative, at least 1e-4 mm.
    const double tolerance = 1e-4 * std::max({1.0, std::fabs(a[i]), std::fabs(b[i])});
    if (!(std::fabs(a[i] - b[i]) <= tolerance)) {
      auto text = [](const std::array<double, 12>& m) {
        return absl::StrCat("[", absl::StrJoin(m, ", "), "]");
      };
      return absl::InvalidArgumentError(absl::StrCat(
          image_path, " and ", labels_path, " differ in the voxel-to-world affine (",
          i % 4 == 3 ? "origin" : "axes", ", row ", i / 4, " column ", i % 4, "): ", text(a),
          " vs ", text(b), "; the label map must be on the image's grid"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lms::io
