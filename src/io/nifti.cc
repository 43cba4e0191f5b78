#include "lms/io/nifti.h"

#include <fcntl.h>
#include <nifti1_io.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "io/volume_checks.h"
#include "lms/io/file_util.h"
#include "lms/io/host_memory.h"
#include "lms/status.h"

namespace lms::io {
namespace {

struct NiftiImageFree {
  void operator()(nifti_image* nim) const { nifti_image_free(nim); }
};
using NiftiImagePtr = std::unique_ptr<nifti_image, NiftiImageFree>;

struct MallocFree {
  void operator()(void* p) const { std::free(p); }
};

constexpr NiftiType kAllTypes[] = {NiftiType::kUint8,   NiftiType::kInt8,   NiftiType::kUint16,
                                   NiftiType::kInt16,   NiftiType::kInt32,  NiftiType::kUint32,
                                   NiftiType::kFloat32, NiftiType::kFloat64};

// NIfTI-1 stores each dimension as a signed 16-bit number.
constexpr int64_t kMaxNiftiDim = 32767;

bool is_supported(int datatype) {
  return std::any_of(std::begin(kAllTypes), std::end(kAllTypes),
                     [&](NiftiType t) { return static_cast<int>(t) == datatype; });
}

std::string allowed_types() {
  std::vector<std::string> names;
  for (NiftiType t : kAllTypes) names.push_back(nifti_type_name(t));
  return absl::StrJoin(names, ", ");
}

absl::Status file_error(absl::StatusCode code, const std::string& path, const std::string& why) {
  return absl::Status(code, absl::StrCat(path, ": ", why));
}

// ---------------------------------------------------------------- reading

// Checks the fields of the raw header that niftilib would refuse without
// naming them, or would silently repair (it turns a NaN scl_slope into 0).
absl::Status check_header(const nifti_1_header& h, const std::string& path) {
  const int ndim = h.dim[0];
  if (ndim < 3 || ndim > 7) {
    return file_error(absl::StatusCode::kInvalidArgument, path,
                      absl::StrCat("dim[0] = ", ndim, ": a 3-D volume (dim[0] = 3) is needed"));
  }
  for (int i = 1; i <= 3; ++i) {
    if (h.dim[i] < 1) {
      return file_error(absl::StatusCode::kInvalidArgument, path,
                        absl::StrCat("dim[", i, "] = ", h.dim[i], "; dim[1..3] must be >= 1"));
    }
  }
  for (int i = 4; i <= ndim; ++i) {
    if (h.dim[i] != 1) {
      return file_error(absl::StatusCode::kInvalidArgument, path,
                        absl::StrCat("dim[", i, "] = ", h.dim[i], ": a ", ndim,
                                     "-D file is read only when dim[4..] are 1 (one 3-D volume)"));
    }
  }
  if (!is_supported(h.datatype)) {
    return file_error(absl::StatusCode::kInvalidArgument, path,
                      absl::StrCat("datatype ", h.datatype, " (", nifti_datatype_string(h.datatype),
                                   ") is not supported; allowed: ", allowed_types()));
  }
  if (!std::isfinite(h.scl_slope) || !std::isfinite(h.scl_inter)) {
    return file_error(absl::StatusCode::kInvalidArgument, path,
                      absl::StrCat("scl_slope = ", h.scl_slope, ", scl_inter = ", h.scl_inter,
                                   "; both must be finite"));
  }
  // Single-file NIfTI-1 only (lms/io/nifti.h). niftilib would take a file
  // named .nii.gz with another magic as an ANALYZE-style image.
  if (std::memcmp(h.magic, "n+1\0", 4) != 0) {
    const bool pair = std::memcmp(h.magic, "ni1\0", 4) == 0;
    return file_error(
        absl::StatusCode::kInvalidArgument, path,
        absl::StrCat("is not a single-file NIfTI-1 image (magic \"n+1\"", pair ? "" : ", not \"",
                     pair ? "" : absl::CHexEscape(std::string(h.magic, strnlen(h.magic, 4))),
                     pair ? "" : "\"", "); .hdr/.img pairs and ANALYZE files are not read"));
  }
  // The data starts at vox_offset: at least 352 in a .nii (the 348-byte
  // header and the 4-byte extension flag) and a whole number of bytes. Below
  // that niftilib reads from byte 348 and every voxel shifts.
  if (!std::isfinite(h.vox_offset) || h.vox_offset < 352 ||
      h.vox_offset != std::floor(h.vox_offset)) {
    return file_error(absl::StatusCode::kInvalidArgument, path,
                      absl::StrCat("vox_offset = ", h.vox_offset,
                                   ": a single-file NIfTI-1 image stores its data at a whole "
                                   "byte offset >= 352"));
  }
  // The voxel-to-world matrices read_nifti uses (Note [RAS orientation]) and
  // writes back (predict's output): every number finite.
  if (h.sform_code > 0) {
    const float* rows[3] = {h.srow_x, h.srow_y, h.srow_z};
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 4; ++c) {
        if (!std::isfinite(rows[r][c])) {
          return file_error(
              absl::StatusCode::kInvalidArgument, path,
              absl::StrCat("sform (sform_code ", h.sform_code, ") has ", rows[r][c], " in srow_",
                           std::string(1, "xyz"[r]), "[", c, "]; every entry must be finite"));
        }
      }
    }
  }
  if (h.qform_code > 0) {
    for (float q : {h.quatern_b, h.quatern_c, h.quatern_d, h.qoffset_x, h.qoffset_y, h.qoffset_z,
                    h.pixdim[0]}) {
      if (!std::isfinite(q)) {
        return file_error(absl::StatusCode::kInvalidArgument, path,
                          absl::StrCat("qform (qform_code ", h.qform_code, ") has ", q,
                                       " among quatern_b/c/d, qoffset_x/y/z and pixdim[0]; "
                                       "each must be finite"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status check_size(const nifti_1_header& h, const std::string& path,
                        const NiftiReadOptions& options) {
  const std::array<int64_t, 3> dims = {h.dim[1], h.dim[2], h.dim[3]};
  const int64_t voxels = dims[0] * dims[1] * dims[2];  // < 2^45: no overflow
  if (voxels > options.max_voxels) {
    return file_error(absl::StatusCode::kInvalidArgument, path,
                      absl::StrCat("dims ", dims_text(dims), " = ", voxels,
                                   " voxels, more than the limit ", options.max_voxels));
  }
  int bytes_per_voxel = 0, swap_size = 0;
  nifti_datatype_sizes(h.datatype, &bytes_per_voxel, &swap_size);
  // The stored data and the float volume are both held while converting.
  return check_host_bytes(path, "the stored data and the float volume",
                          absl::StrCat(voxels, " voxels x (", bytes_per_voxel, " + 4)"),
                          checked_product({voxels, bytes_per_voxel + 4}), host_memory_limit_bytes(),
                          "the volume is too large for this machine");
}

// Reads and checks the raw header (before niftilib's own checks, which only
// print their reasons).
absl::Status read_and_check_header(const std::string& path, const NiftiReadOptions& options) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, absl::StrCat("cannot open ", path));
  ::close(fd);
  int swapped = 0;
  std::unique_ptr<nifti_1_header, MallocFree> header(nifti_read_header(path.c_str(), &swapped, 0));
  if (header == nullptr || header->sizeof_hdr != 348) {
    return file_error(absl::StatusCode::kDataLoss, path,
                      "not a NIfTI-1 file (no 348-byte header; or a corrupt or truncated gzip "
                      "stream)");
  }
  LMS_RETURN_IF_ERROR(check_header(*header, path));
  return check_size(*header, path, options);
}

// Note [niftilib reading]: nifti_image_read finds the data of a single-file
// image by its base name and prefers "<base>.nii" to "<base>.nii.gz", so
// reading x.nii.gz next to an x.nii returns the header of one and the data of
// the other; iname is therefore set back to `path`. And nifti_image_load
// reports success for a truncated or corrupt gzip stream (its short-read
// check compares a size_t -1 with "<"), so the data is read here through
// znzlib and every byte is accounted for.
absl::StatusOr<NiftiImagePtr> read_header_image(const std::string& path) {
  NiftiImagePtr nim(nifti_image_read(path.c_str(), 0));
  if (nim == nullptr) {
    return file_error(absl::StatusCode::kDataLoss, path,
                      "niftilib cannot read the header (see its message on stderr)");
  }
  if (nim->nifti_type != NIFTI_FTYPE_NIFTI1_1) {
    return file_error(absl::StatusCode::kInvalidArgument, path,
                      "is not a single-file NIfTI-1 image (magic \"n+1\"); .hdr/.img pairs and "
                      "ANALYZE files are not read");
  }
  std::free(nim->iname);
  nim->iname = strdup(path.c_str());
  if (nim->iname == nullptr) return absl::ResourceExhaustedError("out of memory");
  return nim;
}

// An uncompressed file shorter than its header says is reported with both
// sizes before anything is read.
absl::Status check_file_length(const nifti_image& nim, const std::string& path) {
  if (nifti_is_gzfile(path.c_str())) return absl::OkStatus();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return errno_status(errno, absl::StrCat("cannot stat ", path));
  const uint64_t need = static_cast<uint64_t>(nim.iname_offset) + nim.nvox * nim.nbyper;
  if (static_cast<uint64_t>(st.st_size) < need) {
    return file_error(absl::StatusCode::kDataLoss, path,
                      absl::StrCat("truncated: ", st.st_size,
                                   " bytes, the header needs vox_offset ", nim.iname_offset, " + ",
                                   nim.nvox, " voxels x ", nim.nbyper, " bytes = ", need));
  }
  return absl::OkStatus();
}

// Reads the voxel data of `nim` from `path` into nim.data, native byte order
// (Note [niftilib reading]).
absl::Status load_data(nifti_image& nim, const std::string& path) {
  const size_t bytes = nim.nvox * static_cast<size_t>(nim.nbyper);
  nim.data = std::malloc(bytes);  // nifti_image_free frees it
  if (nim.data == nullptr) {
    return file_error(absl::StatusCode::kResourceExhausted, path,
                      absl::StrCat("cannot allocate ", bytes, " bytes for the image data"));
  }
  znzFile fp = znzopen(path.c_str(), "rb", nifti_is_gzfile(path.c_str()));
  if (znz_isnull(fp)) return errno_status(errno, absl::StrCat("cannot open ", path));
  const bool seeked = znzseek(fp, nim.iname_offset, SEEK_SET) >= 0;
  const size_t got = seeked ? znzread(nim.data, 1, bytes, fp) : 0;
  char extra = 0;
  // One byte past the data makes zlib check the gzip trailer (CRC, length).
  const size_t tail = got == bytes ? znzread(&extra, 1, 1, fp) : 0;
  znzclose(fp);
  constexpr size_t kZlibError = static_cast<size_t>(-1);
  if (got == kZlibError || tail == kZlibError) {
    return file_error(absl::StatusCode::kDataLoss, path,
                      "corrupt or truncated gzip stream in the image data");
  }
  if (got != bytes) {
    return file_error(absl::StatusCode::kDataLoss, path,
                      absl::StrCat("truncated image data: read ", seeked ? got : 0, " of ", bytes,
                                   " bytes after vox_offset ", nim.iname_offset));
  }
  if (nim.swapsize > 1 && nim.byteorder != nifti_short_order()) {
    nifti_swap_Nbytes(nim.nvox, nim.swapsize, nim.data);
  }
  return absl::OkStatus();
}

template <typename T>
int64_t scale_into(const void* data, size_t n, double slope, double inter, float* out) {
  const T* in = static_cast<const T*>(data);
  int64_t first_bad = -1;
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(static_cast<double>(in[i]) * slope + inter);
    if (first_bad < 0 && !std::isfinite(out[i])) first_bad = static_cast<int64_t>(i);
  }
  return first_bad;
}

// Converts the loaded data to float with scl_slope / scl_inter; returns the
// index of the first voxel that is NaN or Inf afterwards, or -1.
int64_t convert_voxels(const nifti_image& nim, std::vector<float>& out) {
  double slope = nim.scl_slope, inter = nim.scl_inter;
  if (slope == 0) slope = 1, inter = 0;  // NIfTI-1: scl_slope 0 means unscaled
  out.resize(nim.nvox);
  switch (static_cast<NiftiType>(nim.datatype)) {
    case NiftiType::kUint8:
      return scale_into<uint8_t>(nim.data, nim.nvox, slope, inter, out.data());
    case NiftiType::kInt8:
      return scale_into<int8_t>(nim.data, nim.nvox, slope, inter, out.data());
    case NiftiType::kUint16:
      return scale_into<uint16_t>(nim.data, nim.nvox, slope, inter, out.data());
    case NiftiType::kInt16:
      return scale_into<int16_t>(nim.data, nim.nvox, slope, inter, out.data());
    case NiftiType::kInt32:
      return scale_into<int32_t>(nim.data, nim.nvox, slope, inter, out.data());
    case NiftiType::kUint32:
      return scale_into<uint32_t>(nim.data, nim.nvox, slope, inter, out.data());
    case NiftiType::kFloat32:
      return scale_into<float>(nim.data, nim.nvox, slope, inter, out.data());
    case NiftiType::kFloat64:
      return scale_into<double>(nim.data, nim.nvox, slope, inter, out.data());
  }
  LMS_CHECK(false && "datatype checked by check_header");
  return -1;
}

std::array<double, 12> affine_of(const nifti_image& nim) {
  const mat44* m = nim.sform_code > 0 ? &nim.sto_xyz : nim.qform_code > 0 ? &nim.qto_xyz : nullptr;
  if (m == nullptr) return {nim.dx, 0, 0, 0, 0, nim.dy, 0, 0, 0, 0, nim.dz, 0};
  std::array<double, 12> a;
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) a[r * 4 + c] = m->m[r][c];
  }
  return a;
}

// Where each stored axis goes in RAS order, and whether it is reversed.
struct AxisMap {
  std::array<int, 3> out_axis = {0, 1, 2};
  std::array<bool, 3> flip = {false, false, false};
};

// Note [RAS orientation].
absl::StatusOr<AxisMap> ras_axis_map(const nifti_image& nim, const std::string& path) {
  AxisMap map;
  const mat44* m = nim.sform_code > 0 ? &nim.sto_xyz : nim.qform_code > 0 ? &nim.qto_xyz : nullptr;
  if (m == nullptr) return map;
  std::array<int, 3> codes = {0, 0, 0};
  nifti_mat44_to_orientation(*m, &codes[0], &codes[1], &codes[2]);
  std::array<bool, 3> seen = {false, false, false};
  for (int i = 0; i < 3; ++i) {
    // NIFTI_L2R = 1, R2L, P2A, A2P, I2S, S2I = 6; 0 for a degenerate matrix.
    const int out = (codes[i] - 1) / 2;
    if (codes[i] < 1 || codes[i] > 6 || seen[out]) {
      return file_error(absl::StatusCode::kInvalidArgument, path,
                        absl::StrCat(nim.sform_code > 0 ? "sform" : "qform",
                                     " is degenerate: its axes do not span 3-D space"));
    }
    seen[out] = true;
    map.out_axis[i] = out;
    map.flip[i] = codes[i] % 2 == 0;  // R2L, A2P, S2I run against RAS
  }
  return map;
}

// Permutes and flips whole axes of `in` (stored order) into `out`.
Volume reorient(const Volume& in, const AxisMap& map) {
  Volume out;
  for (int i = 0; i < 3; ++i) {
    out.dims[map.out_axis[i]] = in.dims[i];
    out.spacing_mm[map.out_axis[i]] = in.spacing_mm[i];
  }
  const std::array<int64_t, 3> out_stride = {1, out.dims[0], out.dims[0] * out.dims[1]};
  std::array<int64_t, 3> step{};
  int64_t base = 0;
  std::array<double, 12> a = *in.affine, b = *in.affine;
  for (int i = 0; i < 3; ++i) {
    const int o = map.out_axis[i];
    step[i] = map.flip[i] ? -out_stride[o] : out_stride[o];
    if (map.flip[i]) base += (in.dims[i] - 1) * out_stride[o];
    for (int r = 0; r < 3; ++r) {
      b[r * 4 + o] = map.flip[i] ? -a[r * 4 + i] : a[r * 4 + i];
      if (map.flip[i]) b[r * 4 + 3] += a[r * 4 + i] * static_cast<double>(in.dims[i] - 1);
    }
  }
  out.affine = b;
  out.voxels.resize(in.voxels.size());
  size_t src = 0;
  for (int64_t k = 0; k < in.dims[2]; ++k) {
    for (int64_t j = 0; j < in.dims[1]; ++j) {
      const int64_t row = base + j * step[1] + k * step[2];
      for (int64_t i = 0; i < in.dims[0]; ++i) out.voxels[row + i * step[0]] = in.voxels[src++];
    }
  }
  return out;
}

absl::StatusOr<Volume> volume_of(const nifti_image& nim, const std::string& path) {
  Volume v;
  v.dims = {nim.nx, nim.ny, nim.nz};
  v.spacing_mm = {std::fabs(nim.dx), std::fabs(nim.dy), std::fabs(nim.dz)};
  for (int i = 0; i < 3; ++i) {
    if (!std::isfinite(v.spacing_mm[i]) || v.spacing_mm[i] <= 0) {
      return file_error(absl::StatusCode::kInvalidArgument, path,
                        absl::StrCat("pixdim[", i + 1, "] = ", nim.pixdim[i + 1],
                                     "; voxel sizes must be finite and > 0"));
    }
  }
  v.affine = affine_of(nim);
  const int64_t bad = convert_voxels(nim, v.voxels);
  if (bad >= 0) {
    return file_error(absl::StatusCode::kInvalidArgument, path,
                      absl::StrCat("voxel (", bad % nim.nx, ", ", bad / nim.nx % nim.ny, ", ",
                                   bad / (int64_t{nim.nx} * nim.ny), ") (stored order) is ",
                                   v.voxels[bad], " after scaling; NaN and Inf are not allowed"));
  }
  return v;
}

// ---------------------------------------------------------------- writing

template <typename T>
absl::Status store_as(const Volume& v, NiftiType type, void* data, const std::string& path) {
  T* out = static_cast<T*>(data);
  for (size_t n = 0; n < v.voxels.size(); ++n) {
    double value = v.voxels[n];
    if constexpr (std::numeric_limits<T>::is_integer) value = std::nearbyint(value);
    const bool fits = std::isfinite(value) && value >= double{std::numeric_limits<T>::lowest()} &&
                      value <= double{std::numeric_limits<T>::max()};
    if (!fits) {
      const int64_t i = static_cast<int64_t>(n);
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot write ", path, ": voxel (", i % v.dims[0], ", ", i / v.dims[0] % v.dims[1], ", ",
          i / (v.dims[0] * v.dims[1]), ") = ", v.voxels[n], " does not fit ", nifti_type_name(type),
          " [", double{std::numeric_limits<T>::lowest()}, ", ",
          double{std::numeric_limits<T>::max()}, "] (NaN and Inf never do)"));
    }
    out[n] = static_cast<T>(value);
  }
  return absl::OkStatus();
}

