#include "distributed/mpi_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/mutex.h"
#include "distributed/mpi_status.h"
#include "lms/status.h"
#include "lms/strings.h"

namespace lms::distributed {
namespace {

using Clock = std::chrono::steady_clock;

// The control communicator carries only abort notices, under this tag.
constexpr int kAbortTag = 1;
// MPI counts are int: a buffer goes out in messages of at most this many
// bytes (MPI keeps messages between two ranks with one tag in order).
constexpr int64_t kMaxMessageBytes = int64_t{1} << 30;
// Polling pace of every wait: poll without pause for kSpinFor (peers that
// are ready answer within microseconds; sched_yield would hand the core to
// any other runnable process for a whole time slice), then sleep between
// polls, from kFirstSleep doubling up to kLongestSleep, so a long wait
// leaves the cores to the ranks still computing.
constexpr auto kSpinFor = std::chrono::microseconds(200);
constexpr auto kFirstSleep = std::chrono::microseconds(10);
constexpr auto kLongestSleep = std::chrono::microseconds(1000);
// How long a failed collective waits for its cancelled messages to settle
// (Note [Abandoned messages]).
constexpr auto kCancelWait = std::chrono::milliseconds(200);

class Backoff {
 public:
  void pause() {
    if (Clock::now() - start_ < kSpinFor) return;
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(2 * sleep_, std::chrono::microseconds(kLongestSleep));
  }
  // A message arrived: the next may follow at once.
  void reset() { *this = Backoff(); }

 private:
  Clock::time_point start_ = Clock::now();
  std::chrono::microseconds sleep_ = kFirstSleep;
};

Clock::time_point deadline_after(double seconds) {
  constexpr double kForever_s = 1e9;  // about 30 years; keeps the tick count in range
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::min(seconds, kForever_s)));
}

// MPI_Finalize at normal exit for a process whose MPI this library started:
// a function-local static, destroyed after main returns, once main's
// communicators are gone. A job that aborted never gets here (MPI_Abort
// does not return).
class MpiFinalizer {
 public:
  ~MpiFinalizer() {
    int finalized = 0;
    if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
  }
};

