// The geometry and voxel checks that reading, writing and resampling a
// volume share (lms/io/nifti.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lms/io/nifti.h"

namespace lms::io {

// "64x64x32" and "1 x 1 x 2.5 mm", as messages print dims and spacing.
inline std::string dims_text(const std::array<int64_t, 3>& d) {
  return absl::StrCat(d[0], "x", d[1], "x", d[2]);
}
inline std::string spacing_text(const std::array<double, 3>& s) {
  return absl::StrCat(s[0], " x ", s[1], " x ", s[2], " mm");
}

// Dims >= 1 and spacings finite and > 0; InvalidArgument naming `what`
// otherwise.
absl::Status check_geometry(const Volume& v, const std::string& what);
// check_geometry, and as many voxels as the dims say; InvalidArgument naming
// `what` otherwise.
absl::Status check_volume(const Volume& v, const std::string& what);

}  // namespace lms::io
