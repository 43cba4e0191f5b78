// Command line of the `unet3d` example: `unet3d train | eval | predict`, on
// CLI11 (examples/common/flags.h). Flags are `--name value` or
// `--name=value`; switches take no value.
//
//   LMS_ASSIGN_OR_RETURN(unet3d::Command cmd, unet3d::parse_command_line(args));
//   if (cmd.kind == unet3d::CommandKind::kHelp) std::cout << cmd.help;
//   if (cmd.kind == unet3d::CommandKind::kTrain) train(cmd.train, std::cout);
//
// Every error is InvalidArgument naming the flag, the value and what is
// allowed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "distributed.h"
#include "run_setup.h"

namespace lms::unet3d {

// Options shared by every command: where the data is and what runs it.
struct RunOptions {
  std::string data_dir = "data/mri";       // the fetched MRI or a folder of pairs (subjects.h)
  examples::DeviceOptions device;          // --device, --capacity, --host-memory, --threads
  std::string lms_config;                  // TOML file; empty = no file
  std::vector<std::string> lms_overrides;  // "key=value"; any makes LMS active

  bool lms_active() const { return !lms_config.empty() || !lms_overrides.empty(); }
};

// Isensee et al.'s 3-D U-Net (models::build_isensee_unet) with one input
// channel.
struct ModelOptions {
  int64_t filters = 8;              // base filters (level 0)
  int64_t levels = 4;               // resolution levels
  int64_t segmentation_levels = 3;  // deep supervision: decoder levels summed
  int classes = 0;                  // 0 = from the data (13 for the brain task)
};

struct TrainOptions {
  RunOptions run;
  ModelOptions model;
  int64_t size = 48;  // training crop side (voxels), a multiple of 2^(levels-1)
  int64_t grid = 0;   // resolution: volumes resampled to grid^3; 0 = grid_side(size, levels)
  int64_t batch = 1;
  int64_t steps = 100;  // total steps (a resumed run continues up to this)
  double lr = 3e-3;     // Adam learning rate
  // Poly decay of the learning rate over this many steps (lms::Adam::decay_steps:
  // lr * (1 - (t-1)/T)^0.9, nnU-Net's schedule); 0 = constant lr.
  int64_t lr_decay_steps = 0;
  uint64_t seed = 1;             // weights and batches
  double max_rotation_deg = 10;  // augmentation (mri_data.h BatchOptions)
  double max_scaling = 0.1;
  double intensity_jitter = 0.1;
  double max_gamma = 0.5;  // contrast augmentation (mri_data.h BatchOptions::max_gamma)
  bool no_flips = false;
  std::string checkpoint;          // path; empty = none
  int64_t checkpoint_every = 0;    // steps; 0 = only at the end
  bool resume = false;             // continue from `checkpoint`
  std::string trace_dir;           // profiler output; empty = none
  int64_t log_every = 1;           // progress line every N steps
  bool live_progress = false;      // redraw the progress line in place ('\r'), as on a terminal
  std::string precision = "fp32";  // fp32, bf16 or fp16 (examples::apply_precision)
  // --distributed, --scale-lr, --comm-timeout
  examples::DistributedOptions distributed;
};

struct EvalOptions {
  RunOptions run;
  std::string checkpoint;  // required
  int64_t grid = 0;        // evaluation grid side; 0 = the grid the model was trained at
};

struct PredictOptions {
  RunOptions run;
  std::string checkpoint;  // required
  std::string image;       // NIfTI to segment; empty = the first evaluation subject of --data
  std::string reference;   // label map to compare with (with --image); empty = none
  std::string out = "unet3d_pred";  // writes <out>.nii.gz and <out>.png
  int64_t grid = 0;                 // 0 = the grid the model was trained at
};

enum class CommandKind { kHelp, kTrain, kEval, kPredict };

struct Command {
  CommandKind kind = CommandKind::kHelp;
  std::string help;  // kHelp: the help text asked for (`unet3d`, `unet3d help`, `unet3d train -h`)
  TrainOptions train;
  EvalOptions eval;
  PredictOptions predict;
};

// args excludes the program name: {"train", "--steps", "10", ...}.
// Checks, beyond each flag's range (--lr > 0, --levels 1..8, --max-rotation
// at most 180, --max-scaling at most 0.5, ...): --size a multiple of
// 2^(levels-1); --grid >= --size and a multiple of 2^(levels-1) when given;
// --seg-levels, when given, at most levels - 1; --resume and
// --checkpoint-every need --checkpoint; --scale-lr needs --distributed; the
// input batch (batch x (1 + classes) x size^3 x 4 bytes, classes counted as
// 13 when 0) within io::host_memory_limit_bytes(); eval and predict need
// --checkpoint; --reference needs --image; --out is no folder.
absl::StatusOr<Command> parse_command_line(const std::vector<std::string>& args);

// Whether this machine's host memory holds the image and one-hot batches of
// `t` with `classes` classes (InvalidArgument naming the flags, the bytes
// and the limit otherwise). parse_command_line checks --classes (13 when 0);
// train checks again with the classes the data has.
absl::Status check_batch_memory(const TrainOptions& t, int64_t classes);

// The grid a run resamples its volumes to: `grid`, or grid_side(size, levels).
int64_t resolved_grid(int64_t size, int64_t grid, int64_t levels);

}  // namespace lms::unet3d
