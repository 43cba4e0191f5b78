// make_nccl_communicator for builds without NCCL (lms/distributed.h): the
// CUDA backend, MPI or NCCL itself was not found when the library was
// configured.
#include "lms/distributed.h"

namespace lms {

bool nccl_built() { return false; }

absl::StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Device&, Communicator&,
                                                                     MpiOptions) {
  return absl::UnimplementedError(
      "make_nccl_communicator: this build of lms has no NCCL engine (it needs the CUDA backend, "
      "MPI and NCCL's nccl.h and libnccl at configure time); use make_mpi_communicator with the "
      "emulated CPU device");
}

}  // namespace lms
