// VDSR training data: x2 bicubic super-resolution pairs on the Y channel, as
// Kim et al. (CVPR 2016) prepare them (generate_train.m): each photo is
// converted to Y (rgb2ycbcr), modcropped to the scale, degraded once as a
// whole (imresize down by 1/scale, then back up to the original size), and
// training patches are cut at the same position from the degraded and the
// original plane, with random flips and 90-degree rotations.
//
//   LMS_ASSIGN_OR_RETURN(vdsr::Dataset data, vdsr::Dataset::load("data/train", {.scale = 2}));
//   vdsr::Batch b = data.batch(/*step=*/0, {.batch = 16, .crop = 48, .seed = 1});
//   feeds["lr"] = b.lr;  feeds["hr"] = b.hr;   // NCHW [16, 1, 48, 48]
//
// Note [Batch determinism]: batch(step, ...) draws from a generator seeded
// by (seed, step) alone, so the batch of a step never depends on the batches
// drawn before it. Resuming from a checkpoint at step k therefore needs only
// k to reproduce the remaining batches bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/io/image_ops.h"

namespace lms::vdsr {

struct DatasetOptions {
  int scale = 2;       // super-resolution factor (>= 2)
  int max_images = 0;  // 0 = every image of the share
  int min_side = 0;    // the training crop: an image smaller on a side is unusable
  // This rank's share of a data-parallel run (Note [Data-parallel runs]):
  // the files i (0-based, in io::list_images order) with i % ranks ==
  // rank. 0 of 1: every file.
  int rank = 0;
  int ranks = 1;
};

// One training pair: the bicubic-degraded input and the original, same size.
struct ImagePair {
  std::string name;
  io::Plane lr_up;  // up(down(hr)): the network's input
  io::Plane hr;     // ground-truth Y
};

struct BatchOptions {
  int batch = 16;
  int crop = 48;  // square patch side in pixels
  uint64_t seed = 1;
  bool augment = true;  // random flips and rotations by multiples of 90 degrees
};

// NCHW float32 [batch, 1, crop, crop], ready to feed as "lr" and "hr".
struct Batch {
  std::vector<float> lr;
  std::vector<float> hr;
};

// Y plane of `image`, modcropped to `scale`, and its degraded copy
// up(down(y)) by resize_bicubic. InvalidArgument when the image is smaller
// than 2 * scale pixels on a side or scale < 2.
absl::StatusOr<ImagePair> make_pair(const io::Image& image, int scale);

class Dataset {
 public:
  // Decodes every PNG/JPEG of the share (options.rank, options.ranks) of
  // `dir` one at a time (files that do not decode are skipped with a line in
  // *warnings) and keeps only the two Y planes, the first max_images of them
  // when max_images > 0. Images smaller than min_side are kept (batch() then
  // reports the crop as too large, naming the smallest image) unless no
  // image is large enough. Errors: those of io::list_images;
  // InvalidArgument for scale < 2, max_images < 0, min_side < 0, a rank
  // outside [0, ranks), and a folder with fewer image files than ranks
  // (naming both counts); when no image of the share is usable, an error
  // listing every file of `dir` with its reason
  // (io::no_usable_image_message): NotFound when none decodes,
  // InvalidArgument when some decode but all are smaller than min_side.
  static absl::StatusOr<Dataset> load(const std::string& dir, const DatasetOptions& options,
                                      std::vector<std::string>* warnings = nullptr);
  // From pairs already made (tests). InvalidArgument when empty.
  static absl::StatusOr<Dataset> from_pairs(std::vector<ImagePair> pairs);

  // The batch of training step `step` (Note [Batch determinism]).
  // InvalidArgument for batch < 1, crop < 1, a crop larger than the
  // smallest image, or input buffers larger than the host memory limit
  // (io::host_memory_limit_bytes).
  absl::StatusOr<Batch> batch(int64_t step, const BatchOptions& options) const;

  const std::vector<ImagePair>& pairs() const { return pairs_; }
  int min_width() const;
  int min_height() const;

 private:
  explicit Dataset(std::vector<ImagePair> pairs) : pairs_(std::move(pairs)) {}
  std::vector<ImagePair> pairs_;
};

}  // namespace lms::vdsr
