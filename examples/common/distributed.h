// Data-parallel training in the example programs: `vdsr train --distributed`
// and `unet3d train --distributed`, one process per device, started by
// mpirun (the communicator itself is lms/distributed.h).
//
//   LMS_ASSIGN_OR_RETURN(examples::Ranks ranks, examples::Ranks::join(opts.distributed));
//   std::ostream& log = ranks.root_log(std::cout);   // rank 0 prints, the others discard
//   LMS_RETURN_IF_ERROR(ranks.check_same("settings", settings_text));
//   ... the training graph with TrainingOptions::data_parallel when ranks.distributed()
//   LMS_RETURN_IF_ERROR(ranks.attach_device(*device));   // NCCL for a CUDA device
//   LMS_ASSIGN_OR_RETURN(PlanningFacts f, gather_facts(train, cfg, *device, ranks.communicator()));
//   LMS_ASSIGN_OR_RETURN(RewriteReport r, rewrite(train, cfg, *device, {}, f));
//   ... Session::create(train, *device, {.communicator = ranks.communicator()})
//   LMS_ASSIGN_OR_RETURN(double loss, ranks.mean(step_loss));
//   ... on any error: return ranks.fail(status);   // ends the job when there are peers
//
// Note [Data-parallel runs]: what `--distributed` means in both programs.
//  - Launch. mpirun starts one process per rank; each joins through
//    make_mpi_communicator. `--distributed` without mpirun is refused: the
//    program without the flag is the job of one rank, and a user who forgot
//    mpirun should not get a silent one-rank run.
//  - Data. Rank r of n trains on items r, r + n, r + 2n, ... of its training
//    set (`list[r::n]`, vdsr's images, unet3d's subjects when there are at
//    least n) and draws its own batches from rank_seed(seed, r), so a step
//    sees batch x n samples: the global batch. Weights start from `seed` on
//    every rank.
//  - Gradients. The training graph's all_reduce nodes average them over the
//    ranks (TrainingOptions::data_parallel), so every rank applies the same
//    update. `--scale-lr` multiplies the learning rate by n, the linear
//    scaling rule of Goyal et al. ("Accurate, Large Minibatch SGD", 2017,
//    section 2.1), without its warm-up.
//  - Agreement, checked at start. The run settings and the LMS config
//    (check_same), then by Session::create the graph, the LMS plan and the
//    initial values (Note [Rank agreement]). LMS plans from rank 0's
//    measured times on every rank (lms::gather_facts with the
//    communicator), so timing noise cannot make the plans differ.
//  - Outputs. Rank 0 alone prints progress and writes the checkpoint and
//    the trace; the other ranks' logs go to a null stream. Every loss or
//    metric printed is the mean over the ranks, the same bits on each. A
//    checkpoint write is followed by a barrier, so the file is complete when
//    any rank moves on; `--resume` loads it on every rank (a shared folder,
//    or a copy at the same path on each node).
//  - Failure. An error on any rank is printed to stderr as "rank R: error:
//    ..." and ends the whole job (Communicator::abort, Note [Failed ranks]):
//    the other ranks' next collective fails naming R, they print that, and
//    mpirun exits non-zero within the abort grace.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/config.h"
#include "lms/device.h"
#include "lms/distributed.h"
#include "lms/graph.h"
#include "lms/rewrite.h"
#include "lms/session.h"

namespace CLI {
class App;
}  // namespace CLI

namespace lms::examples {

struct DistributedOptions {
  bool enabled = false;         // --distributed: this process is one rank of an mpirun job
  bool scale_lr = false;        // --scale-lr: learning rate x ranks
  double comm_timeout_s = 300;  // --comm-timeout: a collective waiting longer fails, seconds
};

// Adds --distributed, --scale-lr and --comm-timeout to `app` (a command of
// an example program), under the heading "data-parallel".
void add_distributed_flags(CLI::App& app, DistributedOptions& options);
// InvalidArgument for --scale-lr without --distributed and for a
// --comm-timeout of 0.
absl::Status check_distributed(const DistributedOptions& options);

// Rank r's batch seed: `seed` itself for rank 0 (so one rank draws the
// batches of the single-process run), a SplitMix64 mix of both otherwise.
uint64_t rank_seed(uint64_t seed, int rank);

// The ranks of a run: rank 0 of 1 without --distributed.
class Ranks {
 public:
  // The single process.
  Ranks();

  // Joins the mpirun job when options.enabled, else the single process.
  // Errors: those of check_distributed; FailedPrecondition when
  // options.enabled but this process was not started by mpirun;
  // InvalidArgument for a malformed fault-injection variable (below); those
  // of make_mpi_communicator (Unimplemented when lms was built without MPI).
  static absl::StatusOr<Ranks> join(const DistributedOptions& options);

