#include "lms/io/nifti.h"

#include <nifti1_io.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "temp_dir_test.h"

namespace lms::io {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr uint32_t kSeed = 20240917;

class NiftiTest : public TempDirTest {
 protected:
  NiftiTest() : TempDirTest(kSeed) {}
};

// Writes a file through niftilib itself, so that the reader is tested against
// files it did not write: `fill` sets the data, `edit` the header fields.
void write_raw(const std::string& path, const std::vector<int>& dims, int datatype,
               const std::function<void(nifti_image&)>& fill,
               const std::function<void(nifti_image&)>& edit = nullptr) {
  int d[8] = {static_cast<int>(dims.size()), 1, 1, 1, 1, 1, 1, 1};
  for (size_t i = 0; i < dims.size(); ++i) d[i + 1] = dims[i];
  nifti_image* nim = nifti_make_new_nim(d, datatype, 1);
  ASSERT_NE(nim, nullptr);
  if (fill) fill(*nim);
  if (edit) edit(*nim);
  ASSERT_EQ(nifti_set_filenames(nim, path.c_str(), 0, 1), 0);
  nifti_image_write(nim);
  nifti_image_free(nim);
}

// Stored value i + 10 j + 100 k at stored voxel (i, j, k), for orientation.
void fill_ijk(nifti_image& nim) {
  float* data = static_cast<float*>(nim.data);
  for (int k = 0; k < nim.nz; ++k) {
    for (int j = 0; j < nim.ny; ++j) {
      for (int i = 0; i < nim.nx; ++i) data[i + nim.nx * (j + nim.ny * k)] = i + 10 * j + 100 * k;
    }
  }
}

void set_sform(nifti_image& nim, const float (&rows)[3][4]) {
  nim.sform_code = NIFTI_XFORM_SCANNER_ANAT;
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 4; ++c) nim.sto_xyz.m[r][c] = r < 3 ? rows[r][c] : (c == 3 ? 1 : 0);
  }
  nim.sto_ijk = nifti_mat44_inverse(nim.sto_xyz);
}

// Integer-valued voxels within `type`'s range (below 2^24, so float holds
// them exactly), or arbitrary floats for the float types.
Volume random_volume(NiftiType type, std::array<int64_t, 3> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  Volume v;
  v.dims = dims;
  v.spacing_mm = {0.5, 1.25, 2.0};
  v.voxels.resize(v.voxel_count());
  double lo = 0, hi = 255;
  switch (type) {
    case NiftiType::kInt8:
      lo = -128, hi = 127;
      break;
    case NiftiType::kUint16:
      hi = 65535;
      break;
    case NiftiType::kInt16:
      lo = -32768, hi = 32767;
      break;
    case NiftiType::kInt32:
      lo = -(1 << 24), hi = 1 << 24;
      break;
    case NiftiType::kUint32:
      hi = 1 << 24;
      break;
    case NiftiType::kFloat32:
    case NiftiType::kFloat64:
      lo = -1e6, hi = 1e6;
      break;
    default:
      break;
  }
  std::uniform_real_distribution<double> dist(lo, hi);
  const bool integer = type != NiftiType::kFloat32 && type != NiftiType::kFloat64;
  for (float& x : v.voxels) x = static_cast<float>(integer ? std::round(dist(rng)) : dist(rng));
  v.voxels.front() = static_cast<float>(lo), v.voxels.back() = static_cast<float>(hi);
  return v;
}

constexpr NiftiType kAllTypes[] = {NiftiType::kUint8,   NiftiType::kInt8,   NiftiType::kUint16,
                                   NiftiType::kInt16,   NiftiType::kInt32,  NiftiType::kUint32,
                                   NiftiType::kFloat32, NiftiType::kFloat64};

// v_<type>.nii and v_<type>.nii.gz share a folder and hold different values:
// each must read back its own data (Note [niftilib reading]).
TEST_F(NiftiTest, RoundTripEveryTypeNiiAndGz) {
  uint32_t seed = kSeed;
  for (NiftiType type : kAllTypes) {
    for (const char* suffix : {".nii", ".nii.gz"}) {
      SCOPED_TRACE(std::string(nifti_type_name(type)) + suffix);
      const Volume v = random_volume(type, {5, 4, 3}, seed++);
      const std::string file = path(absl::StrCat("v_", nifti_type_name(type), suffix));
      ASSERT_TRUE(write_nifti(file, v, type).ok());
      absl::StatusOr<Volume> back = read_nifti(file);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(back->dims, v.dims);
      EXPECT_EQ(back->spacing_mm, v.spacing_mm);  // all exact in float
      EXPECT_EQ(back->voxels, v.voxels);
      ASSERT_TRUE(back->affine.has_value());
      EXPECT_EQ(*back->affine, (std::array<double, 12>{0.5, 0, 0, 0, 0, 1.25, 0, 0, 0, 0, 2.0, 0}));
      // Readable by others (the temporary file mkstemps made was 0600).
      EXPECT_EQ(fs::status(file).permissions() & fs::perms::all,
                fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                    fs::perms::others_read);
    }
  }
  // Atomic writes leave no temporary file behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 16);
}