absl::Status store_voxels(const Volume& v, NiftiType type, void* data, const std::string& path) {
  switch (type) {
    case NiftiType::kUint8:
      return store_as<uint8_t>(v, type, data, path);
    case NiftiType::kInt8:
      return store_as<int8_t>(v, type, data, path);
    case NiftiType::kUint16:
      return store_as<uint16_t>(v, type, data, path);
    case NiftiType::kInt16:
      return store_as<int16_t>(v, type, data, path);
    case NiftiType::kInt32:
      return store_as<int32_t>(v, type, data, path);
    case NiftiType::kUint32:
      return store_as<uint32_t>(v, type, data, path);
    case NiftiType::kFloat32:
      return store_as<float>(v, type, data, path);
    case NiftiType::kFloat64:
      return store_as<double>(v, type, data, path);
  }
  return absl::InvalidArgumentError(absl::StrCat("cannot write ", path, ": datatype ",
                                                 static_cast<int>(type), " is not one of ",
                                                 allowed_types()));
}

void set_geometry(nifti_image& nim, const Volume& v) {
  std::array<double, 12> a = v.affine.value_or(std::array<double, 12>{
      v.spacing_mm[0], 0, 0, 0, 0, v.spacing_mm[1], 0, 0, 0, 0, v.spacing_mm[2], 0});
  nim.dx = nim.pixdim[1] = static_cast<float>(v.spacing_mm[0]);
  nim.dy = nim.pixdim[2] = static_cast<float>(v.spacing_mm[1]);
  nim.dz = nim.pixdim[3] = static_cast<float>(v.spacing_mm[2]);
  nim.xyz_units = NIFTI_UNITS_MM;
  nim.scl_slope = 0;
  nim.scl_inter = 0;
  mat44 m{};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) m.m[r][c] = static_cast<float>(a[r * 4 + c]);
  }
  m.m[3][3] = 1;
  nim.sform_code = NIFTI_XFORM_SCANNER_ANAT;
  nim.sto_xyz = m;
  nim.sto_ijk = nifti_mat44_inverse(m);
  float dx, dy, dz;
  nifti_mat44_to_quatern(m, &nim.quatern_b, &nim.quatern_c, &nim.quatern_d, &nim.qoffset_x,
                         &nim.qoffset_y, &nim.qoffset_z, &dx, &dy, &dz, &nim.qfac);
  nim.qform_code = NIFTI_XFORM_SCANNER_ANAT;
  nim.qto_xyz =
      nifti_quatern_to_mat44(nim.quatern_b, nim.quatern_c, nim.quatern_d, nim.qoffset_x,
                             nim.qoffset_y, nim.qoffset_z, nim.dx, nim.dy, nim.dz, nim.qfac);
  nim.qto_ijk = nifti_mat44_inverse(nim.qto_xyz);
}

