#include "setup.h"

#include <utility>
#include <vector>

#include "fmt/format.h"
#include "lms/status.h"

namespace lms::vdsr {

absl::StatusOr<std::unique_ptr<Device>> make_device(const RunOptions& run, const LinkConfig& link) {
  if (run.device == "cuda") {
    // The emulated link options do not apply: the real PCIe/NVLink sets the pace.
    // Unimplemented (with the library's reason) when this build of lms has no
    // CUDA backend or the machine no GPU.
    auto device = make_cuda_device(
        {.capacity_bytes = run.capacity_bytes, .host_pool_bytes = run.host_pool_bytes});
    if (!device.ok()) {
      return absl::Status(
          device.status().code(),
          fmt::format("--device cuda: {} (use --device cpu for the emulated device)",
                      std::string(device.status().message())));
    }
    return std::move(device).value();
  }
  if (run.device != "cpu") {
    return absl::InvalidArgumentError(
        fmt::format("--device: unknown device '{}' (allowed: cpu, cuda)", run.device));
  }
  return make_cpu_device({.capacity_bytes = run.capacity_bytes,
                          .host_pool_bytes = run.host_pool_bytes,
                          .d2h_bytes_per_s = link.d2h_bytes_per_s,
                          .h2d_bytes_per_s = link.h2d_bytes_per_s,
                          .copy_latency_s = link.copy_latency_s,
                          .compute_threads = run.threads});
}

absl::Status save_session(const Session& session, const Graph& graph, const std::string& path,
                          int64_t step, const std::map<std::string, std::string>& meta) {
  std::vector<io::NamedTensor> tensors;
  for (const std::string& name : session.persistent_tensors()) {
    LMS_ASSIGN_OR_RETURN(std::vector<float> values, session.read(name));
    const Tensor& t = graph.tensor(graph.find_tensor(name));
    tensors.push_back({name, t.shape, std::move(values)});
  }
  // A diverged state must not replace the last good checkpoint.
  absl::Status usable = io::validate_checkpoint_values(tensors, step, path);
  if (!usable.ok()) {
    return absl::Status(usable.code(),
                        fmt::format("not saving step {}: {}", step, std::string(usable.message())));
  }
  return io::save_checkpoint(path, tensors, step, meta);
}

absl::Status restore_session(Session& session, const Graph& graph, const io::Checkpoint& ck,
                             bool parameters_only) {
  for (const std::string& name : session.persistent_tensors()) {
    const Tensor& t = graph.tensor(graph.find_tensor(name));
    if (parameters_only && t.role != TensorRole::kParameter) continue;
    const io::NamedTensor* saved = ck.find(name);
    if (saved == nullptr) {
      return absl::DataLossError(
          fmt::format("checkpoint has no tensor '{}' ({})", name, role_name(t.role)));
    }
    if (saved->shape != t.shape) {
      return absl::DataLossError(
          fmt::format("checkpoint tensor '{}' has shape [{}], the model needs [{}]", name,
                      fmt::join(saved->shape, ","), fmt::join(t.shape, ",")));
    }
    LMS_RETURN_IF_ERROR(session.write(name, saved->data));
  }
  return absl::OkStatus();
}

}  // namespace lms::vdsr