TEST_F(NiftiTest, ScaledFileIsRescaledAndSlopeZeroMeansUnscaled) {
  auto ramp = [](nifti_image& nim) {
    for (size_t n = 0; n < nim.nvox; ++n) static_cast<int16_t*>(nim.data)[n] = int16_t(n) - 5;
  };
  write_raw(path("scaled.nii.gz"), {2, 3, 4}, DT_INT16, ramp, [](nifti_image& nim) {
    nim.scl_slope = 2;
    nim.scl_inter = 1;
  });
  write_raw(path("zero.nii"), {2, 3, 4}, DT_INT16, ramp, [](nifti_image& nim) {
    nim.scl_slope = 0;
    nim.scl_inter = 7;
  });
  absl::StatusOr<Volume> scaled = read_nifti(path("scaled.nii.gz"));
  absl::StatusOr<Volume> zero = read_nifti(path("zero.nii"));
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  ASSERT_TRUE(zero.ok()) << zero.status();
  for (size_t n = 0; n < 24; ++n) {
    EXPECT_EQ(scaled->voxels[n], 2.0f * (int(n) - 5) + 1) << n;
    EXPECT_EQ(zero->voxels[n], float(int(n) - 5)) << n;
  }
}

// 2x3x4 stored; x flipped by the sform (LAS): RAS x = 1 - i.
TEST_F(NiftiTest, SformFlippingXIsReadInRasOrder) {
  write_raw(path("las.nii"), {2, 3, 4}, DT_FLOAT32, fill_ijk, [](nifti_image& nim) {
    set_sform(nim, {{-1, 0, 0, 5}, {0, 1, 0, 0}, {0, 0, 1, 0}});
  });
  absl::StatusOr<Volume> v = read_nifti(path("las.nii"));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->dims, (std::array<int64_t, 3>{2, 3, 4}));
  for (int z = 0; z < 4; ++z) {
    for (int y = 0; y < 3; ++y) {
      for (int x = 0; x < 2; ++x) EXPECT_EQ(v->at(x, y, z), (1 - x) + 10 * y + 100 * z);
    }
  }
  // RAS voxel 0 is stored voxel i = 1, at world x = -1 + 5.
  EXPECT_EQ((*v->affine)[0], 1.0);
  EXPECT_EQ((*v->affine)[3], 4.0);
}

// Stored i runs Superior, j Right, k Anterior: RAS (x, y, z) = stored (z, x, y).
TEST_F(NiftiTest, SformPermutingAxesIsReadInRasOrder) {
  write_raw(path("perm.nii.gz"), {2, 3, 4}, DT_FLOAT32, fill_ijk, [](nifti_image& nim) {
    nim.dx = nim.pixdim[1] = 1, nim.dy = nim.pixdim[2] = 2, nim.dz = nim.pixdim[3] = 3;
    set_sform(nim, {{0, 2, 0, 0}, {0, 0, 3, 0}, {1, 0, 0, 0}});
  });
  absl::StatusOr<Volume> v = read_nifti(path("perm.nii.gz"));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->dims, (std::array<int64_t, 3>{3, 4, 2}));
  EXPECT_EQ(v->spacing_mm, (std::array<double, 3>{2, 3, 1}));
  for (int z = 0; z < 2; ++z) {
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < 3; ++x) EXPECT_EQ(v->at(x, y, z), z + 10 * x + 100 * y);
    }
  }
  EXPECT_EQ(*v->affine, (std::array<double, 12>{2, 0, 0, 0, 0, 3, 0, 0, 0, 0, 1, 0}));
}

