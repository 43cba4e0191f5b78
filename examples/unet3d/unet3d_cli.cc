#include "unet3d_cli.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>

#include "brain_task.h"
#include "distributed.h"
#include "example_flags.h"
#include "flags.h"
#include "fmt/format.h"
#include "lms/io/host_memory.h"
#include "lms/status.h"
#include "mri_data.h"

namespace lms::unet3d {
namespace {

using flags::bad_flag;

void add_run_flags(CLI::App& app, RunOptions& r) {
  flags::add_string(app, "--data DIR", &r.data_dir,
                    "the MRI of scripts/fetch_data.sh or a folder of NIfTI pairs");
  examples::add_device_flags(app, r.device);
  examples::add_lms_flags(app, &r.lms_config, &r.lms_overrides);
}

void add_train_flags(CLI::App& app, TrainOptions& t) {
  add_run_flags(app, t.run);
  flags::add_int(app, "--size", &t.size, "training crop side in voxels, a multiple of 2^(levels-1)",
                 {.min = 1});
  flags::add_int(app, "--grid", &t.grid,
                 "resample the volumes to N^3 voxels (0: size + size/4, rounded up)");
  flags::add_int(app, "--batch", &t.batch, "crops per step", {.min = 1});
  flags::add_int(app, "--filters", &t.model.filters, "base filters", {.min = 1});
  flags::add_int(app, "--levels", &t.model.levels, "resolution levels", {.min = 1, .max = 8});
  flags::add_int(app, "--seg-levels", &t.model.segmentation_levels,
                 "decoder levels summed by deep supervision, 1..levels-1", {.min = 1});
  flags::add_int(app, "--classes", &t.model.classes, "label classes, 0 = from the data");
  flags::add_int(app, "--steps", &t.steps, "total training steps", {.min = 1});
  flags::add_real(app, "--lr", &t.lr, "Adam learning rate", {.min = 0, .min_open = true});
  flags::add_int(app, "--lr-decay-steps T", &t.lr_decay_steps,
                 "poly decay: step t uses lr (1 - (t-1)/T)^0.9, as nnU-Net\n"
                 "(0 = constant lr; usually T = --steps)");
  flags::add_int(app, "--seed", &t.seed, "weights and batches");
  flags::add_real(app, "--max-rotation DEG", &t.max_rotation_deg,
                  "random rotation about the superior axis", {.max = 180});
  flags::add_real(app, "--max-scaling", &t.max_scaling, "random isotropic scaling 1 +- X",
                  {.max = 0.5});
  flags::add_real(app, "--jitter", &t.intensity_jitter, "intensity scale and shift jitter",
                  {.max = 1});
  flags::add_real(app, "--gamma", &t.max_gamma,
                  "contrast: intensities ^ gamma, gamma in [1/(1+X), 1+X]", {.max = 2});
  flags::add_switch(app, "--no-flips", &t.no_flips, "no left-right flips");
  examples::add_output_flags(app, t);
  examples::add_precision_flag(app, &t.precision);
  examples::add_distributed_flags(app, t.distributed);
}

void add_eval_flags(CLI::App& app, EvalOptions& e) {
  add_run_flags(app, e.run);
  flags::add_string(app, "--checkpoint PATH", &e.checkpoint, "trained model")->required();
  flags::add_int(app, "--grid", &e.grid, "evaluation grid, 0 = the training grid");
}

void add_predict_flags(CLI::App& app, PredictOptions& p) {
  add_run_flags(app, p.run);
  flags::add_string(app, "--checkpoint PATH", &p.checkpoint, "trained model")->required();
  flags::add_string(app, "--image FILE.nii.gz", &p.image,
                    "volume to segment (default: the evaluation volume of --data)");
  flags::add_string(app, "--reference FILE", &p.reference,
                    "its label map, for the third panel and Dice");
  flags::add_string(app, "--out PREFIX", &p.out,
                    "writes PREFIX.nii.gz (labels on the image's grid) and PREFIX.png");
  flags::add_int(app, "--grid", &p.grid, "inference grid, 0 = the training grid");
}

// Sizes must halve exactly at every level.
absl::Status check_divisible(std::string_view flag, int64_t value, int64_t levels) {
  if (levels > 8) return bad_flag("--levels", fmt::format("{}", levels), "1..8");
  const int64_t step = int64_t{1} << (levels - 1);
  if (value % step != 0) {
    return bad_flag(fmt::format("--{}", flag), fmt::format("{}", value),
                    fmt::format("a multiple of {} (2^(levels-1) at --levels {})", step, levels));
  }
  return absl::OkStatus();
}

absl::Status check_train(const TrainOptions& t) {
  LMS_RETURN_IF_ERROR(check_divisible("size", t.size, t.model.levels));

  if (t.grid != 0) {
    LMS_RETURN_IF_ERROR(check_divisible("grid", t.grid, t.model.levels));
    if (t.grid < t.size) {
      return bad_flag("--grid", fmt::format("{}", t.grid),
                      fmt::format("at least --size {} (crops are cut from the grid)", t.size));
    }
  }
  LMS_RETURN_IF_ERROR(examples::check_output_flags(t));
  LMS_RETURN_IF_ERROR(examples::check_distributed(t.distributed));
  return check_batch_memory(t, t.model.classes == 0 ? kBrainClasses : t.model.classes);
}

}  // namespace

absl::Status check_batch_memory(const TrainOptions& t, int64_t classes) {
  const int64_t grid = resolved_grid(t.size, t.grid, t.model.levels);
  const uint64_t limit = io::host_memory_limit_bytes();
  return io::check_host_bytes(
      fmt::format("--batch {} with --size {} and {} classes", t.batch, t.size, classes),
      "the image and one-hot batches",
      fmt::format("{} x (1 + {}) x {}^3 x 4", t.batch, classes, t.size),
      io::checked_product({t.batch, 1 + classes, t.size, t.size, t.size, 4}), limit,
      fmt::format("a smaller --size or --batch (the volumes are resampled to --grid {})", grid));
}

int64_t resolved_grid(int64_t size, int64_t grid, int64_t levels) {
  return grid != 0 ? grid : grid_side(size, levels);
}

absl::StatusOr<Command> parse_command_line(const std::vector<std::string>& args) {
  Command cmd;
  CLI::App app(
      "unet3d: 3-D U-Net segmentation (Isensee et al., BraTS 2017) of MRI on the lms runtime.\n\n"
      "--data is either the MRI of scripts/fetch_data.sh (data/mri: train on ch2bet and ch2,\n"
      "evaluate on ch2better, another scan of the same person; AAL atlas in 13 classes) or a\n"
      "folder with train/images, train/labels, eval/images and eval/labels holding NIfTI pairs\n"
      "of the same file name (labels 0..classes-1).",
      "unet3d");
  app.require_subcommand(0, 1);
  app.footer("exit status: 0 on success, 1 on error (the message says what was wrong).");
  CLI::App* train =
      app.add_subcommand("train", "train on <data> (the fetched MRI or <data>/train pairs)");
  add_train_flags(*train, cmd.train);
  CLI::App* eval = app.add_subcommand("eval", "Dice per class on the evaluation volume(s)");
  add_eval_flags(*eval, cmd.eval);
  CLI::App* predict =
      app.add_subcommand("predict", "a label map (NIfTI) and a PNG of three orthogonal slices");
  add_predict_flags(*predict, cmd.predict);
  LMS_ASSIGN_OR_RETURN(cmd.help, flags::parse(app, args));
  if (!cmd.help.empty()) return cmd;
  if (train->parsed()) {
    cmd.kind = CommandKind::kTrain;
    LMS_RETURN_IF_ERROR(check_train(cmd.train));
    // Deep supervision sums at most levels - 1 decoder levels (one at
    // --levels 1); the default 3 is cut to that, a value given is checked.
    const int64_t most = std::max<int64_t>(cmd.train.model.levels - 1, 1);
    if (train->get_option("--seg-levels")->count() > 0 &&
        cmd.train.model.segmentation_levels > most) {
      return bad_flag("--seg-levels", fmt::format("{}", cmd.train.model.segmentation_levels),
                      fmt::format("1..{} (the decoder levels below the top at --levels {})", most,
                                  cmd.train.model.levels));
    }
    return cmd;
  }
  if (eval->parsed()) {
    cmd.kind = CommandKind::kEval;
    return cmd;
  }
  cmd.kind = CommandKind::kPredict;
  if (!cmd.predict.reference.empty() && cmd.predict.image.empty()) {
    return absl::InvalidArgumentError("--reference needs --image (the volume it labels)");
  }
  // --out is a path prefix: "DIR/" would write the hidden DIR/.nii.gz.
  const std::string& out = cmd.predict.out;
  std::error_code ec;
  if (!out.empty() && (out.back() == '/' || std::filesystem::is_directory(out, ec))) {
    return bad_flag("--out", out,
                    "a file name prefix, not a folder: e.g. DIR/prediction writes "
                    "DIR/prediction.nii.gz and DIR/prediction.png");
  }
  return cmd;
}

}  // namespace lms::unet3d
