#include "run_setup.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "lms/autocast.h"
#include "lms/io/file_util.h"
#include "lms/profiler/chrome_trace.h"
#include "lms/profiler/memory_plot.h"
#include "lms/profiler/summary.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/units.h"

namespace lms::examples {

absl::StatusOr<std::unique_ptr<Device>> make_device(const DeviceOptions& run,
                                                    const LinkConfig& link) {
  if (run.device == "cuda") {
    // The emulated link options do not apply: the real PCIe/NVLink sets the pace.
    // Unimplemented (with the library's reason) when this build of lms has no
    // CUDA backend or the machine no GPU.
    auto device = make_cuda_device({.device_ordinal = run.cuda_ordinal,
                                    .capacity_bytes = run.capacity_bytes,
                                    .host_pool_bytes = run.host_pool_bytes});
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

absl::StatusOr<LmsConfig> load_lms_config(const std::string& file,
                                          const std::vector<std::string>& overrides) {
  LmsConfig cfg;
  if (!file.empty()) {
    LMS_ASSIGN_OR_RETURN(cfg, LmsConfig::from_file(file));
  }
  for (const std::string& kv : overrides) {
    absl::Status s = cfg.apply_override(kv);
    if (!s.ok())
      return absl::InvalidArgumentError(fmt::format("--lms-set {}: {}", kv, to_std(s.message())));
  }
  return cfg;
}

absl::Status apply_precision(Graph& forward, std::string_view precision) {
  if (precision == "fp32") return absl::OkStatus();
  if (precision == "bf16") return autocast(forward, {.dtype = DType::kBFloat16}).status();
  if (precision == "fp16") return autocast(forward, {.dtype = DType::kFloat16}).status();
  return absl::InvalidArgumentError(
      absl::StrCat("--precision '", to_absl(precision), "': allowed fp32, bf16, fp16"));
}

TrainingOptions precision_training_options(std::string_view precision) {
  TrainingOptions options;
  if (precision == "fp16") options.loss_scaling = LossScaling{};
  return options;
}

absl::Status write_losses(const std::string& path, const std::vector<double>& losses) {
  std::string text;
  for (double loss : losses) text += fmt::format("{:.9g}\n", loss);
  return io::write_file_atomically(path, reinterpret_cast<const uint8_t*>(text.data()),
                                   text.size());
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

absl::Status check_outputs(const std::string& checkpoint, const std::string& trace_dir) {
  if (!checkpoint.empty()) {
    absl::Status s = io::check_writable(checkpoint);
    if (!s.ok())
      return absl::Status(s.code(), fmt::format("--checkpoint: {}", to_std(s.message())));
  }
  if (!trace_dir.empty()) {
    absl::Status s = io::check_writable((std::filesystem::path(trace_dir) / "trace.json").string());
    if (!s.ok()) return absl::Status(s.code(), fmt::format("--trace: {}", to_std(s.message())));
  }
  return absl::OkStatus();
}

absl::Status check_resume(const io::Checkpoint& ck, const std::string& path,
                          const std::map<std::string, std::string>& meta, int64_t steps) {
  for (const auto& [key, want] : meta) {
    auto it = ck.meta.find(key);
    std::string have = it == ck.meta.end() ? "(missing)" : it->second;
    if (have != want) {
      return absl::FailedPreconditionError(fmt::format(
          "--resume: checkpoint '{}' was written with {}={}, this run has {}={}; resuming "
          "bit-exactly needs the same settings",
          path, key, have, key, want));
    }
  }
  if (ck.step >= steps) {
    return absl::FailedPreconditionError(
        fmt::format("--resume: checkpoint '{}' is at step {}, nothing to do for --steps {}", path,
                    ck.step, steps));
  }
  return absl::OkStatus();
}

absl::Status check_resumed_state(const Session& session, const io::Checkpoint& ck,
                                 const std::string& path) {
  const std::vector<std::string> names = session.persistent_tensors();
  for (const io::NamedTensor& t : ck.tensors) {
    if (std::find(names.begin(), names.end(), t.name) == names.end()) {
      return absl::FailedPreconditionError(fmt::format(
          "--resume: checkpoint '{}' holds tensor '{}', which this run's model does not have "
          "(the next save would drop it); resume with the settings it was written with",
          path, t.name));
    }
  }
  const io::NamedTensor* counter = ck.find("optimizer/step");
  if (counter != nullptr &&
      (counter->data.size() != 1 || counter->data[0] != static_cast<float>(ck.step))) {
    return absl::DataLossError(fmt::format(
        "--resume: checkpoint '{}' is at step {} but its optimizer/step counter is {}; the "
        "two are written together, so the file was changed after it was written",
        path, ck.step, counter->data.size() == 1 ? fmt::format("{}", counter->data[0]) : "empty"));
  }
  return absl::OkStatus();
}

absl::Status check_model_entry(const io::Checkpoint& ck, const std::string& path,
                               const std::string& model, const std::string& program) {
  auto it = ck.meta.find("model");
  if (it == ck.meta.end() || it->second != model) {
    return absl::DataLossError(fmt::format(
        "checkpoint '{}' has {}, not model={}: it was not written by {} train", path,
        it == ck.meta.end() ? std::string("no model entry in its meta") : "model=" + it->second,
        model, program));
  }
  return absl::OkStatus();
}

std::string data_identity(const std::string& dir) {
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(dir, ec);
  return ec ? dir : canonical.string();
}

absl::StatusOr<int64_t> resume_session(Session& session, const Graph& graph,
                                       const std::string& path,
                                       const std::map<std::string, std::string>& meta,
                                       int64_t steps) {
  LMS_ASSIGN_OR_RETURN(io::Checkpoint ck, io::load_usable_checkpoint(path));
  LMS_RETURN_IF_ERROR(check_resume(ck, path, meta, steps));
  LMS_RETURN_IF_ERROR(check_resumed_state(session, ck, path));
  LMS_RETURN_IF_ERROR(restore_session(session, graph, ck, /*parameters_only=*/false));
  return ck.step;
}

absl::Status write_trace_files(const Recorder& recorder, uint64_t capacity_bytes,
                               const std::string& dir, const std::string& series_label,
                               int64_t last_step, const std::string& title, std::ostream& log) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        fmt::format("--trace: cannot create '{}': {}", dir, ec.message()));
  }
  std::filesystem::path d(dir);
  LMS_RETURN_IF_ERROR(write_chrome_trace(recorder, {.device_capacity_bytes = capacity_bytes},
                                         (d / "trace.json").string()));
  MemorySeries series = device_series(recorder, series_label, last_step);
  LMS_RETURN_IF_ERROR(
      write_memory_svg({series}, capacity_bytes, (d / "memory.svg").string(), title));
  log << format_summary(summarize(recorder));
  log << fmt::format("trace: {}, {}\n", (d / "trace.json").string(), (d / "memory.svg").string());
  return absl::OkStatus();
}

std::string format_run_end(const RunEnd& e) {
  std::string out = fmt::format("peak device memory {} of {}\n", format_bytes(e.peak_device_bytes),
                                format_bytes(e.capacity_bytes));
  if (e.lms_report != nullptr && e.lms_report->enabled) {
    out += fmt::format("LMS {}: {} tensors swapped, {} out / {} in per step\n",
                       policy_name(e.lms_report->policy), e.lms_report->swapped.size(),
                       format_bytes(e.bytes_d2h_per_step), format_bytes(e.bytes_h2d_per_step));
  } else {
    out += "LMS off\n";
  }
  if (!e.checkpoint.empty())
    out += fmt::format("checkpoint: {} (step {})\n", e.checkpoint, e.last_step);
  return out;
}

}  // namespace lms::examples