// Without an sform the qform decides (here a y flip); with neither the
// stored order is kept.
TEST_F(NiftiTest, QformIsUsedWithoutSformAndNoTransformKeepsStoredOrder) {
  write_raw(path("qform.nii"), {2, 3, 4}, DT_FLOAT32, fill_ijk, [](nifti_image& nim) {
    mat44 m = nifti_make_orthog_mat44(1, 0, 0, 0, -1, 0, 0, 0, 1);
    float dx, dy, dz;
    nifti_mat44_to_quatern(m, &nim.quatern_b, &nim.quatern_c, &nim.quatern_d, &nim.qoffset_x,
                           &nim.qoffset_y, &nim.qoffset_z, &dx, &dy, &dz, &nim.qfac);
    nim.qform_code = NIFTI_XFORM_SCANNER_ANAT;
    nim.sform_code = 0;
  });
  write_raw(path("none.nii"), {2, 3, 4}, DT_FLOAT32, fill_ijk,
            [](nifti_image& nim) { nim.qform_code = nim.sform_code = 0; });
  absl::StatusOr<Volume> q = read_nifti(path("qform.nii"));
  absl::StatusOr<Volume> none = read_nifti(path("none.nii"));
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_TRUE(none.ok()) << none.status();
  for (int z = 0; z < 4; ++z) {
    for (int y = 0; y < 3; ++y) {
      for (int x = 0; x < 2; ++x) {
        EXPECT_EQ(q->at(x, y, z), x + 10 * (2 - y) + 100 * z);
        EXPECT_EQ(none->at(x, y, z), x + 10 * y + 100 * z);
      }
    }
  }
}

// Every rejected file: the expected code, the file named, and the field.
void expect_error(const absl::StatusOr<Volume>& v, absl::StatusCode code, const std::string& file,
                  const std::string& field) {
  ASSERT_FALSE(v.ok());
  std::printf("%s\n", v.status().ToString().c_str());
  EXPECT_EQ(v.status().code(), code) << v.status();
  EXPECT_THAT(std::string(v.status().message()), HasSubstr(file));
  EXPECT_THAT(std::string(v.status().message()), HasSubstr(field));
}

void cut_file(const std::string& file, size_t keep) { fs::resize_file(file, keep); }

TEST_F(NiftiTest, TruncatedFilesAreDataLoss) {
  const Volume v = random_volume(NiftiType::kFloat32, {16, 16, 16}, kSeed);
  for (const char* name : {"t.nii.gz", "t.nii"}) {
    const std::string file = path(name);
    ASSERT_TRUE(write_nifti(file, v, NiftiType::kFloat32).ok());
    cut_file(file, fs::file_size(file) / 2);
    expect_error(read_nifti(file), absl::StatusCode::kDataLoss, file, "truncated");
  }
  const std::string header_only = path("h.nii.gz");
  ASSERT_TRUE(write_nifti(header_only, v, NiftiType::kFloat32).ok());
  cut_file(header_only, 40);  // inside the gzip'd header
  expect_error(read_nifti(header_only), absl::StatusCode::kDataLoss, header_only, "NIfTI-1");
}

TEST_F(NiftiTest, CorruptGzipIsAnErrorNotACrash) {
  const Volume v = random_volume(NiftiType::kFloat32, {16, 16, 16}, kSeed);
  std::mt19937 rng(kSeed);
  for (double where : {0.02, 0.5}) {
    const std::string file = path(absl::StrCat("c", int(where * 100), ".nii.gz"));
    ASSERT_TRUE(write_nifti(file, v, NiftiType::kFloat32).ok());
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) * where));
    for (int n = 0; n < 64; ++n) f.put(static_cast<char>(rng()));
    f.close();
    absl::StatusOr<Volume> back = read_nifti(file);
    ASSERT_FALSE(back.ok()) << where;
    EXPECT_THAT(std::string(back.status().message()), HasSubstr(file));
  }
}

TEST_F(NiftiTest, NotANiftiFileAndMissingFile) {
  std::ofstream(path("text.nii")) << "hello, not a volume\n";
  expect_error(read_nifti(path("text.nii")), absl::StatusCode::kDataLoss, path("text.nii"),
               "not a NIfTI-1 file");
  expect_error(read_nifti(path("missing.nii")), absl::StatusCode::kNotFound, path("missing.nii"),
               "cannot open");
}

TEST_F(NiftiTest, WrongDimensionsAreRejectedAndSingleton4DIsAccepted) {
  write_raw(path("2d.nii"), {4, 5}, DT_FLOAT32, nullptr);
  expect_error(read_nifti(path("2d.nii")), absl::StatusCode::kInvalidArgument, path("2d.nii"),
               "dim[0] = 2");
  write_raw(path("4d.nii"), {4, 5, 6, 3}, DT_FLOAT32, nullptr);
  expect_error(read_nifti(path("4d.nii")), absl::StatusCode::kInvalidArgument, path("4d.nii"),
               "dim[4] = 3");
  write_raw(path("4d1.nii.gz"), {4, 5, 6, 1}, DT_FLOAT32, nullptr);
  absl::StatusOr<Volume> v = read_nifti(path("4d1.nii.gz"));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->dims, (std::array<int64_t, 3>{4, 5, 6}));
}

