// A two-rank MPI job for mpi_failure_test.cc, one failure per mode
// (Note [Failed ranks]):
//   mpirun -np 2 mpi_failure_probe smoke|fail|kill|hang
//   smoke  all-reduces, gathers and meets at a barrier; exits 0.
//   fail   rank 1 calls abort("injected failure") after one all-reduce; rank
//          0's next all-reduce (on its CPU device's comm stream) fails with
//          Aborted naming rank 1, which rank 0 prints before it aborts too.
//   kill   rank 1 raises SIGKILL after one all-reduce; mpirun ends the job.
//   hang   rank 1 sleeps after one all-reduce without dying; rank 0's next
//          all-reduce returns DeadlineExceeded after kHangTimeout_s naming
//          rank 1, which rank 0 prints before it aborts.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lms/device.h"
#include "lms/distributed.h"

namespace {

constexpr double kHangTimeout_s = 2;
constexpr double kAbortGrace_s = 2;
// Every other mode must end through an abort notice or mpirun, long before
// a collective would time out.
constexpr double kTimeout_s = 120;
constexpr auto kHangFor = std::chrono::seconds(120);

[[noreturn]] void fail_with(lms::Communicator& comm, const absl::Status& status) {
  std::fprintf(stderr, "rank %d: %s\n", comm.rank(), status.ToString().c_str());
  comm.abort(status);
  std::abort();  // not reached; GCC does not carry [[noreturn]] through a virtual call
}

absl::Status all_reduce_once(lms::Communicator& comm) {
  std::vector<double> v = {1.0 + comm.rank()};
  return comm.all_reduce_sum(v);
}

// The gradient path: one enqueued all-reduce, its error from synchronize().
absl::Status all_reduce_on_cpu(lms::Communicator& comm) {
  absl::StatusOr<std::unique_ptr<lms::Device>> device =
      lms::make_cpu_device({.capacity_bytes = 1 << 20, .host_pool_bytes = 1 << 20});
  if (!device.ok()) return device.status();
  absl::StatusOr<void*> grad = (*device)->allocate(64 * sizeof(float));
  if (!grad.ok()) return grad.status();
  std::vector<float> ones(64, 1.0f);
  if (absl::Status s = (*device)->upload(*grad, ones.data(), 64 * sizeof(float)); !s.ok()) {
    return s;
  }
  const float* in[] = {static_cast<const float*>(*grad)};
  float* out[] = {static_cast<float*>(*grad)};
  const int64_t counts[] = {64};
  if (absl::Status s = comm.enqueue_all_reduce(**device, in, out, counts, 0.5f, "grads"); !s.ok()) {
    return s;
  }
  return (*device)->synchronize();
}

int smoke(lms::Communicator& comm) {
  if (absl::Status s = all_reduce_once(comm); !s.ok()) fail_with(comm, s);
  if (absl::Status s = all_reduce_on_cpu(comm); !s.ok()) fail_with(comm, s);
  absl::StatusOr<std::vector<std::string>> names = comm.all_gather(std::to_string(comm.rank()));
  if (!names.ok()) fail_with(comm, names.status());
  if (absl::Status s = comm.barrier(); !s.ok()) fail_with(comm, s);
  std::printf("rank %d: smoke ok\n", comm.rank());
  return 0;
}

int fail_rank_1(lms::Communicator& comm, const std::string& mode) {
  if (absl::Status s = all_reduce_once(comm); !s.ok()) fail_with(comm, s);
  if (comm.rank() == 1) {
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "hang") std::this_thread::sleep_for(kHangFor);
    fail_with(comm, absl::InternalError("injected failure"));
  }
  absl::Status next = mode == "fail" ? all_reduce_on_cpu(comm) : all_reduce_once(comm);
  if (!next.ok()) fail_with(comm, next);
  std::printf("rank %d: the collective after rank 1's failure returned OK\n", comm.rank());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "smoke" && mode != "fail" && mode != "kill" && mode != "hang") {
    std::fprintf(stderr, "usage: mpirun -np 2 %s smoke|fail|kill|hang\n", argv[0]);
    return 2;
  }
  absl::StatusOr<std::unique_ptr<lms::Communicator>> comm = lms::make_mpi_communicator(
      {.timeout_s = mode == "hang" ? kHangTimeout_s : kTimeout_s, .abort_grace_s = kAbortGrace_s});
  if (!comm.ok()) {
    std::fprintf(stderr, "make_mpi_communicator: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  if ((*comm)->size() != 2) {
    std::fprintf(stderr, "run with two ranks, not %d\n", (*comm)->size());
    return 1;
  }
  return mode == "smoke" ? smoke(**comm) : fail_rank_1(**comm, mode);
}
