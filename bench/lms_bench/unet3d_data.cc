#include "unet3d_data.h"

#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "lms/status.h"

#if LMS_BENCH_HAVE_UNET3D_DATA
#include "brain_task.h"
#include "mri_data.h"
#endif

namespace lms::bench {

#if LMS_BENCH_HAVE_UNET3D_DATA

static_assert(kMriClasses == unet3d::kBrainClasses);

namespace {

// The full-resolution pair and its cube grids, one per crop side.
struct MriVolumes {
  unet3d::BrainPair full;
  int64_t levels = 1;
  std::mutex mu;
  std::map<int64_t, std::shared_ptr<const unet3d::BrainPair>> cubes;  // by crop side

  absl::StatusOr<std::shared_ptr<const unet3d::BrainPair>> cube(int64_t size) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cubes.find(size);
    if (it != cubes.end()) return it->second;
    const int64_t side = unet3d::grid_side(size, levels);
    if (side < 1) {
      return absl::InvalidArgumentError(fmt::format("MRI crops: size {} out of range", size));
    }
    LMS_ASSIGN_OR_RETURN(unet3d::BrainPair grid, unet3d::to_cube(full, side));
    auto shared = std::make_shared<const unet3d::BrainPair>(std::move(grid));
    cubes.emplace(size, shared);
    return shared;
  }
};

}  // namespace

absl::StatusOr<Unet3dBatchSource> load_mri_volumes(const std::string& dir, uint64_t seed,
                                                   int64_t levels) {
  if (levels < 1 || levels > 32) {
    return absl::InvalidArgumentError(fmt::format("MRI crops: levels {} outside 1..32", levels));
  }
  auto volumes = std::make_shared<MriVolumes>();
  volumes->levels = levels;
  LMS_ASSIGN_OR_RETURN(volumes->full, unet3d::load_brain(dir, kMriImageFile));
  return Unet3dBatchSource([volumes, seed](int64_t step, int64_t size, std::vector<float>* image,
                                           std::vector<float>* labels) -> absl::Status {
    LMS_ASSIGN_OR_RETURN(std::shared_ptr<const unet3d::BrainPair> grid, volumes->cube(size));
    const unet3d::BatchOptions o{.crop = size,
                                 .batch = 1,
                                 .flips = true,
                                 .intensity_jitter = 0.1,
                                 .max_rotation_deg = 10,
                                 .max_scaling = 0.1};
    return unet3d::make_batch(*grid, o, seed, step, image, labels);
  });
}

int64_t unet_grid_side(int64_t size, int64_t levels) { return unet3d::grid_side(size, levels); }

#else

int64_t unet_grid_side(int64_t, int64_t) { return 0; }

absl::StatusOr<Unet3dBatchSource> load_mri_volumes(const std::string& dir, uint64_t, int64_t) {
  return absl::UnimplementedError(fmt::format(
      "--data {}: lms-bench was built without examples/unet3d (LMS_BUILD_EXAMPLES=OFF), so it "
      "cannot read the MRI volumes",
      dir));
}

#endif

}  // namespace lms::bench