std::string nifti_suffix(const std::string& path) {
  for (const char* s : {".nii.gz", ".nii"}) {
    const size_t n = std::strlen(s);
    if (path.size() > n && path.compare(path.size() - n, n, s) == 0) return s;
  }
  return "";
}

// Whether niftilib wrote what it was given: it reports write errors (a full
// disk, say) only on stderr.
absl::Status verify_written(const nifti_image& written, const std::string& tmp,
                            const std::string& path) {
  absl::StatusOr<NiftiImagePtr> back = read_header_image(tmp);
  const bool same = back.ok() && load_data(**back, tmp).ok() && (*back)->nvox == written.nvox &&
                    (*back)->datatype == written.datatype &&
                    std::memcmp((*back)->data, written.data, written.nvox * written.nbyper) == 0;
  if (same) return absl::OkStatus();
  return file_error(
      absl::StatusCode::kDataLoss, path,
      absl::StrCat("the file niftilib wrote (", tmp, ") does not read back; is the disk full?"));
}

// Note [Atomic write], with the NIfTI suffix kept at the end of the temporary
// name since niftilib picks gzip by the name.
absl::Status write_atomically(nifti_image& nim, const std::string& path,
                              const std::string& suffix) {
  LMS_RETURN_IF_ERROR(check_writable(path));
  return atomic_write_file_by_name(path, suffix, [&](const std::string& tmp) {
    if (nifti_set_filenames(&nim, tmp.c_str(), 0, 1) != 0) {
      return absl::InternalError(absl::StrCat("niftilib refused the file name ", tmp));
    }
    nifti_image_write(&nim);
    return verify_written(nim, tmp, path);
  });
}

