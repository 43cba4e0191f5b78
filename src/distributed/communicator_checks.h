// Argument checks both engines share (lms/distributed.h), so the MPI and the
// NCCL communicator refuse the same calls with the same status.
//
//   LMS_RETURN_IF_ERROR(check_mpi_options(options, "make_mpi_communicator"));
//   LMS_ASSIGN_OR_RETURN(int64_t elements, check_all_reduce_args(in, out, counts, scale, name));
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/distributed.h"

namespace lms::distributed {

// InvalidArgument for a timeout that is not positive and finite, or an
// abort grace that is negative or not finite.
absl::Status check_mpi_options(const MpiOptions& options, std::string_view caller);

// enqueue_all_reduce's arguments; returns the floats of all tensors together.
// InvalidArgument for spans of different lengths, a negative count, a null
// pointer with a positive count, a scale that is not finite, or counts whose
// bytes add up past int64.
absl::StatusOr<int64_t> check_all_reduce_args(std::span<const float* const> in,
                                              std::span<float* const> out,
                                              std::span<const int64_t> counts, float scale,
                                              std::string_view name);

}  // namespace lms::distributed