absl::Status initialize_mpi() {
  int initialized = 0;
  LMS_RETURN_IF_ERROR(mpi_status(MPI_Initialized(&initialized), "MPI_Initialized"));
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    // The program started MPI itself, and finalizes it.
    LMS_RETURN_IF_ERROR(mpi_status(MPI_Query_thread(&provided), "MPI_Query_thread"));
  } else {
    LMS_RETURN_IF_ERROR(mpi_status(
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread"));
    [[maybe_unused]] static MpiFinalizer finalizer;
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    return absl::FailedPreconditionError(absl::StrCat(
        "MPI provides thread level ", provided, ", below MPI_THREAD_MULTIPLE (",
        MPI_THREAD_MULTIPLE,
        "): the all-reduce runs on the communication stream's thread while the host thread "
        "may call collectives; use an MPI built with thread support"));
  }
  return absl::OkStatus();
}

absl::StatusOr<MPI_Comm> duplicate(MPI_Comm parent) {
  MPI_Comm comm = MPI_COMM_NULL;
  LMS_RETURN_IF_ERROR(mpi_status(MPI_Comm_dup(parent, &comm), "MPI_Comm_dup"));
  LMS_RETURN_IF_ERROR(
      mpi_status(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
  return comm;
}

}  // namespace

absl::Status ensure_mpi_initialized() {
  static const absl::Status status = initialize_mpi();
  return status;
}

absl::StatusOr<std::shared_ptr<MpiEngine>> MpiEngine::create(MPI_Comm parent, MpiOptions options) {
  LMS_ASSIGN_OR_RETURN(MPI_Comm data, duplicate(parent));
  LMS_ASSIGN_OR_RETURN(MPI_Comm control, duplicate(parent));
  return std::shared_ptr<MpiEngine>(new MpiEngine(data, control, options));
}

MpiEngine::MpiEngine(MPI_Comm data, MPI_Comm control, MpiOptions options)
    : data_(data), control_(control), options_(options) {
  MPI_Comm_rank(data_, &rank_);
  MPI_Comm_size(data_, &size_);
  reported_.assign(static_cast<size_t>(size_), false);
}

MpiEngine::~MpiEngine() {
  int finalized = 0;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  MPI_Comm_free(&data_);
  MPI_Comm_free(&control_);
}

absl::StatusOr<std::shared_ptr<MpiEngine>> MpiEngine::split(int ranks, MpiOptions options) {
  // MPI_Comm_split blocks without a deadline; the barrier first finds a
  // failed or hung peer with one.
  LMS_RETURN_IF_ERROR(barrier());
  MutexLock lock(&host_mu_);
  MPI_Comm sub = MPI_COMM_NULL;
  LMS_RETURN_IF_ERROR(mpi_status(
      MPI_Comm_split(data_, rank_ < ranks ? 0 : MPI_UNDEFINED, rank_, &sub), "MPI_Comm_split"));
  if (sub == MPI_COMM_NULL) return std::shared_ptr<MpiEngine>();
  absl::StatusOr<std::shared_ptr<MpiEngine>> engine = create(sub, options);
  MPI_Comm_free(&sub);
  return engine;
}

absl::Mutex& MpiEngine::channel_mutex(Channel channel) {
  return channel == Channel::kStream ? stream_mu_ : host_mu_;
}

void MpiEngine::keep(std::shared_ptr<void> buffers) {
  MutexLock lock(&state_mu_);
  kept_.push_back(std::move(buffers));
}

void MpiEngine::post_send(Exchange& ex, const void* data, int64_t bytes, int peer, int tag) {
  const char* next = static_cast<const char*>(data);
  do {  // a zero-byte message too (the barrier's)
    const int piece = static_cast<int>(std::min(bytes, kMaxMessageBytes));
    MPI_Request request = MPI_REQUEST_NULL;
    const int err = MPI_Isend(next, piece, MPI_BYTE, peer, tag, data_, &request);
    if (err != MPI_SUCCESS) {
      if (ex.posting.ok()) ex.posting = mpi_status(err, "MPI_Isend");
      return;
    }
    ex.requests.push_back(request);
    ex.peers.push_back(peer);
    ex.expected_bytes.push_back(-1);
    next += piece;
    bytes -= piece;
  } while (bytes > 0);
}

void MpiEngine::post_recv(Exchange& ex, void* data, int64_t bytes, int peer, int tag) {
  char* next = static_cast<char*>(data);
  do {
    const int piece = static_cast<int>(std::min(bytes, kMaxMessageBytes));
    MPI_Request request = MPI_REQUEST_NULL;
    const int err = MPI_Irecv(next, piece, MPI_BYTE, peer, tag, data_, &request);
    if (err != MPI_SUCCESS) {
      if (ex.posting.ok()) ex.posting = mpi_status(err, "MPI_Irecv");
      return;
    }
    ex.requests.push_back(request);
    ex.peers.push_back(peer);
    ex.expected_bytes.push_back(piece);
    next += piece;
    bytes -= piece;
  } while (bytes > 0);
}

absl::Status MpiEngine::wait(Exchange& ex, std::string_view what, bool& in_flight) {
  in_flight = false;
  if (!ex.posting.ok()) return fail(ex, ex.posting, in_flight);
  const int n = static_cast<int>(ex.requests.size());
  std::vector<int> indices(ex.requests.size());
  std::vector<MPI_Status> statuses(ex.requests.size());
  const Clock::time_point deadline = deadline_after(options_.timeout_s);
  int pending = n;
  Backoff backoff;
  while (pending > 0) {
    int done = 0;
    const int err = MPI_Testsome(n, ex.requests.data(), &done, indices.data(), statuses.data());
    if (err != MPI_SUCCESS) return fail(ex, failed_request(err, statuses, done), in_flight);
    if (done == MPI_UNDEFINED) break;  // none active
    for (int i = 0; i < done; ++i) {
      const size_t k = static_cast<size_t>(indices[static_cast<size_t>(i)]);
      absl::Status received =
          check_received(statuses[static_cast<size_t>(i)], ex.expected_bytes[k], ex.peers[k], what);
      if (!received.ok()) return fail(ex, received, in_flight);
    }
    pending -= done;
    if (pending == 0) break;
    if (done > 0) backoff.reset();
    if (absl::Status notice = poll_notices(); !notice.ok()) return fail(ex, notice, in_flight);
    if (Clock::now() > deadline) {
      return fail(
          ex,
          absl::DeadlineExceededError(absl::StrCat(to_absl(what), ": waited ", options_.timeout_s,
                                                   " s for rank(s) ", pending_ranks(ex))),
          in_flight);
    }
    backoff.pause();
  }
  return absl::OkStatus();
}

// MPI_Testsome reports a failed request through MPI_ERR_IN_STATUS and the
// request's own status; name the peer and that error.
absl::Status MpiEngine::failed_request(int err, const std::vector<MPI_Status>& statuses, int done) {
  if (err != MPI_ERR_IN_STATUS) return mpi_status(err, "MPI_Testsome");
  for (int i = 0; i < done; ++i) {
    const MPI_Status& status = statuses[static_cast<size_t>(i)];
    if (status.MPI_ERROR != MPI_SUCCESS) {
      return mpi_status(status.MPI_ERROR, absl::StrCat("a message with rank ", status.MPI_SOURCE));
    }
  }
  return mpi_status(err, "MPI_Testsome");
}

absl::Status MpiEngine::check_received(const MPI_Status& status, int64_t expected, int peer,
                                       std::string_view what) {
  if (expected < 0) return absl::OkStatus();  // a send
  int bytes = 0;
  LMS_RETURN_IF_ERROR(mpi_status(MPI_Get_count(&status, MPI_BYTE, &bytes), "MPI_Get_count"));
  if (bytes == expected) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      to_absl(what), ": rank ", peer, " sent ", bytes, " bytes where ", expected,
      " were expected; the ranks called different collectives or passed different sizes"));
}

