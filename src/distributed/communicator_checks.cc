#include "distributed/communicator_checks.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "lms/checked.h"
#include "lms/strings.h"

namespace lms::distributed {

absl::Status check_mpi_options(const MpiOptions& options, std::string_view caller) {
  if (!std::isfinite(options.timeout_s) || options.timeout_s <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(to_absl(caller), ": MpiOptions::timeout_s is ",
                                                   options.timeout_s,
                                                   "; it must be positive, seconds"));
  }
  if (!std::isfinite(options.abort_grace_s) || options.abort_grace_s < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(to_absl(caller), ": MpiOptions::abort_grace_s is ", options.abort_grace_s,
                     "; it must be zero or more, seconds"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> check_all_reduce_args(std::span<const float* const> in,
                                              std::span<float* const> out,
                                              std::span<const int64_t> counts, float scale,
                                              std::string_view name) {
  if (in.size() != out.size() || in.size() != counts.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-reduce '", to_absl(name), "': ", in.size(), " inputs, ", out.size(),
                     " outputs and ", counts.size(), " counts; one of each per tensor"));
  }
  if (!std::isfinite(scale)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-reduce '", to_absl(name), "': the scale is ", scale, "; it must be finite"));
  }
  // Staged as one buffer of floats, so the bytes must fit int64 too.
  Checked<int64_t> elements = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("all-reduce '", to_absl(name), "': tensor ", i, " has count ", counts[i]));
    }
    if (counts[i] > 0 && (in[i] == nullptr || out[i] == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat("all-reduce '", to_absl(name), "': tensor ", i,
                                                     " of ", counts[i],
                                                     " floats has a null pointer"));
    }
    elements = elements + counts[i];
  }
  if (!(elements * int64_t{sizeof(float)}).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-reduce '", to_absl(name), "': the counts add up past 2^63 bytes"));
  }
  return elements.value();
}

}  // namespace lms::distributed