TEST_F(NiftiTest, UnsupportedDatatypesAreNamed) {
  write_raw(path("c64.nii"), {2, 2, 2}, DT_COMPLEX64, nullptr);
  write_raw(path("rgb.nii.gz"), {2, 2, 2}, DT_RGB24, nullptr);
  expect_error(read_nifti(path("c64.nii")), absl::StatusCode::kInvalidArgument, path("c64.nii"),
               "datatype 32 (COMPLEX64) is not supported; allowed: uint8, int8");
  expect_error(read_nifti(path("rgb.nii.gz")), absl::StatusCode::kInvalidArgument,
               path("rgb.nii.gz"), "RGB24");
}

TEST_F(NiftiTest, NanAndInfVoxelsAndNonFiniteScalingAreRejected) {
  auto with = [](float bad) {
    return [bad](nifti_image& nim) { static_cast<float*>(nim.data)[1 + 2 * 2] = bad; };
  };
  write_raw(path("nan.nii"), {2, 3, 4}, DT_FLOAT32, with(NAN));
  write_raw(path("inf.nii.gz"), {2, 3, 4}, DT_FLOAT32, with(-INFINITY));
  expect_error(read_nifti(path("nan.nii")), absl::StatusCode::kInvalidArgument, path("nan.nii"),
               "voxel (1, 2, 0)");
  expect_error(read_nifti(path("inf.nii.gz")), absl::StatusCode::kInvalidArgument,
               path("inf.nii.gz"), "-inf after scaling");
  write_raw(path("slope.nii"), {2, 3, 4}, DT_INT16, nullptr,
            [](nifti_image& nim) { nim.scl_slope = NAN; });
  expect_error(read_nifti(path("slope.nii")), absl::StatusCode::kInvalidArgument, path("slope.nii"),
               "scl_slope = nan");
}

// A header claiming 30000^3 voxels (NIfTI-1 dims stop at 32767) with no data.
TEST_F(NiftiTest, AbsurdSizeIsRefusedBeforeAllocating) {
  int d[8] = {3, 30000, 30000, 30000, 1, 1, 1, 1};
  nifti_image* nim = nifti_make_new_nim(d, DT_UINT8, 0);
  ASSERT_NE(nim, nullptr);
  ASSERT_EQ(nifti_set_filenames(nim, path("huge.nii").c_str(), 0, 1), 0);
  znzFile f = nifti_image_write_hdr_img(nim, 0, "wb");  // header only; closes the file
  if (!znz_isnull(f)) znzclose(f);
  nifti_image_free(nim);
  ASSERT_EQ(fs::file_size(path("huge.nii")), 352u);
  expect_error(read_nifti(path("huge.nii")), absl::StatusCode::kInvalidArgument, path("huge.nii"),
               "dims 30000x30000x30000 = 27000000000000 voxels");
  // Within the voxel limit, the data the header promises is missing.
  expect_error(read_nifti(path("huge.nii"), {.max_voxels = int64_t{1} << 50}),
               absl::StatusCode::kInvalidArgument, path("huge.nii"), "host memory");
}

TEST_F(NiftiTest, WriteRefusesValuesThatDoNotFitAndBadNames) {
  Volume v = random_volume(NiftiType::kUint8, {2, 2, 2}, kSeed);
  v.voxels[v.index(1, 0, 1)] = 256;
  absl::Status s = write_nifti(path("u8.nii"), v, NiftiType::kUint8);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("voxel (1, 0, 1) = 256 does not fit uint8"));
  v.voxels[v.index(1, 0, 1)] = NAN;
  EXPECT_FALSE(write_nifti(path("f.nii"), v, NiftiType::kFloat32).ok());
  v.voxels[v.index(1, 0, 1)] = 1;
  EXPECT_THAT(std::string(write_nifti(path("v.img"), v, NiftiType::kFloat32).message()),
              HasSubstr(".nii or .nii.gz"));
  EXPECT_FALSE(fs::exists(path("u8.nii")));
  EXPECT_FALSE(fs::exists(path("f.nii")));
}

int stored_datatype(const std::string& file) {
  nifti_image* nim = nifti_image_read(file.c_str(), 0);
  const int dt = nim != nullptr ? nim->datatype : -1;
  nifti_image_free(nim);
  return dt;
}

