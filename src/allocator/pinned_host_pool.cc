#include "allocator/pinned_host_pool.h"

#include <utility>

#include "lms/status.h"

namespace lms {

absl::StatusOr<std::unique_ptr<PinnedHostPool>> PinnedHostPool::create(Options options) {
  return create(options, std::make_unique<HostSubAllocator>());
}

absl::StatusOr<std::unique_ptr<PinnedHostPool>> PinnedHostPool::create(
    Options options, std::unique_ptr<SubAllocator> sub) {
  const SubAllocator* sub_view = sub.get();
  BfcAllocator::Options bfc_options;
  bfc_options.capacity_bytes = options.limit_bytes;
  bfc_options.alignment = options.alignment;
  bfc_options.name = "pinned host";
  bfc_options.oom_hint =
      "Raise host_memory_limit, swap fewer tensors (a higher swapout_threshold or "
      "min_tensor_bytes), or reduce the batch size.";
  LMS_ASSIGN_OR_RETURN(std::unique_ptr<BfcAllocator> bfc,
                       BfcAllocator::create(std::move(sub), std::move(bfc_options)));
  // The region exists now, so the sub-allocator knows whether it is locked.
  const bool locked = sub_view != nullptr && sub_view->pages_locked();
  return std::unique_ptr<PinnedHostPool>(new PinnedHostPool(options, locked, std::move(bfc)));
}

}  // namespace lms
