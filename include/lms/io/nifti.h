// NIfTI-1 volumes (namespace lms::io, part of liblms): reading .nii / .nii.gz
// into float volumes in RAS order, atomic writing, resampling to a training
// grid or (in world space) onto another volume's grid, and a same-grid check
// for image / label pairs. Lengths are in mm.
//
//   LMS_ASSIGN_OR_RETURN(lms::io::Volume t1, lms::io::read_nifti("sub01/t1.nii.gz"));
//   LMS_ASSIGN_OR_RETURN(lms::io::Volume seg, lms::io::read_nifti("sub01/seg.nii.gz"));
//   LMS_RETURN_IF_ERROR(lms::io::check_same_grid(t1, seg, "sub01/t1.nii.gz", "sub01/seg.nii.gz"));
//   LMS_ASSIGN_OR_RETURN(lms::io::Volume small, lms::io::resample(t1, {64, 64, 64}, {3, 3, 3},
//                                                   lms::io::Interpolation::kTrilinear));
//   // small.at(x, y, z): x increases to the Right, y to Anterior, z to Superior.
//   LMS_RETURN_IF_ERROR(lms::io::write_nifti("out/pred.nii.gz", small,
//   lms::io::NiftiType::kFloat32));
//
// Files are read and written with niftilib (libniftiio, gzip through znzlib);
// its complaints go to stderr, and every failure comes back as an
// absl::Status whose message names the file. Nothing aborts on a bad file.
//
// Note [RAS orientation]: read_nifti reorders the stored axes so that output
// axis 0 increases to the patient's Right, axis 1 to Anterior and axis 2 to
// Superior. The voxel-to-world matrix is the sform when sform_code > 0, else
// the qform when qform_code > 0; the axis each stored axis runs closest to
// (nifti_mat44_to_orientation) decides the permutation and the flips. A file
// with neither (an ANALYZE-style header) is assumed to be stored RAS already
// and is not reordered. Only whole axes are permuted and flipped: an oblique
// acquisition stays oblique, and Volume::affine keeps the exact mapping.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lms::io {

// A scalar 3-D volume. voxels[x + dims[0] * (y + dims[1] * z)]: x fastest,
// then y, then z. After read_nifti the axes are RAS (Note [RAS orientation]).
struct Volume {
  std::array<int64_t, 3> dims{};       // voxels along x, y, z; each >= 1
  std::array<double, 3> spacing_mm{};  // voxel size along x, y, z, in mm, > 0
  std::vector<float> voxels;           // dims[0] * dims[1] * dims[2] values
  // Voxel (i, j, k) to world (mm): row-major 3x4 [R | t], world = R * (i, j, k) + t.
  // read_nifti sets it (diag(spacing) at the origin for a file without
  // sform and qform); unset, write_nifti writes diag(spacing_mm).
  std::optional<std::array<double, 12>> affine;

  int64_t voxel_count() const { return dims[0] * dims[1] * dims[2]; }
  size_t index(int64_t x, int64_t y, int64_t z) const {
    return static_cast<size_t>(x + dims[0] * (y + dims[1] * z));
  }
  float at(int64_t x, int64_t y, int64_t z) const { return voxels[index(x, y, z)]; }
};

// The on-disk voxel types read_nifti accepts and write_nifti writes (the
// NIfTI DT_* code of each is its value).
enum class NiftiType : int {
  kUint8 = 2,
  kInt16 = 4,
  kInt32 = 8,
  kFloat32 = 16,
  kFloat64 = 64,
  kInt8 = 256,
  kUint16 = 512,
  kUint32 = 768,
};

// "uint8", "int16", ... for a supported type.
const char* nifti_type_name(NiftiType type);

// Largest volume read_nifti accepts, in voxels (also bounded by the host
// memory, lms/io/host_memory.h).
inline constexpr int64_t kMaxNiftiVoxels = int64_t{1} << 31;

struct NiftiReadOptions {
  int64_t max_voxels = kMaxNiftiVoxels;
  // Reorder to RAS (Note [RAS orientation]); false keeps the stored order.
  bool reorient_to_ras = true;
};

// Reads a NIfTI-1 .nii or .nii.gz (single file) into a float volume in RAS
// order. Stored values v become scl_slope * v + scl_inter (no scaling when
// scl_slope is 0, as the NIfTI-1 standard says). A 4-D or 5-D file whose
// extra dimensions are all 1 is read as 3-D.
// Errors (every message names `path`): NotFound / PermissionDenied when the
// file cannot be opened; DataLoss for a file that is not NIfTI-1 (a NIfTI-2
// file, whose header is 540 bytes, included), a corrupt gzip stream or data
// shorter than the header says; InvalidArgument for a .hdr/.img pair or an
// ANALYZE 7.5 file (only single-file images, magic "n+1", are read, also
// when named .nii.gz), a vox_offset below 352 or not a whole number, a
// non-finite entry of the sform or qform in use,
// fewer than 3 dimensions (dim[0] < 3), an extra dimension > 1 ("dim[4] = 3"),
// a dimension < 1,
// a datatype other than NiftiType (names the type and lists those allowed),
// a non-finite scl_slope / scl_inter, a NaN or Inf voxel after scaling (names
// the first one's stored (i, j, k)), more than options.max_voxels voxels or
// more bytes than the host memory limit.
absl::StatusOr<Volume> read_nifti(const std::string& path, const NiftiReadOptions& options = {});