TEST_F(NiftiTest, LabelsAreWrittenAsUint8OrInt16) {
  Volume labels{.dims = {3, 2, 2}, .spacing_mm = {1, 1, 1}, .voxels = std::vector<float>(12, 0)};
  labels.voxels[3] = 4;
  ASSERT_TRUE(write_nifti_labels(path("small.nii.gz"), labels).ok());
  EXPECT_EQ(stored_datatype(path("small.nii.gz")), DT_UINT8);
  labels.voxels[5] = -1;
  labels.voxels[6] = 1000;
  ASSERT_TRUE(write_nifti_labels(path("wide.nii.gz"), labels).ok());
  EXPECT_EQ(stored_datatype(path("wide.nii.gz")), DT_INT16);
  absl::StatusOr<Volume> back = read_nifti(path("wide.nii.gz"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->voxels, labels.voxels);
  labels.voxels[7] = 0.5;
  EXPECT_EQ(write_nifti_labels(path("half.nii"), labels).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NiftiGridTest, DifferentGridsNameBothFilesAndTheField) {
  Volume image{.dims = {4, 4, 4}, .spacing_mm = {1, 1, 1.5}};
  Volume labels = image;
  EXPECT_TRUE(check_same_grid(image, labels, "t1.nii.gz", "seg.nii.gz").ok());
  labels.spacing_mm[2] = 1.5 * (1 + 1e-6);  // float header rounding is tolerated
  EXPECT_TRUE(check_same_grid(image, labels, "t1.nii.gz", "seg.nii.gz").ok());
  labels.spacing_mm[2] = 1.6;
  absl::Status s = check_same_grid(image, labels, "t1.nii.gz", "seg.nii.gz");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("t1.nii.gz and seg.nii.gz differ in spacing_mm"));
  labels = image;
  labels.dims[1] = 5;
  s = check_same_grid(image, labels, "t1.nii.gz", "seg.nii.gz");
  EXPECT_THAT(std::string(s.message()), HasSubstr("differ in dims: 4x4x4 vs 4x5x4"));
  // Same dims and spacing on another grid: shifted 5 mm, or oblique.
  image.affine = std::array<double, 12>{1, 0, 0, -10, 0, 1, 0, -20, 0, 0, 1.5, 30};
  labels = image;
  labels.affine->at(3) += 1e-5;  // float header rounding of the origin
  EXPECT_TRUE(check_same_grid(image, labels, "t1.nii.gz", "seg.nii.gz").ok());
  labels.affine->at(3) = -5;
  s = check_same_grid(image, labels, "t1.nii.gz", "seg.nii.gz");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("t1.nii.gz and seg.nii.gz differ in the voxel-to-world affine (origin"));
  const double c = std::cos(0.2), n = std::sin(0.2);
  labels.affine = std::array<double, 12>{c, -n, 0, -10, n, c, 0, -20, 0, 0, 1.5, 30};
  s = check_same_grid(image, labels, "t1.nii.gz", "seg.nii.gz");
  EXPECT_THAT(std::string(s.message()), HasSubstr("affine (axes"));
  // An unset affine is diag(spacing) at the origin.
  image.affine.reset();
  labels.affine = std::array<double, 12>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1.5, 0};
  EXPECT_TRUE(check_same_grid(image, labels, "t1.nii.gz", "seg.nii.gz").ok());
}

// Value 2x - 3y + 0.5z + 1 at voxel (x, y, z) of an 8x8x8 grid.
float ramp(double x, double y, double z) { return float(2 * x - 3 * y + 0.5 * z + 1); }

