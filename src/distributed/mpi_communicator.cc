// make_mpi_communicator, make_mpi_subset and MpiCommunicator (lms/distributed.h).
//
// Note [Staged all-reduce]: enqueue_all_reduce of the MPI engine is one host
// task on the device's StreamKind::kComm stream. The task takes one block of
// the device's pinned host pool: every tensor packed end to end (one fused
// buffer, so a step's gradients cost one exchange however many tensors there
// are), then the scratch the reduce-scatter receives into. It packs `in`,
// runs MpiEngine::all_reduce over the whole buffer, unpacks into `out` and
// returns the block. Fusing changes no bit: each element is still summed in
// rank order whichever chunk it falls in (Note [Deterministic all-reduce]).
// `out` may be `in`, since all of `in` is copied before `out` is written.
// Assumes the device's memory is host memory (the emulated CPU device,
// kind "cpu"), so staging is memcpy; a CUDA host function may not call CUDA,
// so CUDA devices use the NCCL engine. If the exchange fails with messages
// still in flight, the block stays allocated (Note [Abandoned messages]).
#include "distributed/mpi_communicator.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "distributed/communicator_checks.h"
#include "lms/device.h"
#include "lms/status.h"
#include "lms/strings.h"

namespace lms {
namespace distributed {
namespace {

// One gradient all-reduce, copied into the host task (Note [Staged all-reduce]).
struct StagedAllReduce {
  std::shared_ptr<MpiEngine> engine;
  Device* device;
  std::vector<const float*> in;
  std::vector<float*> out;
  std::vector<int64_t> counts;
  int64_t elements;
  float scale;
  std::string name;

  absl::Status run() const;
  void pack(float* flat) const;
  void unpack(const float* flat) const;
};

absl::Status StagedAllReduce::run() const {
  if (elements == 0) return absl::OkStatus();  // every rank has the same counts
  const int64_t scratch = engine->scratch_elements(elements);
  const uint64_t bytes = static_cast<uint64_t>(elements + scratch) * sizeof(float);
  absl::StatusOr<void*> block = device->allocate_host(bytes);
  if (!block.ok()) {
    return absl::Status(block.status().code(),
                        absl::StrCat("staging the all-reduce in ", bytes,
                                     " bytes of pinned host memory: ", block.status().message()));
  }
  float* flat = static_cast<float*>(*block);
  pack(flat);
  bool in_flight = false;
  absl::Status status = engine->all_reduce<float>({flat, static_cast<size_t>(elements)}, scale,
                                                  {flat + elements, static_cast<size_t>(scratch)},
                                                  Channel::kStream, name, in_flight);
  if (status.ok()) unpack(flat);
  if (!in_flight) device->deallocate_host(*block);
  return status;
}

void StagedAllReduce::pack(float* flat) const {
  for (size_t i = 0; i < in.size(); ++i) {
    if (counts[i] > 0) std::memcpy(flat, in[i], static_cast<size_t>(counts[i]) * sizeof(float));
    flat += counts[i];
  }
}

void StagedAllReduce::unpack(const float* flat) const {
  for (size_t i = 0; i < out.size(); ++i) {
    if (counts[i] > 0) std::memcpy(out[i], flat, static_cast<size_t>(counts[i]) * sizeof(float));
    flat += counts[i];
  }
}

}  // namespace

absl::Status MpiCommunicator::all_reduce_sum(std::span<double> values) {
  // Sent from a copy the engine can keep if the exchange fails (Note
  // [Abandoned messages]).
  const size_t n = values.size();
  auto buffer = std::make_shared<std::vector<double>>(
      n + static_cast<size_t>(engine_->scratch_elements(static_cast<int64_t>(n))));
  std::copy(values.begin(), values.end(), buffer->begin());
  bool in_flight = false;
  absl::Status status =
      engine_->all_reduce<double>(std::span(*buffer).first(n), 1.0, std::span(*buffer).subspan(n),
                                  Channel::kHost, "all_reduce_sum", in_flight);
  if (!status.ok()) {
    if (in_flight) engine_->keep(std::move(buffer));
    return status;
  }
  std::copy(buffer->begin(), buffer->begin() + static_cast<ptrdiff_t>(n), values.begin());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> MpiCommunicator::all_gather(std::string_view mine) {
  return engine_->all_gather(mine);
}

absl::Status MpiCommunicator::enqueue_all_reduce(Device& device, std::span<const float* const> in,
                                                 std::span<float* const> out,
                                                 std::span<const int64_t> counts, float scale,
                                                 std::string_view name) {
  LMS_ASSIGN_OR_RETURN(const int64_t elements, check_all_reduce_args(in, out, counts, scale, name));
  if (device.device_kind() != DeviceKind::kCpu) {
    return absl::UnimplementedError(absl::StrCat(
        "all-reduce '", to_absl(name),
        "': the MPI engine reads tensors as host memory, which device '", device.name(), "' (kind ",
        device.kind(), ") is not; use make_nccl_communicator for a CUDA device"));
  }
  StagedAllReduce task{engine_,
                       &device,
                       {in.begin(), in.end()},
                       {out.begin(), out.end()},
                       {counts.begin(), counts.end()},
                       elements,
                       scale,
                       std::string(name)};
  return device.enqueue_host_task(
      StreamKind::kComm, [task = std::move(task)] { return task.run(); }, name);
}

}  // namespace distributed

bool mpi_built() { return true; }

absl::StatusOr<std::unique_ptr<Communicator>> make_mpi_communicator(MpiOptions options) {
  LMS_RETURN_IF_ERROR(distributed::check_mpi_options(options, "make_mpi_communicator"));
  LMS_RETURN_IF_ERROR(distributed::ensure_mpi_initialized());
  LMS_ASSIGN_OR_RETURN(std::shared_ptr<distributed::MpiEngine> engine,
                       distributed::MpiEngine::create(MPI_COMM_WORLD, options));
  return std::unique_ptr<Communicator>(new distributed::MpiCommunicator(std::move(engine)));
}

absl::StatusOr<std::unique_ptr<Communicator>> make_mpi_subset(Communicator& world, int ranks) {
  auto* mpi = dynamic_cast<distributed::MpiCommunicator*>(&world);
  if (mpi == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("make_mpi_subset: the communicator is '", world.engine(), "', not 'mpi'"));
  }
  if (ranks < 1 || ranks > world.size()) {
    return absl::InvalidArgumentError(absl::StrCat("make_mpi_subset: ", ranks,
                                                   " ranks of a communicator of ", world.size(),
                                                   "; 1 to ", world.size()));
  }
  distributed::MpiEngine& engine = mpi->mpi_engine();
  LMS_ASSIGN_OR_RETURN(std::shared_ptr<distributed::MpiEngine> subset,
                       engine.split(ranks, engine.options()));
  if (subset == nullptr) return std::unique_ptr<Communicator>();
  return std::unique_ptr<Communicator>(new distributed::MpiCommunicator(std::move(subset)));
}

}  // namespace lms
