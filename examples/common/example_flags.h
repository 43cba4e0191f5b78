// The flags the example programs share (flags.h adds them to a CLI11
// command): the device (what make_device takes), the LMS config (what
// load_lms_config takes) and the outputs of a training run.
//
//   CLI::App* train = app.add_subcommand("train", "...");
//   examples::add_device_flags(*train, options.device);
//   examples::add_lms_flags(*train, &options.lms_config, &options.lms_overrides);
//   examples::add_output_flags(*train, options);
//   ... after parsing: LMS_RETURN_IF_ERROR(examples::check_output_flags(options));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flags.h"
#include "run_setup.h"

namespace lms::examples {

// --device cpu|cuda, --capacity BYTES, --host-memory BYTES, --threads N.
void add_device_flags(CLI::App& app, std::string* device, uint64_t* capacity_bytes,
                      uint64_t* host_pool_bytes, int* threads);
void add_device_flags(CLI::App& app, DeviceOptions& options);

// --lms FILE.toml and --lms-set KEY=VALUE (repeatable).
void add_lms_flags(CLI::App& app, std::string* file, std::vector<std::string>* overrides);

// --checkpoint PATH, --checkpoint-every N, --resume, --trace DIR and
// --log-every N into the members of those names (trace_dir for --trace) of
// a training command's options.
template <typename Options>
void add_output_flags(CLI::App& app, Options& o) {
  flags::add_string(app, "--checkpoint PATH", &o.checkpoint,
                    "write weights + optimizer state here (atomically)");
  flags::add_int(app, "--checkpoint-every", &o.checkpoint_every,
                 "also every N steps (0: only at the end)");
  flags::add_switch(app, "--resume", &o.resume, "continue bit-exactly from --checkpoint");
  flags::add_string(app, "--trace DIR", &o.trace_dir,
                    "write DIR/trace.json, DIR/memory.svg and a summary");
  flags::add_int(app, "--log-every", &o.log_every, "progress line every N steps", {.min = 1});
}

// --precision fp32|bf16|fp16: the dtype the model computes in.
void add_precision_flag(CLI::App& app, std::string* precision);

// The flags of a program training an imported model (digits, textlm):
// --capacity, --lms, --lms-set, --threads, --seed, --log-every and
// --precision into the members capacity_bytes, lms_file, lms_sets, threads,
// seed, log_every and precision of its options, and --losses FILE into
// `losses_file`.
template <typename Options>
void add_imported_model_flags(CLI::App& app, Options& o, std::string* losses_file,
                              std::string seed_help) {
  flags::add_bytes(app, "--capacity", &o.capacity_bytes, "device memory");
  add_lms_flags(app, &o.lms_file, &o.lms_sets);
  flags::add_int(app, "--threads", &o.threads, "compute threads, 0 = all cores",
                 {.max = flags::kMaxThreads});
  flags::add_int(app, "--seed", &o.seed, std::move(seed_help));
  flags::add_int(app, "--log-every", &o.log_every, "steps between loss lines", {.min = 1});
  flags::add_string(app, "--losses FILE", losses_file, "every step's loss, one per line");
  add_precision_flag(app, &o.precision);
}

// InvalidArgument for --resume or --checkpoint-every N > 0 without
// --checkpoint.
absl::Status check_output_flags(const std::string& checkpoint, bool resume,
                                int64_t checkpoint_every);
template <typename Options>
absl::Status check_output_flags(const Options& o) {
  return check_output_flags(o.checkpoint, o.resume, o.checkpoint_every);
}

}  // namespace lms::examples