TEST(NiftiResampleTest, TrilinearOfARampIsExactInside) {
  Volume v{.dims = {8, 8, 8}, .spacing_mm = {1, 1, 1}};
  for (int z = 0; z < 8; ++z) {
    for (int y = 0; y < 8; ++y) {
      for (int x = 0; x < 8; ++x) v.voxels.push_back(ramp(x, y, z));
    }
  }
  // Same extent (8 mm) on 12 voxels of 2/3 mm: output o samples input
  // (o + 0.5) * 2/3 - 0.5.
  absl::StatusOr<Volume> r =
      resample(v, {12, 12, 12}, {2.0 / 3, 2.0 / 3, 2.0 / 3}, Interpolation::kTrilinear);
  ASSERT_TRUE(r.ok()) << r.status();
  int checked = 0;
  for (int z = 1; z < 11; ++z) {
    for (int y = 1; y < 11; ++y) {
      for (int x = 1; x < 11; ++x) {
        auto in = [](int o) { return (o + 0.5) * 2 / 3 - 0.5; };
        EXPECT_NEAR(r->at(x, y, z), ramp(in(x), in(y), in(z)), 1e-4) << x << " " << y << " " << z;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 1000);
}

TEST(NiftiResampleTest, NearestKeepsTheLabelSet) {
  std::mt19937 rng(kSeed);
  const float kLabels[] = {0, 1, 2, 5};
  Volume v{.dims = {7, 6, 5}, .spacing_mm = {1, 1.2, 2.5}};
  for (int n = 0; n < 7 * 6 * 5; ++n) v.voxels.push_back(kLabels[rng() % 4]);
  absl::StatusOr<Volume> r = resample(v, {11, 9, 4}, {0.7, 0.9, 3.1}, Interpolation::kNearest);
  ASSERT_TRUE(r.ok()) << r.status();
  std::set<float> seen(r->voxels.begin(), r->voxels.end());
  for (float label : seen) EXPECT_TRUE(label == 0 || label == 1 || label == 2 || label == 5);
  EXPECT_GE(seen.size(), 3u);
}

TEST(NiftiResampleTest, IdentityReturnsTheSameVoxels) {
  const Volume v = random_volume(NiftiType::kFloat32, {5, 6, 7}, kSeed);
  for (Interpolation interp : {Interpolation::kTrilinear, Interpolation::kNearest}) {
    absl::StatusOr<Volume> r = resample(v, v.dims, v.spacing_mm, interp);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->voxels, v.voxels);
  }
  EXPECT_EQ(resample(v, {0, 6, 7}, v.spacing_mm, Interpolation::kNearest).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A volume whose voxel (x, y, z) holds its index x + dims[0] * (y + dims[1] * z).
Volume index_volume(const std::array<int64_t, 3>& dims, const std::array<double, 3>& spacing) {
  Volume v{.dims = dims, .spacing_mm = spacing};
  for (int64_t n = 0; n < v.dims[0] * v.dims[1] * v.dims[2]; ++n) {
    v.voxels.push_back(static_cast<float>(n));
  }
  return v;
}

TEST(NiftiResampleToGridTest, IdenticalGridsReturnIdenticalVoxels) {
  Volume v = random_volume(NiftiType::kFloat32, {5, 6, 7}, kSeed);
  v.spacing_mm = {0.7, 1.3, 2.1};
  // Axes permuted and flipped, off the origin: only the world mapping counts.
  v.affine = std::array<double, 12>{0, -1.3, 0, 10.3, 0.7, 0, 0, -4.9, 0, 0, 2.1, 7.7};
  for (Interpolation interp : {Interpolation::kTrilinear, Interpolation::kNearest}) {
    absl::StatusOr<Volume> r = resample_to_grid(v, v, interp, -1);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->dims, v.dims);
    EXPECT_EQ(r->affine, v.affine);
    EXPECT_EQ(r->voxels, v.voxels);
  }
  // Without affines: diag(spacing) at the origin on both sides.
  v.affine.reset();
  absl::StatusOr<Volume> r = resample_to_grid(v, v, Interpolation::kTrilinear, -1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->voxels, v.voxels);
}

TEST(NiftiResampleToGridTest, TranslatedAffineGivesAShiftedCopy) {
  // 6x5x4 voxels of 2 mm; the volume's voxel (0, 0, 0) sits at world (4, -2, 0),
  // 2 voxels along +x and 1 along -y from the grid's (at the origin, no affine).
  Volume v = index_volume({6, 5, 4}, {2, 2, 2});
  v.affine = std::array<double, 12>{2, 0, 0, 4, 0, 2, 0, -2, 0, 0, 2, 0};
  Volume grid{.dims = {6, 5, 4}, .spacing_mm = {2, 2, 2}};  // no voxels: only the grid counts
  constexpr float kOutside = -7;
  for (Interpolation interp : {Interpolation::kTrilinear, Interpolation::kNearest}) {
    absl::StatusOr<Volume> r = resample_to_grid(v, grid, interp, kOutside);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->dims, grid.dims);
    EXPECT_EQ(r->spacing_mm, grid.spacing_mm);
    EXPECT_FALSE(r->affine.has_value());
    int outside = 0;
    for (int64_t z = 0; z < 4; ++z) {
      for (int64_t y = 0; y < 5; ++y) {
        for (int64_t x = 0; x < 6; ++x) {
          // Grid voxel (x, y, z) is world 2 (x, y, z), the volume's voxel (x - 2, y + 1, z).
          const int64_t sx = x - 2, sy = y + 1;
          const bool in = sx >= 0 && sy < 5;
          EXPECT_EQ(r->at(x, y, z), in ? v.at(sx, sy, z) : kOutside) << x << " " << y << " " << z;
          outside += !in;
        }
      }
    }
    EXPECT_EQ(outside, (2 * 5 + 4 * 1) * 4);  // x = 0, 1 and y = 4
  }
}

TEST(NiftiResampleToGridTest, HalfMillimetreToOneMillimetreAveragesBlocks) {
  // The 1 mm grid: 4^3 voxels centred at world 0..3 mm, covering [-0.5, 3.5] mm.
  // The 0.5 mm volume covers the same box: 8^3 voxels centred at -0.25 + 0.5 i.
  // Grid voxel i is volume coordinate (i + 0.25) / 0.5 = 2i + 0.5, per axis:
  // trilinear weights 1/2 and 1/2, the mean of the 2x2x2 block 2i..2i+1.
  Volume fine = index_volume({8, 8, 8}, {0.5, 0.5, 0.5});  // the ramp x + 8y + 64z
  fine.affine = std::array<double, 12>{0.5, 0, 0, -0.25, 0, 0.5, 0, -0.25, 0, 0, 0.5, -0.25};
  Volume grid{.dims = {4, 4, 4}, .spacing_mm = {1, 1, 1}};
  grid.affine = std::array<double, 12>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
  absl::StatusOr<Volume> r = resample_to_grid(fine, grid, Interpolation::kTrilinear, -1);
  ASSERT_TRUE(r.ok()) << r.status();
  // Voxel (0, 0, 0): the mean of x, y, z in {0, 1}: 0.5 + 8 * 0.5 + 64 * 0.5.
  EXPECT_FLOAT_EQ(r->at(0, 0, 0), 36.5f);
  // Voxel (3, 1, 2): x in {6, 7}, y in {2, 3}, z in {4, 5}: 6.5 + 8 * 2.5 + 64 * 4.5.
  EXPECT_FLOAT_EQ(r->at(3, 1, 2), 314.5f);
  for (int64_t z = 0; z < 4; ++z) {
    for (int64_t y = 0; y < 4; ++y) {
      for (int64_t x = 0; x < 4; ++x) {
        double mean = 0;
        for (int c = 0; c < 8; ++c)
          mean += fine.at(2 * x + (c & 1), 2 * y + (c >> 1 & 1), 2 * z + (c >> 2));
        EXPECT_FLOAT_EQ(r->at(x, y, z), static_cast<float>(mean / 8)) << x << " " << y << " " << z;
      }
    }
  }
  // Nearest: 2i + 0.5 rounds up to voxel 2i + 1.
  r = resample_to_grid(fine, grid, Interpolation::kNearest, -1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->at(3, 1, 2), fine.at(7, 3, 5));
}

TEST(NiftiResampleToGridTest, SingularAffinesAndBadVolumesAreNamed) {
  Volume v = index_volume({3, 3, 3}, {1, 1, 1});
  Volume grid = v;
  v.affine = std::array<double, 12>{1, 2, 0, 0, 2, 4, 0, 0, 0, 0, 1, 0};  // rank 2
  absl::Status s = resample_to_grid(v, grid, Interpolation::kTrilinear, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("volume's affine is singular"));
  s = resample_to_grid(grid, v, Interpolation::kTrilinear, 0).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("grid's affine is singular"));
  v.affine.reset();
  v.voxels.pop_back();
  s = resample_to_grid(v, grid, Interpolation::kTrilinear, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("resample_to_grid: volume"));
  const Volume good = grid;
  grid.dims[0] = 0;
  s = resample_to_grid(good, grid, Interpolation::kTrilinear, 0).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("resample_to_grid: grid"));
}

}  // namespace
}  // namespace lms::io

