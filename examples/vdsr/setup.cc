#include "setup.h"

namespace lms::vdsr {

absl::StatusOr<std::unique_ptr<Device>> make_device(const RunOptions& run, const LinkConfig& link,
                                                    int cuda_ordinal) {
  return examples::make_device({.device = run.device,
                                .capacity_bytes = run.capacity_bytes,
                                .host_pool_bytes = run.host_pool_bytes,
                                .threads = run.threads,
                                .cuda_ordinal = cuda_ordinal},
                               link);
}

}  // namespace lms::vdsr