// ---------------------------------------------------------------- resampling

}  // namespace

// Dims >= 1 and spacings finite and > 0; InvalidArgument naming `what` otherwise.
absl::Status check_geometry(const Volume& v, const std::string& what) {
  for (int i = 0; i < 3; ++i) {
    if (v.dims[i] < 1 || !std::isfinite(v.spacing_mm[i]) || v.spacing_mm[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": dims ", dims_text(v.dims), " and spacing ", spacing_text(v.spacing_mm),
          " are invalid; each dim must be >= 1 and each spacing finite and > 0"));
    }
  }
  return absl::OkStatus();
}

absl::Status check_volume(const Volume& v, const std::string& what) {
  LMS_RETURN_IF_ERROR(check_geometry(v, what));
  if (!checked_product({v.dims[0], v.dims[1], v.dims[2]}) ||
      v.voxels.size() != static_cast<size_t>(v.voxel_count())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": holds ", v.voxels.size(),
                                                   " voxels; dims ", dims_text(v.dims), " need ",
                                                   v.dims[0] * v.dims[1] * v.dims[2]));
  }
  return absl::OkStatus();
}

const char* nifti_type_name(NiftiType type) {
  switch (type) {
    case NiftiType::kUint8:
      return "uint8";
    case NiftiType::kInt8:
      return "int8";
    case NiftiType::kUint16:
      return "uint16";
    case NiftiType::kInt16:
      return "int16";
    case NiftiType::kInt32:
      return "int32";
    case NiftiType::kUint32:
      return "uint32";
    case NiftiType::kFloat32:
      return "float32";
    case NiftiType::kFloat64:
      return "float64";
  }
  return "unsupported";
}

