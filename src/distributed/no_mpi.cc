// The MPI factories of lms/distributed.h for builds without MPI (no MPI was
// found when the library was configured).
#include "lms/distributed.h"

namespace lms {
namespace {

absl::Status no_mpi(const char* what) {
  return absl::UnimplementedError(
      std::string(what) +
      ": this build of lms has no MPI (no MPI was found when it was configured; install "
      "libopenmpi-dev and openmpi-bin, scripts/install_deps.sh, and configure again)");
}

}  // namespace

bool mpi_built() { return false; }

absl::StatusOr<std::unique_ptr<Communicator>> make_mpi_communicator(MpiOptions) {
  return no_mpi("make_mpi_communicator");
}

absl::StatusOr<std::unique_ptr<Communicator>> make_mpi_subset(Communicator&, int) {
  return no_mpi("make_mpi_subset");
}

}  // namespace lms