namespace lms::io {
namespace {

// Only single-file NIfTI-1 is read: a .hdr/.img pair and a NIfTI-2 header
// are refused, naming the file and what is allowed.
// The bad-file generator: a valid single-file image written by niftilib,
// then one field of its 348-byte header changed in place, written as .nii,
// or gzipped (by niftilib's znzlib) as .nii.gz.
void write_with_header_edit(const std::string& good_nii, const std::string& out,
                            const std::function<void(nifti_1_header&)>& edit) {
  std::ifstream in(good_nii, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), sizeof(nifti_1_header));
  nifti_1_header h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  edit(h);
  std::memcpy(bytes.data(), &h, sizeof(h));
  const bool gz = out.size() > 3 && out.compare(out.size() - 3, 3, ".gz") == 0;
  znzFile f = znzopen(out.c_str(), "wb", gz ? 1 : 0);
  ASSERT_FALSE(znz_isnull(f));
  ASSERT_EQ(znzwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  znzclose(f);
}

// vox_offset below 352 (where niftilib reads from byte 348 and shifts every
// voxel), not finite or not whole; a non-finite sform or qform entry; and
// another magic in a file named .nii.gz: each is refused naming the field.
TEST_F(NiftiTest, BadHeaderFieldsAreRefusedByName) {
  const std::string good = path("good.nii");
  write_raw(good, {4, 3, 2}, DT_FLOAT32, fill_ijk, [](nifti_image& nim) {
    set_sform(nim, {{1, 0, 0, -2}, {0, 1, 0, -1}, {0, 0, 1, 5}});
  });
  ASSERT_TRUE(read_nifti(good).ok());
  struct Case {
    std::string name;
    std::function<void(nifti_1_header&)> edit;
    std::string named;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<Case> cases;
  for (float offset : {-352.0f, nan, 0.0f, 100.0f, 348.0f, 352.5f}) {
    cases.push_back({absl::StrCat("offset_", cases.size()),
                     [offset](nifti_1_header& h) { h.vox_offset = offset; }, "vox_offset = "});
  }
  cases.push_back({"sform_nan", [nan](nifti_1_header& h) { h.srow_y[3] = nan; }, "srow_y[3]"});
  cases.push_back({"sform_inf",
                   [](nifti_1_header& h) { h.srow_x[0] = std::numeric_limits<float>::infinity(); },
                   "srow_x[0]"});
  cases.push_back({"qform_nan",
                   [nan](nifti_1_header& h) {
                     h.sform_code = 0;
                     h.qform_code = 1;
                     h.quatern_b = nan;
                   },
                   "qform (qform_code 1)"});
  cases.push_back({"magic", [](nifti_1_header& h) { std::memcpy(h.magic, "abc\0", 4); },
                   "magic \"n+1\", not \"abc\""});
  for (const Case& c : cases) {
    for (const char* ext : {".nii", ".nii.gz"}) {
      const std::string bad = path(c.name + ext);
      write_with_header_edit(good, bad, c.edit);
      absl::StatusOr<Volume> v = read_nifti(bad);
      ASSERT_FALSE(v.ok()) << bad << " was read";
      EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
      EXPECT_THAT(std::string(v.status().message()), HasSubstr(c.named)) << bad;
      EXPECT_THAT(std::string(v.status().message()), HasSubstr(bad));
    }
  }
  // The generator itself writes readable files: the unchanged header, also
  // gzipped, reads back the same voxels.
  write_with_header_edit(good, path("same.nii.gz"), [](nifti_1_header&) {});
  absl::StatusOr<Volume> a = read_nifti(good), b = read_nifti(path("same.nii.gz"));
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_EQ(a->voxels, b->voxels);
}

TEST_F(NiftiTest, PairsAndNifti2AreRefusedByName) {
  write_raw(path("pair.hdr"), {2, 3, 4}, DT_FLOAT32, fill_ijk);
  ASSERT_TRUE(fs::exists(path("pair.img")));
  absl::StatusOr<Volume> pair = read_nifti(path("pair.hdr"));
  ASSERT_FALSE(pair.ok());
  EXPECT_EQ(pair.status().code(), absl::StatusCode::kInvalidArgument) << pair.status();
  EXPECT_NE(std::string(pair.status().message()).find(".hdr/.img"), std::string::npos)
      << pair.status();
  EXPECT_NE(std::string(pair.status().message()).find("pair.hdr"), std::string::npos);

  // A NIfTI-2 header starts with sizeof_hdr = 540 and magic "n+2\0".
  std::string bytes(540 + 4 + 24 * 4, '\0');
  const int32_t size = 540;
  std::memcpy(bytes.data(), &size, 4);
  std::memcpy(bytes.data() + 4, "n+2\0\r\n\032\n", 8);
  { std::ofstream(path("two.nii"), std::ios::binary) << bytes; }
  absl::StatusOr<Volume> two = read_nifti(path("two.nii"));
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().code(), absl::StatusCode::kDataLoss) << two.status();
  EXPECT_NE(std::string(two.status().message()).find("not a NIfTI-1"), std::string::npos)
      << two.status();
}

}  // namespace
}  // namespace lms::io

