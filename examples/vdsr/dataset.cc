#include "dataset.h"

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <random>
#include <utility>

#include "fmt/format.h"
#include "lms/io/host_memory.h"
#include "lms/io/image.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/units.h"

namespace lms::vdsr {
namespace {

// SplitMix64 finaliser: decorrelates the generator seeds of adjacent steps.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform integer in [0, n) from raw 64-bit draws. std::uniform_int_distribution
// is implementation-defined; this keeps batches identical across standard
// libraries.
int uniform(std::mt19937_64& gen, int n) {
  return static_cast<int>(gen() % static_cast<uint64_t>(n));
}

// Where a patch comes from and how it is transformed.
struct PatchDraw {
  size_t image = 0;
  int x = 0;
  int y = 0;
  bool flip = false;  // mirror left-right before rotating
  int rot = 0;        // counter-clockwise quarter turns
};

// Copies the crop x crop window of `src` at (d.x, d.y) into `dst`, mirrored
// and rotated as `d` says. Output pixel (i, j) (row, column) reads the window
// pixel obtained by undoing the rotation, then the flip.
void copy_patch(const io::Plane& src, const PatchDraw& d, int crop, float* dst) {
  const int last = crop - 1;
  for (int i = 0; i < crop; ++i) {
    for (int j = 0; j < crop; ++j) {
      int r = i, c = j;
      for (int k = 0; k < d.rot; ++k) {  // undo one counter-clockwise turn
        int nr = c, nc = last - r;
        r = nr;
        c = nc;
      }
      if (d.flip) c = last - c;
      dst[static_cast<size_t>(i) * crop + j] =
          src.data[static_cast<size_t>(d.y + r) * src.width + (d.x + c)];
    }
  }
}

// The files of rank `o.rank`: files[rank::ranks].
absl::StatusOr<std::vector<std::string>> share_of(std::vector<std::string> files,
                                                  const std::string& dir, const DatasetOptions& o) {
  if (o.ranks < 1 || o.rank < 0 || o.rank >= o.ranks) {
    return absl::InvalidArgumentError(
        fmt::format("rank {} of {} ranks: must be in [0, ranks)", o.rank, o.ranks));
  }
  if (o.ranks == 1) return files;
  if (files.size() < static_cast<size_t>(o.ranks)) {
    return absl::InvalidArgumentError(fmt::format(
        "{} has {} image file(s) for {} ranks, so rank {} would train on none; run at most {} "
        "ranks or add images",
        dir, files.size(), o.ranks, files.size(), files.size()));
  }
  std::vector<std::string> share;
  for (size_t i = static_cast<size_t>(o.rank); i < files.size(); i += o.ranks) {
    share.push_back(std::move(files[i]));
  }
  return share;
}

}  // namespace

absl::StatusOr<ImagePair> make_pair(const io::Image& image, int scale) {
  if (scale < 2) return absl::InvalidArgumentError(fmt::format("scale {} must be >= 2", scale));
  LMS_ASSIGN_OR_RETURN(io::Plane y, io::rgb_to_y(image));
  LMS_ASSIGN_OR_RETURN(y, io::modcrop(y, scale));
  if (y.width < 2 * scale || y.height < 2 * scale) {
    return absl::InvalidArgumentError(
        fmt::format("image of {}x{} pixels is too small for scale {} (needs at least {} per side)",
                    image.width, image.height, scale, 2 * scale));
  }
  LMS_ASSIGN_OR_RETURN(io::Plane down, io::resize_bicubic(y, y.width / scale, y.height / scale));
  LMS_ASSIGN_OR_RETURN(io::Plane up, io::resize_bicubic(down, y.width, y.height));
  ImagePair p;
  p.lr_up = std::move(up);
  p.hr = std::move(y);
  return p;
}

absl::StatusOr<Dataset> Dataset::load(const std::string& dir, const DatasetOptions& options,
                                      std::vector<std::string>* warnings) {
  if (options.scale < 2) {
    return absl::InvalidArgumentError(fmt::format("scale {} must be >= 2", options.scale));
  }
  if (options.max_images < 0 || options.min_side < 0) {
    return absl::InvalidArgumentError(
        fmt::format("max_images {} (0 = all) and min_side {} (0 = any) must be >= 0",
                    options.max_images, options.min_side));
  }
  std::vector<std::string> reasons;  // one per unusable file (Note [Unusable folder])
  LMS_ASSIGN_OR_RETURN(std::vector<std::string> files, io::list_images(dir, &reasons));
  LMS_ASSIGN_OR_RETURN(files, share_of(std::move(files), dir, options));
  std::vector<ImagePair> pairs;
  size_t large_enough = 0;
  for (const std::string& path : files) {
    if (options.max_images > 0 && static_cast<int>(pairs.size()) == options.max_images) break;
    // One decoded photo at a time: a 2560x1600 RGB image is 49 MB of floats.
    absl::StatusOr<ImagePair> pair = [&]() -> absl::StatusOr<ImagePair> {
      LMS_ASSIGN_OR_RETURN(io::Image img, io::read_image(path));
      return make_pair(img, options.scale);
    }();
    if (!pair.ok()) {
      reasons.push_back(io::file_reason(path, pair.status()));
      if (warnings != nullptr)
        warnings->push_back(fmt::format("{}: {}", path, to_std(pair.status().message())));
      continue;
    }
    pair->name = std::filesystem::path(path).filename().string();
    if (pair->hr.width < options.min_side || pair->hr.height < options.min_side) {
      reasons.push_back(fmt::format("{}: {}x{} is smaller than the crop {}", pair->name,
                                    pair->hr.width, pair->hr.height, options.min_side));
    } else {
      ++large_enough;
    }
    pairs.push_back(*std::move(pair));
  }
  if (large_enough == 0) {
    std::string message = io::no_usable_image_message(dir, std::move(reasons));
    return pairs.empty() ? absl::NotFoundError(message) : absl::InvalidArgumentError(message);
  }
  return Dataset(std::move(pairs));
}

absl::StatusOr<Dataset> Dataset::from_pairs(std::vector<ImagePair> pairs) {
  if (pairs.empty()) return absl::InvalidArgumentError("a dataset needs at least one image pair");
  for (const ImagePair& p : pairs) {
    LMS_RETURN_IF_ERROR(io::validate_plane(p.hr));
    LMS_RETURN_IF_ERROR(io::validate_plane(p.lr_up));
    if (p.hr.width != p.lr_up.width || p.hr.height != p.lr_up.height) {
      return absl::InvalidArgumentError(
          fmt::format("pair '{}': input and target sizes differ", p.name));
    }
  }
  return Dataset(std::move(pairs));
}

int Dataset::min_width() const {
  int w = pairs_.front().hr.width;
  for (const ImagePair& p : pairs_) w = std::min(w, p.hr.width);
  return w;
}

int Dataset::min_height() const {
  int h = pairs_.front().hr.height;
  for (const ImagePair& p : pairs_) h = std::min(h, p.hr.height);
  return h;
}

absl::StatusOr<Batch> Dataset::batch(int64_t step, const BatchOptions& o) const {
  if (o.batch < 1) return absl::InvalidArgumentError(fmt::format("batch {} must be >= 1", o.batch));
  if (o.crop < 1 || o.crop > min_width() || o.crop > min_height()) {
    return absl::InvalidArgumentError(
        fmt::format("crop {} must be in [1, {}] (the smallest training image is {}x{})", o.crop,
                    std::min(min_width(), min_height()), min_width(), min_height()));
  }
  const std::optional<uint64_t> bytes = io::checked_product({2, o.batch, o.crop, o.crop, 4});
  const uint64_t limit = io::host_memory_limit_bytes();
  if (!bytes || *bytes > limit) {
    return absl::InvalidArgumentError(fmt::format(
        "batch {} of {}x{} patches: the lr and hr buffers need more than the {} of host memory",
        o.batch, o.crop, o.crop, format_bytes(limit)));
  }
  std::mt19937_64 gen(mix(o.seed) ^ mix(static_cast<uint64_t>(step) + 0x5eed));
  const size_t patch = static_cast<size_t>(o.crop) * o.crop;
  Batch b;
  b.lr.resize(patch * o.batch);
  b.hr.resize(patch * o.batch);
  for (int n = 0; n < o.batch; ++n) {
    PatchDraw d;
    d.image = static_cast<size_t>(uniform(gen, static_cast<int>(pairs_.size())));
    const ImagePair& p = pairs_[d.image];
    d.x = uniform(gen, p.hr.width - o.crop + 1);
    d.y = uniform(gen, p.hr.height - o.crop + 1);
    if (o.augment) {
      d.flip = uniform(gen, 2) == 1;
      d.rot = uniform(gen, 4);
    }
    copy_patch(p.lr_up, d, o.crop, b.lr.data() + patch * n);
    copy_patch(p.hr, d, o.crop, b.hr.data() + patch * n);
  }
  return b;
}

}  // namespace lms::vdsr
