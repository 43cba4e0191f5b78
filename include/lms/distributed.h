// Data-parallel training: one process per device, launched by mpirun, with
// the gradients averaged by all-reduce every step (the pattern of IBM DDL,
// Horovod and PyTorch DDP). Two engines, no home-made transport:
//  - MPI (OpenMPI) for the emulated CPU devices: each all-reduce is staged
//    through pinned host memory and runs as a host task on the device's
//    communication stream (StreamKind::kComm);
//  - NCCL for CUDA devices: ncclAllReduce on the communication stream, with
//    MPI only to hand out the NCCL unique id.
//
//   LMS_ASSIGN_OR_RETURN(auto comm, lms::make_mpi_communicator({}));
//   LMS_ASSIGN_OR_RETURN(lms::Graph train,
//                        lms::training_graph(g, loss, opt, {.data_parallel = lms::DataParallel{}}));
//   LMS_ASSIGN_OR_RETURN(auto session,
//                        lms::Session::create(train, *device, {.communicator = comm.get()}));
//   ... on any error: comm->abort(status);   // every rank ends, naming this one
//
// Note [Deterministic all-reduce]: the MPI engine sums in a fixed order. Each
// rank owns a contiguous chunk of the buffer; the chunks are exchanged
// (reduce-scatter), each owner adds the ranks' contributions in rank order
// 0, 1, ..., size-1 in float arithmetic, and the summed chunks
// are gathered back. So every rank holds the same bits, and a run repeats
// bit for bit. NCCL's ring all-reduce likewise gives every rank the same
// result for a fixed number of ranks and topology.
//
// Note [Failed ranks]: a collective that cannot finish never hangs.
//  - A rank that fails calls abort(status): every other rank's pending or
//    next collective returns Aborted "rank R failed: <status>", the ranks
//    wait (up to MpiOptions::abort_grace_s) until each has reported, and the
//    job ends through MPI_Abort with a non-zero exit status.
//  - A rank that dies (killed, crashed) is noticed by mpirun, which ends the
//    job and names the rank ("process rank R ... exited on signal 9").
//  - A rank that stops answering without dying: a collective that waits
//    longer than MpiOptions::timeout_s for a peer returns DeadlineExceeded
//    naming the ranks it still waits for.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lms {

class Device;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // 0 .. size()-1
  virtual int size() const = 0;
  virtual std::string engine() const = 0;  // "mpi", "nccl"

  // Blocking host collectives, for metrics and start-up checks. Every rank
  // must make the same calls in the same order.
  //
  // Sums `values` element-wise over the ranks in rank order (Note
  // [Deterministic all-reduce]); every rank gets the same bits.
  virtual absl::Status all_reduce_sum(std::span<double> values) = 0;
  // Every rank's `mine`, indexed by rank.
  virtual absl::StatusOr<std::vector<std::string>> all_gather(std::string_view mine) = 0;
  virtual absl::Status barrier() = 0;

  // The gradient all-reduce of an all_reduce node (used by the executor):
  // enqueues on `device`'s StreamKind::kComm stream, after what is already
  // there, out[i][k] = scale * sum over ranks (rank order) of in[i][k], for
  // k < counts[i] floats. `in` and `out` are device pointers that stay valid
  // until an event recorded on kComm after this call completes. Errors of
  // the exchange are async errors of the device (Device::synchronize()).
  // InvalidArgument at once for spans of different lengths; Unimplemented
  // for a device this engine cannot serve (MPI needs host tasks, NCCL a
  // CUDA device).
  virtual absl::Status enqueue_all_reduce(Device& device, std::span<const float* const> in,
                                          std::span<float* const> out,
                                          std::span<const int64_t> counts, float scale,
                                          std::string_view name) = 0;

  // Ends the job after a failure of this rank (Note [Failed ranks]): tells
  // every other rank why, waits for them to report, then terminates every
  // process with a non-zero status. Prints nothing itself; the caller prints
  // its error first.
  [[noreturn]] virtual void abort(const absl::Status& why) = 0;
};

// True when this process was started by mpirun / mpiexec (OpenMPI's or a
// PMI launcher's environment), that is, when make_mpi_communicator will see
// the other ranks.
bool launched_by_mpi();
bool mpi_built();   // this library was built with MPI
bool nccl_built();  // this library was built with NCCL (and CUDA)

struct MpiOptions {
  // A collective that waits longer than this for a peer fails with
  // DeadlineExceeded naming the ranks it waits for, seconds.
  double timeout_s = 300;
  // abort(): how long to wait for the other ranks to report before ending
  // the job, seconds.
  double abort_grace_s = 5;
};

// MPI_COMM_WORLD of this process (MPI_Init_thread with MPI_THREAD_MULTIPLE
// on first use; MPI_Finalize at exit). A process started without mpirun is
// a job of one rank. Errors: Unimplemented when built without MPI;
// FailedPrecondition when MPI offers less than MPI_THREAD_MULTIPLE;
// InvalidArgument for a non-positive or non-finite timeout.
absl::StatusOr<std::unique_ptr<Communicator>> make_mpi_communicator(MpiOptions options = {});

// A communicator of ranks 0 .. ranks-1 of `world` (MPI only), for running a
// smaller job inside a larger launch (lms-bench scaling). Collective over
// every rank of `world`; ranks outside the subset get nullptr.
// InvalidArgument unless 1 <= ranks <= world.size().
absl::StatusOr<std::unique_ptr<Communicator>> make_mpi_subset(Communicator& world, int ranks);

// NCCL over the CUDA `device` (which must outlive it), its unique id handed
// out by `bootstrap` (an MPI communicator of the same ranks). Errors:
// Unimplemented without NCCL or for a non-CUDA device; Internal for NCCL
// failures, with ncclGetErrorString.
absl::StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Device& device,
                                                                     Communicator& bootstrap,
                                                                     MpiOptions options = {});

}  // namespace lms
