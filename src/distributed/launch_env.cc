// lms::launched_by_mpi (lms/distributed.h): built with or without MPI, so a
// program can tell a launch it cannot serve from a single process.
#include <cstdlib>

#include "lms/distributed.h"

namespace lms {

bool launched_by_mpi() {
  // OpenMPI's mpirun, a PMI launcher (MPICH's Hydra, Slurm's srun), PMIx.
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

}  // namespace lms
