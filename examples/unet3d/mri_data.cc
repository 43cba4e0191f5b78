#include "mri_data.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <numbers>
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
  // The same voxels at the same world positions (dims, spacing, affine).
  if (!io::check_same_grid(p.image, p.labels, "image", "labels").ok()) {
    // Another acquisition (ch2better: 0.5 mm, its own field of view): the
    // image moves onto the atlas grid in world space; what it does not
    // cover is its lowest value (background).
    const float lowest = p.image.voxels.empty()
                             ? 0.0f
                             : *std::min_element(p.image.voxels.begin(), p.image.voxels.end());
    absl::StatusOr<io::Volume> moved =
        io::resample_to_grid(p.image, p.labels, io::Interpolation::kTrilinear, lowest);
    if (!moved.ok()) {
      return absl::Status(moved.status().code(),
                          absl::StrCat(image_path, " onto the grid of ", atlas_path, ": ",
                                       moved.status().message()));
    }
    p.image = *std::move(moved);
  }
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
  // io::resample repeats the edge voxels past the volume; the padding of
  // the shorter axes is background instead.
  const float background = pair.image.voxels.empty() ? 0.0f
                                                     : *std::min_element(pair.image.voxels.begin(),
                                                                         pair.image.voxels.end());
  std::array<std::vector<bool>, 3> outside;
  for (int a = 0; a < 3; ++a) {
    outside[a].resize(static_cast<size_t>(side));
    const double n = static_cast<double>(pair.image.dims[a]);
    for (int64_t o = 0; o < side; ++o) {
      // The source voxel coordinate of output voxel o (grids share their centre).
      const double p =
          (n - 1) / 2 + (static_cast<double>(o) + 0.5 - static_cast<double>(side) / 2) * spacing /
                            pair.image.spacing_mm[a];
      outside[a][static_cast<size_t>(o)] = p < -0.5 || p > n - 0.5;
    }
  }
  for (int64_t z = 0; z < side; ++z)
    for (int64_t y = 0; y < side; ++y)
      for (int64_t x = 0; x < side; ++x) {
        if (outside[0][x] || outside[1][y] || outside[2][z]) {
          const size_t i = out.image.index(x, y, z);
          out.image.voxels[i] = background;
          out.labels.voxels[i] = 0.0f;
        }
      }
  normalise(out.image, out.labels);
  return out;
}

int64_t grid_side(int64_t size, int64_t levels) {
  if (size < 1 || size > (int64_t{1} << 40) || levels < 1 || levels > 32) return 0;
  const int64_t multiple = int64_t{1} << (levels - 1);
  return (5 * size + 4 * multiple - 1) / (4 * multiple) * multiple;
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
  if (!(o.max_gamma >= 0 && o.max_gamma <= 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("make_batch: max_gamma ", o.max_gamma, " must be in [0, 2]"));
  }
  if (!(o.max_rotation_deg >= 0 && o.max_rotation_deg <= 180)) {
    return absl::InvalidArgumentError(
        absl::StrCat("make_batch: max_rotation_deg ", o.max_rotation_deg, " must be in [0, 180]"));
  }
  if (!(o.max_scaling >= 0 && o.max_scaling <= 0.5)) {
    return absl::InvalidArgumentError(
        absl::StrCat("make_batch: max_scaling ", o.max_scaling, " must be in [0, 0.5]"));
  }
  if (o.classes < 1)
    return absl::InvalidArgumentError(absl::StrCat("make_batch: classes ", o.classes, " < 1"));
  for (float l : pair.labels.voxels) {
    const long label = std::lround(l);
    if (label < 0 || label >= o.classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("make_batch: label ", label, " outside 0..", o.classes - 1));
    }
  }
  float background = 0, highest = 0;
  if (!pair.image.voxels.empty()) {
    const auto [lo, hi] = std::minmax_element(pair.image.voxels.begin(), pair.image.voxels.end());
    background = *lo;
    highest = *hi;
  }
  const double range = static_cast<double>(highest) - background;
  const int64_t c = o.crop, voxels = c * c * c;
  image->assign(static_cast<size_t>(o.batch * voxels), 0.0f);
  onehot->assign(static_cast<size_t>(o.batch * o.classes * voxels), 0.0f);
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
    const double angle =
        std::uniform_real_distribution<double>(-o.max_rotation_deg, o.max_rotation_deg)(rng) *
        std::numbers::pi / 180.0;
    const double zoom =
        std::uniform_real_distribution<double>(1.0 - o.max_scaling, 1.0 + o.max_scaling)(rng);
    const bool warp = angle != 0.0 || zoom != 1.0;
    // Drawn only when on, so batches without it keep their random stream.
    double gamma = 1.0;
    if (o.max_gamma > 0) {
      const double reach = std::log1p(o.max_gamma);
      gamma = std::exp(std::uniform_real_distribution<double>(-reach, reach)(rng));
    }
    const double cos_a = std::cos(angle) / zoom, sin_a = std::sin(angle) / zoom;
    const double centre = (static_cast<double>(c) - 1) / 2;
    float* img = image->data() + n * voxels;
    float* hot = onehot->data() + n * o.classes * voxels;
    for (int64_t z = 0; z < c; ++z) {
      for (int64_t y = 0; y < c; ++y) {
        for (int64_t x = 0; x < c; ++x) {
          const int64_t mx = flip ? c - 1 - x : x;  // the mirror is applied first
          const int64_t dst = (z * c + y) * c + x;
          float value = background;
          long label = 0;
          if (!warp) {
            const size_t src = pair.image.index(corner[0] + mx, corner[1] + y, corner[2] + z);
            value = pair.image.voxels[src];
            label = std::lround(pair.labels.voxels[src]);
          } else {
            // The output voxel's source: rotate and scale back about the
            // crop's centre (in the grid's voxels).
            const double dx = static_cast<double>(mx) - centre,
                         dy = static_cast<double>(y) - centre;
            const double dz = (static_cast<double>(z) - centre) / zoom;
            const double sx = corner[0] + centre + cos_a * dx + sin_a * dy;
            const double sy = corner[1] + centre - sin_a * dx + cos_a * dy;
            const double sz = corner[2] + centre + dz;
            value =
                io::sample_at(pair.image, sx, sy, sz, io::Interpolation::kTrilinear, background);
            label =
                std::lround(io::sample_at(pair.labels, sx, sy, sz, io::Interpolation::kNearest, 0));
          }
          if (gamma != 1.0 && range > 0) {
            const double t = std::clamp((value - background) / range, 0.0, 1.0);
            value = static_cast<float>(background + range * std::pow(t, gamma));
          }
          img[dst] = static_cast<float>(value * scale + shift);
          const int cls = flip && o.swap_left_right ? mirrored_class(static_cast<int>(label))
                                                    : static_cast<int>(label);
          hot[cls * voxels + dst] = 1.0f;
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace lms::unet3d