namespace lms::io {
namespace {

// sample_at on a 2 x 2 x 1 volume: trilinear midpoints, nearest with halves
// rounding up, the edge value up to half a voxel out, `outside` beyond.
TEST(SampleAt, TrilinearNearestAndOutside) {
  Volume v;
  v.dims = {2, 2, 1};
  v.spacing_mm = {1, 1, 1};
  v.voxels = {0, 10, 20, 30};  // (x, y): (0,0) 0, (1,0) 10, (0,1) 20, (1,1) 30
  EXPECT_FLOAT_EQ(sample_at(v, 0.5, 0.5, 0, Interpolation::kTrilinear, -1), 15);
  EXPECT_FLOAT_EQ(sample_at(v, 0.25, 0, 0, Interpolation::kTrilinear, -1), 2.5);
  EXPECT_FLOAT_EQ(sample_at(v, 0.5, 0, 0, Interpolation::kNearest, -1), 10);
  EXPECT_FLOAT_EQ(sample_at(v, 0.49, 0.51, 0, Interpolation::kNearest, -1), 20);
  EXPECT_FLOAT_EQ(sample_at(v, -0.4, 1.4, 0.3, Interpolation::kTrilinear, -1), 20);
  EXPECT_FLOAT_EQ(sample_at(v, -0.6, 0, 0, Interpolation::kTrilinear, -1), -1);
  EXPECT_FLOAT_EQ(sample_at(v, 0, 0, 0.6, Interpolation::kNearest, -1), -1);
  EXPECT_FLOAT_EQ(sample_at(v, std::nan(""), 0, 0, Interpolation::kNearest, -1), -1);
}

}  // namespace
}  // namespace lms::io
