// Command line of the `vdsr` example: `vdsr train ...` and `vdsr eval ...`,
// on CLI11 (examples/common/flags.h; tests parse in-process): flags are
// `--name value` or `--name=value`; switches take no value.
//
//   LMS_ASSIGN_OR_RETURN(vdsr::Command cmd, vdsr::parse_command_line(args));
//   if (cmd.kind == vdsr::CommandKind::kHelp) std::cout << cmd.help;
//   if (cmd.kind == vdsr::CommandKind::kTrain) train(cmd.train, std::cout);
//
// Every error is InvalidArgument naming the flag, the value and what is
// allowed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "distributed.h"

namespace lms::vdsr {

// Options shared by train and eval: where the data is and what runs it.
struct RunOptions {
  std::string data_dir = "data";                 // train reads <data>/train, eval <data>/eval
  std::string device = "cpu";                    // "cpu" (emulated device) or "cuda" (GPU 0)
  uint64_t capacity_bytes = uint64_t{1} << 30;   // device memory
  uint64_t host_pool_bytes = uint64_t{8} << 30;  // pinned host pool limit
  int threads = 0;                               // compute threads, 0 = all cores
  int max_images = 0;                            // 0 = all (of the rank's share)
};

struct TrainOptions {
  RunOptions run;
  int batch = 16;
  int crop = 48;                           // training patch side (pixels)
  int64_t steps = 100;                     // total steps (a resumed run continues up to this)
  double lr = 1e-4;                        // Adam learning rate
  double clip_norm = 0.4;                  // global gradient-norm clip, 0 = off
  int depth = 20;                          // conv layers (VDSR: 20)
  int channels = 64;                       // filters per layer (VDSR: 64)
  uint64_t seed = 1;                       // weights and batches
  std::string lms_config;                  // TOML file; empty = no file
  std::vector<std::string> lms_overrides;  // "key=value"; any makes LMS active
  std::string checkpoint;                  // path; empty = none
  int64_t checkpoint_every = 0;            // steps; 0 = only at the end
  bool resume = false;                     // continue from `checkpoint`
  std::string trace_dir;                   // profiler output; empty = none
  int64_t log_every = 1;                   // progress line every N steps
  std::string precision = "fp32";          // fp32, bf16 or fp16 (examples::apply_precision)
  // --distributed, --scale-lr, --comm-timeout
  examples::DistributedOptions distributed;

  bool lms_active() const { return !lms_config.empty() || !lms_overrides.empty(); }
};

struct EvalOptions {
  RunOptions run;
  std::string checkpoint;  // required
  std::string out;         // side-by-side PNG; empty = none
  int eval_crop = 256;     // centre crop side; 0 = the whole image
  int scale = 2;
};

enum class CommandKind { kHelp, kTrain, kEval };

struct Command {
  CommandKind kind = CommandKind::kHelp;
  std::string help;  // kHelp: the help text asked for (`vdsr`, `vdsr help`, `vdsr train --help`)
  TrainOptions train;
  EvalOptions eval;
};

// args excludes the program name: {"train", "--steps", "10", ...}.
// Train commands are also checked with check_host_memory against
// io::host_memory_limit_bytes(), so a --batch, --crop, --depth or
// --channels this machine cannot hold is refused before anything runs.
absl::StatusOr<Command> parse_command_line(const std::vector<std::string>& args);

// Note [Host buffers]: the host buffers a training run sizes from its flags
// must each fit `limit_bytes`: the lr and hr input batches of a step
// (2 x batch x crop x crop x 4 bytes) and the persistent state read back to
// the host for checkpoints and the result (weights, biases and two Adam
// moments, at most 3 x depth x 9 x (channels + 1)^2 x 4 bytes). Computed with
// overflow checks; InvalidArgument naming the flags, the bytes needed, the
// limit and the largest value that fits otherwise.
absl::Status check_host_memory(const TrainOptions& t, uint64_t limit_bytes);

}  // namespace lms::vdsr