// Writes `volume` to `path` as a single-file NIfTI-1, gzip-compressed when
// the name ends in ".gz", as `type`, with scl_slope 0 (values stored as is),
// sform and qform both set from volume.affine (code 1, scanner anatomical).
// Integer types store each value rounded to the nearest integer.
// Atomic (Note [Atomic write]): niftilib writes a temporary file in the same
// folder, which is read back, fsync'd and renamed. The temporary name is
// "<path>.tmp.<pid>.XXXXXX.nii[.gz]" (niftilib picks gzip by the suffix);
// remove_stale_temp_files does not know that form, so a writer killed
// mid-write leaves it behind.
// Errors: InvalidArgument when dims / spacing / voxels are inconsistent, or a
// value is NaN, Inf or outside `type`'s range (names the first voxel and the
// range), or `path` does not end in .nii or .nii.gz; the errno-derived code
// naming the path when the folder cannot be written; DataLoss when the file
// niftilib wrote does not read back.
absl::Status write_nifti(const std::string& path, const Volume& volume, NiftiType type);

// write_nifti for a label map: as uint8 when every label fits 0..255, else as
// int16. Errors: those of write_nifti (a label outside int16, or not a whole
// number, is InvalidArgument).
absl::Status write_nifti_labels(const std::string& path, const Volume& labels);

enum class Interpolation {
  kTrilinear,  // images
  kNearest,    // label maps: every output value is an input value
};

// Resamples `volume` onto a grid of `dims` voxels of `spacing_mm` whose centre
// is the centre of the input grid (output voxel centres at (o + 0.5 -
// dims / 2) * spacing_mm from it, per axis). Sample positions outside the
// input's voxel centres take the nearest edge value. affine, when set, is
// moved to the new grid. Equal dims and spacing return the same voxels.
// Errors: InvalidArgument for a dimension < 1, a spacing that is not finite
// and > 0, more than kMaxNiftiVoxels voxels, or an inconsistent `volume`.
absl::StatusOr<Volume> resample(const Volume& volume, const std::array<int64_t, 3>& dims,
                                const std::array<double, 3>& spacing_mm,
                                Interpolation interpolation);

// Samples `volume` at the world position (mm) of every voxel centre of
// `grid`: grid's voxel-to-world affine, then the inverse of volume's (an
// unset affine is diag(spacing_mm) at the origin, as read_nifti assumes), so
// two acquisitions with different fields of view, voxel sizes or axis
// orders line up where they overlap. The result has grid's dims,
// spacing_mm and affine; grid's voxels are not read (they may be empty).
// Trilinear or nearest voxel as asked; a position within 1e-6 voxel of a
// voxel centre takes that voxel exactly (identical grids return identical
// voxels). A position more than half a voxel outside `volume` along any axis
// takes `outside`; up to half a voxel outside, the edge voxel.
// Errors: InvalidArgument naming "volume" or "grid" for inconsistent dims /
// spacing / voxels, more than kMaxNiftiVoxels voxels in grid, or an affine
// that is not finite or is singular (determinant ~0).
absl::StatusOr<Volume> resample_to_grid(const Volume& volume, const Volume& grid,
                                        Interpolation interpolation, float outside);

// The value of `volume` at voxel coordinates (x, y, z) (voxel centres at
// whole numbers): trilinear, or the nearest voxel's (halves round up). Up
// to half a voxel past the edge the edge voxels are used; further out (or a
// NaN coordinate) the result is `outside`. What resample_to_grid computes
// per voxel. `volume` must be consistent (voxels.size() == dims' product).
float sample_at(const Volume& volume, double x, double y, double z, Interpolation interpolation,
                float outside);

// OK when `image` and `labels` share dims, spacing and voxel-to-world
// affine (within 1e-4 relative, at least 1e-4 mm: the precision of a
// header's float; an unset affine is diag(spacing_mm) at the origin);
// otherwise InvalidArgument naming both paths, the field ("dims",
// "spacing_mm" or "affine") and both values.
absl::Status check_same_grid(const Volume& image, const Volume& labels,
                             const std::string& image_path, const std::string& labels_path);

}  // namespace lms::io
