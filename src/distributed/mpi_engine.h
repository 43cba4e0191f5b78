// The MPI engine behind lms/distributed.h: point-to-point messages on
// duplicated communicators, every wait a polling loop that also watches for
// abort notices and a deadline (Note [Failed ranks]), and the collectives
// built on those messages (Note [Deterministic all-reduce]).
// all-reduce]). MpiCommunicator (the Communicator) and the NCCL engine's
// host side are thin layers over it.
//
//   LMS_RETURN_IF_ERROR(ensure_mpi_initialized());
//   LMS_ASSIGN_OR_RETURN(std::shared_ptr<MpiEngine> engine,
//                        MpiEngine::create(MPI_COMM_WORLD, options));
//   std::vector<double> v = {...}, scratch(engine->scratch_elements(v.size()));
//   bool in_flight = false;
//   LMS_RETURN_IF_ERROR(engine->all_reduce<double>(v, 1.0, scratch, Channel::kHost,
//                                                  "all_reduce_sum", in_flight));
//
// Note [Abandoned messages]: a collective that fails (an abort notice, its
// deadline) cancels the messages it still has in flight and waits up to
// kCancelWait for them to settle. A receive not yet matched is cancelled at
// once; OpenMPI does not cancel a send that has started, so a large send to a
// hung peer can stay pending. What has not settled is released with
// MPI_Request_free and the collective reports `in_flight`: its buffers must
// then stay allocated (the stream all-reduce does not return its staging
// block to the device's pool; host collectives hand theirs to keep()), since
// MPI may still read or write them. After any failure the engine is broken:
// the ranks' message sequences no longer match, so every later collective
// returns the first failure at once, and the program's way out is abort().
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lms/distributed.h"

namespace lms::distributed {

// MPI_Init_thread(MPI_THREAD_MULTIPLE) on the first call in the process, and
// MPI_Finalize at normal exit (a process that called abort() never returns
// to finalize). Later calls return the first call's status. FailedPrecondition
// when MPI provides less than MPI_THREAD_MULTIPLE; Internal when it fails.
absl::Status ensure_mpi_initialized();

// Each channel has its own tags, so a host collective and a stream
// all-reduce in flight at the same time never take each other's messages.
// Within a channel, operations run one at a time in call order.
enum class Channel { kStream, kHost };

// One step of a collective: the messages it posted, each with the rank at
// its other end and, for receives, the bytes it must bring.
struct Exchange {
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  std::vector<int64_t> expected_bytes;  // -1 for a send
  absl::Status posting;                 // the first MPI_Isend / MPI_Irecv that failed
};

class MpiEngine {
 public:
  // Duplicates `parent` into a data and a control communicator (collective
  // over `parent`). Internal for MPI errors.
  static absl::StatusOr<std::shared_ptr<MpiEngine>> create(MPI_Comm parent, MpiOptions options);
  // A new engine of ranks 0 .. ranks-1 (MPI_Comm_split of the data
  // communicator; collective over every rank here); nullptr on the others.
  absl::StatusOr<std::shared_ptr<MpiEngine>> split(int ranks, MpiOptions options);
  // Frees the communicators unless MPI is already finalized.
  ~MpiEngine();
  MpiEngine(const MpiEngine&) = delete;
  MpiEngine& operator=(const MpiEngine&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const MpiOptions& options() const { return options_; }

  // data[k] = scale * (c_0[k] + c_1[k] + ... + c_{size-1}[k]), summed in
  // that order in T, on every rank (Note [Deterministic all-reduce]).
  // `scratch` holds scratch_elements(data.size()) elements. `what` names the
  // operation in errors. On failure `in_flight` tells whether MPI may still
  // use `data` or `scratch` (Note [Abandoned messages]).
  template <typename T>
  absl::Status all_reduce(std::span<T> data, T scale, std::span<T> scratch, Channel channel,
                          std::string_view what, bool& in_flight);
  int64_t scratch_elements(int64_t elements) const;
  absl::StatusOr<std::vector<std::string>> all_gather(std::string_view mine);
  absl::Status barrier();
  [[noreturn]] void abort(const absl::Status& why);
  // Keeps `buffers` allocated until the engine is destroyed (Note
  // [Abandoned messages]).
  void keep(std::shared_ptr<void> buffers);

 private:
  MpiEngine(MPI_Comm data, MPI_Comm control, MpiOptions options);

  absl::Mutex& channel_mutex(Channel channel);
  // OK unless an earlier collective failed or a peer sent an abort notice.
  absl::Status check_usable();
  // Post one buffer in messages of at most kMaxMessageBytes; a failure to
  // post is kept in ex.posting for wait().
  void post_send(Exchange& ex, const void* data, int64_t bytes, int peer, int tag);
  void post_recv(Exchange& ex, void* data, int64_t bytes, int peer, int tag);
  // Polls `ex` to completion, watching for abort notices and the deadline.
  // On failure cancels what is left; `in_flight` as for all_reduce.
  absl::Status wait(Exchange& ex, std::string_view what, bool& in_flight);
  absl::Status failed_request(int err, const std::vector<MPI_Status>& statuses, int done);
  absl::Status check_received(const MPI_Status& status, int64_t expected, int peer,
                              std::string_view what);
  std::string pending_ranks(const Exchange& ex) const;
  // Abandons `ex` (Note [Abandoned messages]) and breaks the engine.
  absl::Status fail(Exchange& ex, absl::Status status, bool& in_flight);
  bool abandon(Exchange& ex);   // true when every message settled
  absl::Status poll_notices();  // Aborted once any peer has sent a notice
  bool all_peers_reported();

  MPI_Comm data_ = MPI_COMM_NULL;
  MPI_Comm control_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  MpiOptions options_;
  // The channel mutexes order the collectives on a communicator (one
  // stream all-reduce, one host collective at a time) and guard no member.
  absl::Mutex stream_mu_ ABSL_ACQUIRED_BEFORE(state_mu_);
  absl::Mutex host_mu_ ABSL_ACQUIRED_BEFORE(state_mu_);

  mutable absl::Mutex state_mu_;
  // reported_[r]: rank r sent an abort notice.
  std::vector<bool> reported_ ABSL_GUARDED_BY(state_mu_);
  // Aborted "rank R failed: ..." once one came.
  absl::Status first_notice_ ABSL_GUARDED_BY(state_mu_);
  absl::Status broken_ ABSL_GUARDED_BY(state_mu_);  // the first failure of a collective
  std::vector<std::shared_ptr<void>> kept_ ABSL_GUARDED_BY(state_mu_);
};

}  // namespace lms::distributed
