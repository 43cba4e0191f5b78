#include "vdsr_data.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <utility>

#include "fmt/format.h"
#include "lms/status.h"

#if LMS_BENCH_HAVE_VDSR_DATA
#include "dataset.h"
#endif

namespace lms::bench {

#if LMS_BENCH_HAVE_VDSR_DATA

absl::StatusOr<VdsrBatchSource> load_vdsr_photos(const std::string& dir, uint64_t seed,
                                                 int64_t crop, std::vector<std::string>* warnings) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(fmt::format("--data: '{}' is not a folder", dir));
  }
  std::filesystem::path train = std::filesystem::path(dir) / "train";
  std::string folder = std::filesystem::is_directory(train, ec) ? train.string() : dir;
  const int min_side = static_cast<int>(std::clamp<int64_t>(crop, 0, INT32_MAX));
  absl::StatusOr<vdsr::Dataset> d =
      vdsr::Dataset::load(folder, {.scale = 2, .min_side = min_side}, warnings);
  if (!d.ok()) {
    return absl::Status(d.status().code(), fmt::format("--data {} (--crop {}): {}", dir, crop,
                                                       std::string(d.status().message())));
  }
  auto data = std::make_shared<const vdsr::Dataset>(*std::move(d));
  return VdsrBatchSource([data, seed](int64_t step, int64_t batch, int64_t crop,
                                      std::vector<float>* lr, std::vector<float>* hr) {
    vdsr::BatchOptions o{.batch = static_cast<int>(batch),
                         .crop = static_cast<int>(crop),
                         .seed = seed,
                         .augment = true};
    LMS_ASSIGN_OR_RETURN(vdsr::Batch b, data->batch(step, o));
    *lr = std::move(b.lr);
    *hr = std::move(b.hr);
    return absl::OkStatus();
  });
}

#else

absl::StatusOr<VdsrBatchSource> load_vdsr_photos(const std::string& dir, uint64_t, int64_t,
                                                 std::vector<std::string>*) {
  return absl::UnimplementedError(fmt::format(
      "--data {}: lms-bench was built without examples/vdsr (LMS_BUILD_EXAMPLES=OFF), so it "
      "cannot decode photos",
      dir));
}

#endif

}  // namespace lms::bench
