// make_nccl_communicator (lms/distributed.h): ncclAllReduce on the CUDA
// device's communication stream. MPI only hands out NCCL's unique id and
// carries the host collectives and abort(), through an MPI engine of the same
// ranks split off the bootstrap communicator (so the bootstrap may go away).
//
// Note [NCCL scale]: scale == 1 is ncclSum; any other scale is a premultiplied
// sum (ncclRedOpCreatePreMulSum with the scale as a host immediate), out =
// sum over ranks of scale * in_r, so the scale costs no kernel and no second
// pass over the gradients. That equals scale * sum of in_r up to rounding (each
// product is rounded before the sum); a single rank gets exactly scale * in.
// NCCL sums in its ring's order: every rank gets the same bits, but not the
// bits of the MPI engine's rank-order sum.
//
// Limits: NCCL's own waits have no deadline, so a peer that hangs inside an
// all-reduce stalls this rank's comm stream (MpiOptions::timeout_s bounds
// the host collectives only), and ncclCommInitRank blocks until every rank
// has joined.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_status.h"
#include "distributed/communicator_checks.h"
#include "distributed/mpi_communicator.h"
#include "lms/status.h"
#include "lms/strings.h"

namespace lms {
namespace distributed {
namespace {

// Internal "<what>: <ncclGetErrorString> (<ncclGetLastError>)".
absl::Status nccl_status(ncclResult_t result, std::string_view what, ncclComm_t comm = nullptr) {
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(to_absl(what), ": ", ncclGetErrorString(result), " (",
                                          ncclGetLastError(comm), ")"));
}

class NcclCommunicator final : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<Communicator>> create(cuda::CudaDevice& device,
                                                              MpiCommunicator& bootstrap,
                                                              MpiOptions options);
  ~NcclCommunicator() override;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string engine() const override { return "nccl"; }

  absl::Status all_reduce_sum(std::span<double> values) override {
    return host_->all_reduce_sum(values);
  }
  absl::StatusOr<std::vector<std::string>> all_gather(std::string_view mine) override {
    return host_->all_gather(mine);
  }
  absl::Status barrier() override { return host_->barrier(); }
  absl::Status enqueue_all_reduce(Device& device, std::span<const float* const> in,
                                  std::span<float* const> out, std::span<const int64_t> counts,
                                  float scale, std::string_view name) override;
  [[noreturn]] void abort(const absl::Status& why) override;

 private:
  NcclCommunicator(cuda::CudaDevice& device, std::unique_ptr<MpiCommunicator> host)
      : device_(device), host_(std::move(host)) {}
  absl::Status init_comm();
  absl::StatusOr<ncclUniqueId> share_unique_id();
  absl::Status bind() const;

