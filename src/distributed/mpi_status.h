// MPI error codes as absl::Status. The engine's communicators return errors
// (MPI_ERRORS_RETURN) instead of aborting, and every call goes through this.
//
//   LMS_RETURN_IF_ERROR(mpi_status(MPI_Comm_dup(parent, &data), "MPI_Comm_dup"));
#pragma once

#include <mpi.h>

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lms/strings.h"

namespace lms::distributed {

// Internal "<what>: <MPI_Error_string>".
inline absl::Status mpi_status(int err, std::string_view what) {
  if (err == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(err, text, &length) != MPI_SUCCESS) length = 0;
  return absl::InternalError(absl::StrCat(to_absl(what), ": ",
                                          absl::string_view(text, static_cast<size_t>(length)),
                                          " (MPI error ", err, ")"));
}

}  // namespace lms::distributed