std::string MpiEngine::pending_ranks(const Exchange& ex) const {
  std::vector<int> ranks;
  for (size_t i = 0; i < ex.requests.size(); ++i) {
    if (ex.requests[i] != MPI_REQUEST_NULL) ranks.push_back(ex.peers[i]);
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return absl::StrJoin(ranks, ", ");
}

absl::Status MpiEngine::fail(Exchange& ex, absl::Status status, bool& in_flight) {
  in_flight = !abandon(ex);
  MutexLock lock(&state_mu_);
  if (broken_.ok()) broken_ = status;
  return status;
}

bool MpiEngine::abandon(Exchange& ex) {
  for (MPI_Request& request : ex.requests) {
    if (request != MPI_REQUEST_NULL) MPI_Cancel(&request);
  }
  const Clock::time_point deadline = Clock::now() + kCancelWait;
  Backoff backoff;
  while (true) {
    int settled = 0;
    if (MPI_Testall(static_cast<int>(ex.requests.size()), ex.requests.data(), &settled,
                    MPI_STATUSES_IGNORE) == MPI_SUCCESS &&
        settled) {
      return true;
    }
    if (Clock::now() > deadline) break;
    backoff.pause();
  }
  for (MPI_Request& request : ex.requests) {
    if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
  }
  return false;
}

absl::Status MpiEngine::check_usable() {
  {
    MutexLock lock(&state_mu_);
    LMS_RETURN_IF_ERROR(broken_);
  }
  return poll_notices();
}

absl::Status MpiEngine::poll_notices() {
  MutexLock lock(&state_mu_);
  while (true) {
    int found = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    if (MPI_Improbe(MPI_ANY_SOURCE, kAbortTag, control_, &found, &message, &status) !=
            MPI_SUCCESS ||
        !found) {
      break;
    }
    int length = 0;
    MPI_Get_count(&status, MPI_CHAR, &length);
    std::string text(static_cast<size_t>(std::max(length, 0)), '\0');
    MPI_Mrecv(text.data(), length, MPI_CHAR, &message, MPI_STATUS_IGNORE);
    reported_[static_cast<size_t>(status.MPI_SOURCE)] = true;
    if (first_notice_.ok()) {
      first_notice_ =
          absl::AbortedError(absl::StrCat("rank ", status.MPI_SOURCE, " failed: ", text));
    }
  }
  return first_notice_;
}

bool MpiEngine::all_peers_reported() {
  MutexLock lock(&state_mu_);
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && !reported_[static_cast<size_t>(r)]) return false;
  }
  return true;
}

void MpiEngine::abort(const absl::Status& why) {
  const std::string notice = why.ToString();
  std::vector<MPI_Request> sends;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(notice.data(), static_cast<int>(notice.size()), MPI_CHAR, peer, kAbortTag,
                  control_, &request) == MPI_SUCCESS) {
      sends.push_back(request);
    }
  }
  // Each peer sends its own notice once it has printed its error; MPI_Abort
  // before that could end it mid-sentence.
  const Clock::time_point deadline = deadline_after(options_.abort_grace_s);
  Backoff backoff;
  while (Clock::now() < deadline) {
    poll_notices().IgnoreError();  // only its record of who reported matters here
    if (all_peers_reported()) break;
    int sent = 0;  // MPI makes progress inside its calls
    MPI_Testall(static_cast<int>(sends.size()), sends.data(), &sent, MPI_STATUSES_IGNORE);
    backoff.pause();
  }
  std::fflush(nullptr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; never finalize after it
}

}  // namespace lms::distributed