  cuda::CudaDevice& device_;
  std::unique_ptr<MpiCommunicator> host_;
  ncclComm_t comm_ = nullptr;
};

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::create(cuda::CudaDevice& device,
                                                                       MpiCommunicator& bootstrap,
                                                                       MpiOptions options) {
  LMS_ASSIGN_OR_RETURN(std::shared_ptr<MpiEngine> engine,
                       bootstrap.mpi_engine().split(bootstrap.size(), options));
  std::unique_ptr<NcclCommunicator> comm(
      new NcclCommunicator(device, std::make_unique<MpiCommunicator>(std::move(engine))));
  LMS_RETURN_IF_ERROR(comm->init_comm());
  return std::unique_ptr<Communicator>(std::move(comm));
}

absl::Status NcclCommunicator::bind() const {
  return cuda::cuda_status(cudaSetDevice(device_.options().device_ordinal), "cudaSetDevice");
}

// Rank 0 creates the id and every rank takes it from an all_gather; an empty
// entry from rank 0 says it could not, so no rank waits for one.
absl::StatusOr<ncclUniqueId> NcclCommunicator::share_unique_id() {
  ncclUniqueId id;
  std::string mine;
  absl::Status created = absl::OkStatus();
  if (rank() == 0) {
    created = nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (created.ok()) mine.assign(reinterpret_cast<const char*>(&id), sizeof(id));
  }
  LMS_ASSIGN_OR_RETURN(std::vector<std::string> ids, host_->all_gather(mine));
  LMS_RETURN_IF_ERROR(created);
  if (ids[0].size() != sizeof(id)) {
    return absl::InternalError("make_nccl_communicator: rank 0 could not create the NCCL id");
  }
  std::memcpy(&id, ids[0].data(), sizeof(id));
  return id;
}

absl::Status NcclCommunicator::init_comm() {
  LMS_RETURN_IF_ERROR(bind());
  LMS_ASSIGN_OR_RETURN(ncclUniqueId id, share_unique_id());
  return nccl_status(ncclCommInitRank(&comm_, size(), id, rank()), "ncclCommInitRank");
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  bind().IgnoreError();
  ncclCommFinalize(comm_);  // flushes what was issued
  ncclCommDestroy(comm_);
}

absl::Status NcclCommunicator::enqueue_all_reduce(Device& device, std::span<const float* const> in,
                                                  std::span<float* const> out,
                                                  std::span<const int64_t> counts, float scale,
                                                  std::string_view name) {
  LMS_RETURN_IF_ERROR(check_all_reduce_args(in, out, counts, scale, name).status());
  if (dynamic_cast<cuda::CudaDevice*>(&device) == nullptr) {
    return absl::UnimplementedError(absl::StrCat("all-reduce '", to_absl(name), "': device '",
                                                 device.name(),
                                                 "' is not a CUDA device, which NCCL needs"));
  }
  if (&device != &device_) {
    return absl::InvalidArgumentError(absl::StrCat("all-reduce '", to_absl(name),
                                                   "': the NCCL communicator serves device '",
                                                   device_.name(), "', not '", device.name(), "'"));
  }
  LMS_RETURN_IF_ERROR(bind());
  ncclRedOp_t op = ncclSum;  // Note [NCCL scale]
  if (scale != 1.0f) {
    LMS_RETURN_IF_ERROR(nccl_status(
        ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat, ncclScalarHostImmediate, comm_),
        "ncclRedOpCreatePreMulSum", comm_));
  }
  const cudaStream_t stream = device_.stream(StreamKind::kComm);
  absl::Status status = nccl_status(ncclGroupStart(), "ncclGroupStart", comm_);
  for (size_t i = 0; status.ok() && i < counts.size(); ++i) {
    if (counts[i] == 0) continue;
    status = nccl_status(
        ncclAllReduce(in[i], out[i], static_cast<size_t>(counts[i]), ncclFloat, op, comm_, stream),
        absl::StrCat("ncclAllReduce of '", to_absl(name), "' tensor ", i), comm_);
  }
  // A group once started must end, even after a failed call inside it.
  const absl::Status ended = nccl_status(ncclGroupEnd(), "ncclGroupEnd", comm_);
  if (status.ok()) status = ended;
  // An operator may be destroyed once the last call using it has returned.
  if (op != ncclSum) ncclRedOpDestroy(op, comm_);
  return status;
}

void NcclCommunicator::abort(const absl::Status& why) {
  if (comm_ != nullptr) ncclCommAbort(comm_);  // ends NCCL work in flight
  comm_ = nullptr;
  host_->abort(why);
}

}  // namespace
}  // namespace distributed

bool nccl_built() { return true; }

absl::StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Device& device,
                                                                     Communicator& bootstrap,
                                                                     MpiOptions options) {
  LMS_RETURN_IF_ERROR(distributed::check_mpi_options(options, "make_nccl_communicator"));
  auto* cuda_device = dynamic_cast<cuda::CudaDevice*>(&device);
  if (cuda_device == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("make_nccl_communicator: device '", device.name(),
                     "' is not a CUDA device; use make_mpi_communicator's all-reduce for it"));
  }
  auto* mpi = dynamic_cast<distributed::MpiCommunicator*>(&bootstrap);
  if (mpi == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("make_nccl_communicator: the bootstrap communicator is '", bootstrap.engine(),
                     "'; an MPI communicator of the same ranks is needed"));
  }
  return distributed::NcclCommunicator::create(*cuda_device, *mpi, options);
}

}  // namespace lms
