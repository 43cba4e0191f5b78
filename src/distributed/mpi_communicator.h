// The MPI engine's Communicator (lms/distributed.h): host collectives and
// abort() go straight to the MpiEngine; the gradient all-reduce runs as a
// host task on the device's communication stream, staged through the
// device's pinned host pool (Note [Staged all-reduce]).
//
//   LMS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, make_mpi_communicator({}));
//   auto& mpi = static_cast<MpiCommunicator&>(*comm);   // the engine, for the NCCL bootstrap
//   LMS_ASSIGN_OR_RETURN(auto same_ranks, mpi.mpi_engine().split(comm->size(), options));
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "distributed/mpi_engine.h"
#include "lms/distributed.h"

namespace lms::distributed {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(std::shared_ptr<MpiEngine> engine) : engine_(std::move(engine)) {}

  int rank() const override { return engine_->rank(); }
  int size() const override { return engine_->size(); }
  std::string engine() const override { return "mpi"; }

  absl::Status all_reduce_sum(std::span<double> values) override;
  absl::StatusOr<std::vector<std::string>> all_gather(std::string_view mine) override;
  absl::Status barrier() override { return engine_->barrier(); }
  // Unimplemented for a device whose kind() is not "cpu": the host task
  // reads and writes `in` and `out` as host memory.
  absl::Status enqueue_all_reduce(Device& device, std::span<const float* const> in,
                                  std::span<float* const> out, std::span<const int64_t> counts,
                                  float scale, std::string_view name) override;
  [[noreturn]] void abort(const absl::Status& why) override { engine_->abort(why); }

  MpiEngine& mpi_engine() { return *engine_; }

 private:
  // Shared with the host tasks in flight, so a task never outlives the
  // communicators it sends on.
  std::shared_ptr<MpiEngine> engine_;
};

}  // namespace lms::distributed
