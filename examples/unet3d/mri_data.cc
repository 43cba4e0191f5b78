#include "mri_data.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "brain_task.h"
#include "lms/status.h"

namespace lms::unet3d {
namespace {

absl::StatusOr<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat(path, ": cannot open (run scripts/fetch_data.sh)"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

void normalise(io::Volume& image, const io::Volume& labels) {
  double sum = 0, sum_sq = 0;
  int64_t n = 0;
  const bool any =
      std::any_of(labels.voxels.begin(), labels.voxels.end(), [](float l) { return l != 0.0f; });
  for (size_t i = 0; i < image.voxels.size(); ++i) {
    if (any && labels.voxels[i] == 0.0f) continue;
    sum += image.voxels[i];
    sum_sq += static_cast<double>(image.voxels[i]) * image.voxels[i];
    ++n;
  }
  if (n == 0) return;
  const double mean = sum / static_cast<double>(n);
  const double var = std::max(0.0, sum_sq / static_cast<double>(n) - mean * mean);
  const double inv = var > 0 ? 1.0 / std::sqrt(var) : 1.0;
  for (float& v : image.voxels) v = static_cast<float>((v - mean) * inv);
}

absl::StatusOr<BrainPair> load_brain(const std::string& dir, const std::string& image_file) {
  const std::string image_path = dir + "/" + image_file;
  const std::string atlas_path = dir + "/aal.nii.gz";
  const std::string table_path = dir + "/aal.nii.txt";
  BrainPair p;
  LMS_ASSIGN_OR_RETURN(p.image, io::read_nifti(image_path));
  LMS_ASSIGN_OR_RETURN(p.labels, io::read_nifti(atlas_path));
  LMS_RETURN_IF_ERROR(io::check_same_grid(p.image, p.labels, image_path, atlas_path));
  LMS_ASSIGN_OR_RETURN(std::string table, read_text(table_path));
  LMS_ASSIGN_OR_RETURN(std::vector<int> to_class, aal_classes(table, table_path));
  int64_t labelled = 0;
  for (float& v : p.labels.voxels) {
    const long index = std::lround(v);
    const int c = index > 0 && static_cast<size_t>(index) < to_class.size() ? to_class[index] : 0;
    v = static_cast<float>(c);
    labelled += c != 0;
  }
  if (labelled == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(atlas_path, ": no voxel carries a region of ", table_path));
  }
  normalise(p.image, p.labels);
  return p;
}

absl::StatusOr<BrainPair> to_cube(const BrainPair& pair, int64_t side) {
  if (side < 1) return absl::InvalidArgumentError(absl::StrCat("to_cube: side ", side, " < 1"));
  double extent = 0;
  for (int a = 0; a < 3; ++a) {
    extent = std::max(extent, static_cast<double>(pair.image.dims[a]) * pair.image.spacing_mm[a]);
  }
  const double spacing = extent / static_cast<double>(side);
  BrainPair out;
  LMS_ASSIGN_OR_RETURN(out.image,
                       io::resample(pair.image, {side, side, side}, {spacing, spacing, spacing},
                                    io::Interpolation::kTrilinear));
  LMS_ASSIGN_OR_RETURN(out.labels,
                       io::resample(pair.labels, {side, side, side}, {spacing, spacing, spacing},
                                    io::Interpolation::kNearest));
  normalise(out.image, out.labels);
  return out;
}

absl::Status make_batch(const BrainPair& pair, const BatchOptions& o, uint64_t seed, int64_t step,
                        std::vector<float>* image, std::vector<float>* onehot) {
  const auto& d = pair.image.dims;
  if (pair.labels.dims != d) {
    return absl::InvalidArgumentError("make_batch: image and labels are on different grids");
  }
  if (o.crop < 1 || o.crop > std::min({d[0], d[1], d[2]})) {
    return absl::InvalidArgumentError(absl::StrCat("make_batch: crop ", o.crop, " must be in 1..",
                                                   std::min({d[0], d[1], d[2]}),
                                                   " (the grid's smallest side)"));
  }
  if (o.batch < 1)
    return absl::InvalidArgumentError(absl::StrCat("make_batch: batch ", o.batch, " < 1"));
  if (!(o.intensity_jitter >= 0)) {
    return absl::InvalidArgumentError("make_batch: intensity_jitter must be >= 0");
  }
  const int64_t c = o.crop, voxels = c * c * c;
  image->assign(static_cast<size_t>(o.batch * voxels), 0.0f);
  onehot->assign(static_cast<size_t>(o.batch * kBrainClasses * voxels), 0.0f);
  // One stream per (seed, step): the batch does not depend on earlier steps.
  std::seed_seq seq{seed, static_cast<uint64_t>(step), uint64_t{0x6d7269}};
  std::mt19937_64 rng(seq);
  for (int64_t n = 0; n < o.batch; ++n) {
    int64_t corner[3];
    for (int a = 0; a < 3; ++a)
      corner[a] = std::uniform_int_distribution<int64_t>(0, d[a] - c)(rng);
    const bool flip = o.flips && (rng() & 1) != 0;
    std::uniform_real_distribution<double> jitter(-o.intensity_jitter, o.intensity_jitter);
    const double scale = 1.0 + jitter(rng), shift = jitter(rng);
    float* img = image->data() + n * voxels;
    float* hot = onehot->data() + n * kBrainClasses * voxels;
    for (int64_t z = 0; z < c; ++z) {
      for (int64_t y = 0; y < c; ++y) {
        for (int64_t x = 0; x < c; ++x) {
          const int64_t sx = corner[0] + (flip ? c - 1 - x : x);
          const size_t src = pair.image.index(sx, corner[1] + y, corner[2] + z);
          const int64_t dst = (z * c + y) * c + x;
          img[dst] = static_cast<float>(pair.image.voxels[src] * scale + shift);
          const long label = std::lround(pair.labels.voxels[src]);
          if (label < 0 || label >= kBrainClasses) {
            return absl::InvalidArgumentError(
                absl::StrCat("make_batch: label ", label, " outside 0..", kBrainClasses - 1));
          }
          const int cls = flip ? mirrored_class(static_cast<int>(label)) : static_cast<int>(label);
          hot[cls * voxels + dst] = 1.0f;
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace lms::unet3d