absl::StatusOr<Volume> read_nifti(const std::string& path, const NiftiReadOptions& options) {
  LMS_RETURN_IF_ERROR(read_and_check_header(path, options));
  LMS_ASSIGN_OR_RETURN(NiftiImagePtr nim, read_header_image(path));
  LMS_RETURN_IF_ERROR(check_file_length(*nim, path));
  LMS_RETURN_IF_ERROR(load_data(*nim, path));
  LMS_ASSIGN_OR_RETURN(Volume stored, volume_of(*nim, path));
  if (!options.reorient_to_ras) return stored;
  LMS_ASSIGN_OR_RETURN(AxisMap map, ras_axis_map(*nim, path));
  return reorient(stored, map);
}

absl::Status write_nifti(const std::string& path, const Volume& volume, NiftiType type) {
  const std::string suffix = nifti_suffix(path);
  if (suffix.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", path, ": the name must end in .nii or .nii.gz"));
  }
  LMS_RETURN_IF_ERROR(check_volume(volume, absl::StrCat("cannot write ", path)));
  if (*std::max_element(volume.dims.begin(), volume.dims.end()) > kMaxNiftiDim) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", path, ": dims ",
                                                   dims_text(volume.dims),
                                                   " exceed NIfTI-1's 32767 per axis"));
  }
  const int dims[8] = {3,
                       static_cast<int>(volume.dims[0]),
                       static_cast<int>(volume.dims[1]),
                       static_cast<int>(volume.dims[2]),
                       1,
                       1,
                       1,
                       1};
  NiftiImagePtr nim(nifti_make_new_nim(dims, static_cast<int>(type), 1));
  if (nim == nullptr || nim->data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot write ", path, ": niftilib cannot allocate ", volume.voxel_count(),
                     " voxels of ", nifti_type_name(type)));
  }
  LMS_RETURN_IF_ERROR(store_voxels(volume, type, nim->data, path));
  set_geometry(*nim, volume);
  return write_atomically(*nim, path, suffix);
}

absl::Status write_nifti_labels(const std::string& path, const Volume& labels) {
  float lo = 0, hi = 0;
  for (size_t n = 0; n < labels.voxels.size(); ++n) {
    const float v = labels.voxels[n];
    if (v != std::nearbyint(v)) {
      return absl::InvalidArgumentError(absl::StrCat("cannot write labels ", path, ": voxel ", n,
                                                     " = ", v, " is not a whole number"));
    }
    lo = std::min(lo, v), hi = std::max(hi, v);
  }
  const bool small = lo >= 0 && hi <= 255;
  return write_nifti(path, labels, small ? NiftiType::kUint8 : NiftiType::kInt16);
}

}  // namespace lms::io