  bool distributed() const { return comm_ != nullptr; }
  int rank() const { return comm_ == nullptr ? 0 : comm_->rank(); }
  int size() const { return comm_ == nullptr ? 1 : comm_->size(); }
  bool is_root() const { return rank() == 0; }
  // The communicator for SessionOptions::communicator; null for the single
  // process.
  Communicator* communicator() const { return comm_; }
  // The GPU of this rank: its index among the ranks on this node (mpirun's
  // OMPI_COMM_WORLD_LOCAL_RANK, MPICH's MPI_LOCALRANKID, Slurm's
  // SLURM_LOCALID), 0 when none is set.
  int local_rank() const { return local_rank_; }

  // `log` on rank 0; a stream that discards everything on the others.
  std::ostream& root_log(std::ostream& log) const;
  // "warning: <text>" to `log` on rank 0, "rank R: warning: <text>" to
  // stderr on the others (whose log is discarded).
  void warn(std::ostream& log, std::string_view text) const;
  // lr x size() when `scale` (--scale-lr), else lr.
  double learning_rate(double lr, bool scale) const;

  // For a CUDA device: the NCCL communicator over this job's MPI one
  // (make_nccl_communicator), which communicator() returns from then on.
  // Nothing for other devices or the single process. Errors of
  // make_nccl_communicator.
  absl::Status attach_device(Device& device);
  // Ends what attach_device began, before the device goes: the NCCL
  // communicator must not outlive its device.
  void detach_device();

  // The mean of `value` over the ranks: the same bits on every rank (Note
  // [Deterministic all-reduce]). `value` itself for the single process.
  absl::StatusOr<double> mean(double value);
  // The sum of `value` over the ranks.
  absl::StatusOr<double> sum(double value);
  // FailedPrecondition "<what> differ across ranks: rank R has 'line' where
  // rank 0 has 'line'" (the first differing line of each rank that differs)
  // unless every rank passed the same `text`.
  absl::Status check_same(std::string_view what, const std::string& text);
  // check_same of the "key=value" lines of `settings` (a run's checkpoint
  // meta: what a resume must agree on, the ranks must too).
  absl::Status check_same_settings(const std::map<std::string, std::string>& settings);
  // Rank 0's `text` on every rank (the others' argument is ignored).
  absl::StatusOr<std::string> from_root(const std::string& text);
  absl::Status barrier();

  // The end of a run that failed with `error`. With peers: prints "rank R:
  // error: <message>" to stderr and ends the job on every rank
  // (Communicator::abort); does not return. Alone (the single process or a
  // job of one rank): returns `error` for the caller to report.
  absl::Status fail(const absl::Status& error);

  // Fault injection for tests only: the environment variable
  // LMS_EXAMPLES_INJECT_FAULT="RANK:STEP:MODE" acts on rank RANK when this
  // is called for STEP. MODE fail: returns Internal "injected fault at step
  // STEP"; kill: raises SIGKILL (a rank that dies); hang: sleeps for an hour
  // (a rank that stops answering). Read by join() with --distributed only;
  // OK everywhere else.
  absl::Status inject_fault(int64_t step) const;

 private:
  struct Fault {
    int rank = -1;  // -1: none
    int64_t step = 0;
    std::string mode;  // "fail", "kill", "hang"
  };
  static absl::StatusOr<Fault> fault_from_environment();

  std::unique_ptr<Communicator> mpi_;   // the job's MPI communicator
  std::unique_ptr<Communicator> nccl_;  // over mpi_, for a CUDA device
  Communicator* comm_ = nullptr;        // the one in use: nccl_ when set, else mpi_
  MpiOptions mpi_options_;
  int local_rank_ = 0;
  Fault fault_;
  std::unique_ptr<std::ostream> null_log_;
};

// "data parallel: 4 ranks (mpi), global batch 64 (16 per rank), lr 0.004
// (--scale-lr: 0.001 x 4)" and a newline for a log; empty for the single
// process. `lr` is the rate before scaling.
std::string data_parallel_summary(const Ranks& ranks, int64_t batch_per_rank, double lr,
                                  bool scale_lr);

// Rank 0 saves the session (save_session in run_setup.h), then every rank
// waits at a barrier, so the file is complete before any rank goes on (and
// may later --resume from it). Errors of save_session (rank 0) and of the
// barrier.
absl::Status save_on_root(Ranks& ranks, const Session& session, const Graph& graph,
                          const std::string& path, int64_t step,
                          const std::map<std::string, std::string>& meta);

}  // namespace lms::examples
