#include "example_flags.h"

namespace lms::examples {

void add_device_flags(CLI::App& app, std::string* device, uint64_t* capacity_bytes,
                      uint64_t* host_pool_bytes, int* threads) {
  flags::add_choice(app, "--device", device,
                    "cpu: the emulated device; cuda: a GPU (needs the CUDA backend and a device)",
                    {"cpu", "cuda"});
  flags::add_bytes(app, "--capacity", capacity_bytes, "device memory, e.g. 256MiB");
  flags::add_bytes(app, "--host-memory", host_pool_bytes, "pinned host pool limit");
  flags::add_int(app, "--threads", threads, "compute threads, 0 = all cores",
                 {.max = flags::kMaxThreads});
}

void add_device_flags(CLI::App& app, DeviceOptions& options) {
  add_device_flags(app, &options.device, &options.capacity_bytes, &options.host_pool_bytes,
                   &options.threads);
}

void add_lms_flags(CLI::App& app, std::string* file, std::vector<std::string>* overrides) {
  flags::add_string(app, "--lms FILE.toml", file, "enable Large Model Support with this config");
  flags::add_strings(app, "--lms-set KEY=VALUE", overrides,
                     "override a config key (repeatable; enables LMS)");
}

void add_precision_flag(CLI::App& app, std::string* precision) {
  flags::add_choice(app, "--precision", precision,
                    "fp32; bf16 or fp16 (with loss scaling): mixed precision as\n"
                    "torch.autocast, float32 master weights",
                    {"fp32", "bf16", "fp16"});
}

absl::Status check_output_flags(const std::string& checkpoint, bool resume,
                                int64_t checkpoint_every) {
  if (resume && checkpoint.empty()) {
    return absl::InvalidArgumentError("--resume needs --checkpoint PATH to resume from");
  }
  if (checkpoint_every > 0 && checkpoint.empty()) {
    return absl::InvalidArgumentError("--checkpoint-every needs --checkpoint PATH to write to");
  }
  return absl::OkStatus();
}

}  // namespace lms::examples
