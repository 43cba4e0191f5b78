#include "unet3d_cli.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>

#include "brain_task.h"
#include "flags.h"
#include "fmt/format.h"
#include "lms/io/host_memory.h"
#include "lms/status.h"
#include "mri_data.h"

namespace lms::unet3d {
namespace {

using examples::bad_value;
using examples::Bytes;
using examples::Flag;
using examples::StringList;

std::vector<Flag> run_flags(RunOptions& r) {
  return {{"data", &r.data_dir},
          {"device", &r.device.device},
          {"capacity", Bytes{&r.device.capacity_bytes}},
          {"host-memory", Bytes{&r.device.host_pool_bytes}},
          {"threads", &r.device.threads, 0, examples::kMaxThreads},
          {"lms", &r.lms_config},
          {"lms-set", StringList{&r.lms_overrides}}};
}

std::vector<Flag> with(std::vector<Flag> a, const std::vector<Flag>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<Flag> train_flags(TrainOptions& t) {
  return with(run_flags(t.run), {{"filters", &t.model.filters, 1},
                                 {"levels", &t.model.levels, 1},
                                 {"seg-levels", &t.model.segmentation_levels, 1},
                                 {"classes", &t.model.classes, 0},
                                 {"size", &t.size, 1},
                                 {"grid", &t.grid, 0},
                                 {"batch", &t.batch, 1},
                                 {"steps", &t.steps, 1},
                                 {"lr", &t.lr},
                                 {"lr-decay-steps", &t.lr_decay_steps, 0},
                                 {"seed", &t.seed, 0},
                                 {"max-rotation", &t.max_rotation_deg},
                                 {"max-scaling", &t.max_scaling},
                                 {"jitter", &t.intensity_jitter, 0, 0, 1.0},
                                 {"gamma", &t.max_gamma},
                                 {"no-flips", &t.no_flips},
                                 {"checkpoint", &t.checkpoint},
                                 {"checkpoint-every", &t.checkpoint_every, 0},
                                 {"resume", &t.resume},
                                 {"trace", &t.trace_dir},
                                 {"log-every", &t.log_every, 1}});
}

std::vector<Flag> eval_flags(EvalOptions& e) {
  return with(run_flags(e.run), {{"checkpoint", &e.checkpoint}, {"grid", &e.grid, 0}});
}

std::vector<Flag> predict_flags(PredictOptions& p) {
  return with(run_flags(p.run), {{"checkpoint", &p.checkpoint},
                                 {"image", &p.image},
                                 {"reference", &p.reference},
                                 {"out", &p.out},
                                 {"grid", &p.grid, 0}});
}

// Sizes must halve exactly at every level.
absl::Status check_divisible(std::string_view flag, int64_t value, int64_t levels) {
  if (levels > 8) return bad_value("levels", fmt::format("{}", levels), "1..8");
  const int64_t step = int64_t{1} << (levels - 1);
  if (value % step != 0) {
    return bad_value(flag, fmt::format("{}", value),
                     fmt::format("a multiple of {} (2^(levels-1) at --levels {})", step, levels));
  }
  return absl::OkStatus();
}

absl::Status check_train(const TrainOptions& t) {
  LMS_RETURN_IF_ERROR(check_divisible("size", t.size, t.model.levels));

  if (t.grid != 0) {
    LMS_RETURN_IF_ERROR(check_divisible("grid", t.grid, t.model.levels));
    if (t.grid < t.size) {
      return bad_value("grid", fmt::format("{}", t.grid),
                       fmt::format("at least --size {} (crops are cut from the grid)", t.size));
    }
  }
  if (t.lr <= 0) return bad_value("lr", fmt::format("{}", t.lr), "a learning rate > 0");
  if (t.max_rotation_deg > 180)
    return bad_value("max-rotation", fmt::format("{}", t.max_rotation_deg), "0..180 degrees");
  if (t.max_scaling > 0.5)
    return bad_value("max-scaling", fmt::format("{}", t.max_scaling), "0..0.5");
  if (t.max_gamma > 2) return bad_value("gamma", fmt::format("{}", t.max_gamma), "0..2");
  if (t.resume && t.checkpoint.empty()) {
    return absl::InvalidArgumentError("--resume needs --checkpoint PATH to resume from");
  }
  if (t.checkpoint_every > 0 && t.checkpoint.empty()) {
    return absl::InvalidArgumentError("--checkpoint-every needs --checkpoint PATH to write to");
  }
  LMS_RETURN_IF_ERROR(examples::check_distributed(t.distributed));
  return check_batch_memory(t, t.model.classes == 0 ? kBrainClasses : t.model.classes);
}

absl::Status require_checkpoint(std::string_view command, const std::string& checkpoint) {
  if (checkpoint.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("unet3d {}: --checkpoint PATH is required", command));
  }
  return absl::OkStatus();
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
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") return cmd;
  if (args[0] == "train") {
    cmd.kind = CommandKind::kTrain;
    std::vector<Flag> flags =
        with(train_flags(cmd.train), examples::distributed_flags(cmd.train.distributed));
    LMS_RETURN_IF_ERROR(examples::parse_flags("unet3d", "train", flags, args));
    LMS_RETURN_IF_ERROR(check_train(cmd.train));
    // Deep supervision sums at most levels - 1 decoder levels (one at
    // --levels 1); the default 3 is cut to that, a value given is checked.
    const int64_t most = std::max<int64_t>(cmd.train.model.levels - 1, 1);
    const bool seg_levels_given = std::any_of(args.begin(), args.end(), [](const std::string& a) {
      return a == "--seg-levels" || a.rfind("--seg-levels=", 0) == 0;
    });
    if (seg_levels_given && cmd.train.model.segmentation_levels > most) {
      return bad_value("seg-levels", fmt::format("{}", cmd.train.model.segmentation_levels),
                       fmt::format("1..{} (the decoder levels below the top at --levels {})", most,
                                   cmd.train.model.levels));
    }
    return cmd;
  }
  if (args[0] == "eval") {
    cmd.kind = CommandKind::kEval;
    LMS_RETURN_IF_ERROR(examples::parse_flags("unet3d", "eval", eval_flags(cmd.eval), args));
    LMS_RETURN_IF_ERROR(require_checkpoint("eval", cmd.eval.checkpoint));
    return cmd;
  }
  if (args[0] == "predict") {
    cmd.kind = CommandKind::kPredict;
    LMS_RETURN_IF_ERROR(
        examples::parse_flags("unet3d", "predict", predict_flags(cmd.predict), args));
    LMS_RETURN_IF_ERROR(require_checkpoint("predict", cmd.predict.checkpoint));
    if (!cmd.predict.reference.empty() && cmd.predict.image.empty()) {
      return absl::InvalidArgumentError("--reference needs --image (the volume it labels)");
    }
    // --out is a path prefix: "DIR/" would write the hidden DIR/.nii.gz.
    const std::string& out = cmd.predict.out;
    std::error_code ec;
    if (!out.empty() && (out.back() == '/' || std::filesystem::is_directory(out, ec))) {
      return bad_value("out", out,
                       "a file name prefix, not a folder: e.g. DIR/prediction writes "
                       "DIR/prediction.nii.gz and DIR/prediction.png");
    }
    return cmd;
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown command '{}' (allowed: train, eval, predict, help)", args[0]));
}

std::string usage() {
  return std::string(
             R"(unet3d: 3-D U-Net segmentation (Isensee et al., BraTS 2017) of MRI on the lms runtime.

usage: unet3d train   [flags]   train on <data> (the fetched MRI or <data>/train pairs)
       unet3d eval    [flags]   Dice per class on the evaluation volume(s)
       unet3d predict [flags]   a label map (NIfTI) and a PNG of three orthogonal slices
       unet3d help

--data is either the MRI of scripts/fetch_data.sh (data/mri: train on ch2bet and ch2,
evaluate on ch2better, another scan of the same person; AAL atlas in 13 classes) or a
folder with train/images, train/labels, eval/images and eval/labels holding NIfTI pairs
of the same file name (labels 0..classes-1).

common flags:
  --data DIR            data folder (default data/mri)
  --device cpu          cpu: the emulated device; cuda: a GPU (needs the CUDA backend and a device)
  --capacity BYTES      device memory, e.g. 256MiB (default 1GiB)
  --host-memory BYTES   pinned host pool limit (default 8GiB)
  --threads N           compute threads 0..1024, 0 = all cores (default 0)
  --lms FILE.toml       enable Large Model Support with this config
  --lms-set KEY=VALUE   override a config key (repeatable; enables LMS)

train flags:
  --size N              training crop side in voxels, a multiple of 2^(levels-1) (default 48)
  --grid N              resample the volumes to N^3 voxels (default: size + size/4, rounded up)
  --batch N             crops per step (default 1)
  --filters N           base filters (default 8)
  --levels N            resolution levels (default 4)
  --seg-levels N        decoder levels summed by deep supervision, 1..levels-1 (default 3)
  --classes N           label classes, 0 = from the data (default 0)
  --steps N             total training steps (default 100)
  --lr X                Adam learning rate (default 3e-3)
  --lr-decay-steps T    poly decay: step t uses lr (1 - (t-1)/T)^0.9, as nnU-Net
                        (0 = constant lr, the default; usually T = --steps)
  --seed N              weights and batches (default 1)
  --max-rotation DEG    random rotation about the superior axis (default 10)
  --max-scaling X       random isotropic scaling 1 +- X (default 0.1)
  --jitter X            intensity scale and shift jitter, 0..1 (default 0.1)
  --gamma X             contrast: intensities ^ gamma, gamma in [1/(1+X), 1+X] (default 0.5)
  --no-flips            no left-right flips
  --checkpoint PATH     write weights + optimizer state here (atomically)
  --checkpoint-every N  also every N steps (default 0: only at the end)
  --resume              continue bit-exactly from --checkpoint
  --trace DIR           write DIR/trace.json, DIR/memory.svg and a summary
  --log-every N         progress line every N steps (default 1)

)") + examples::distributed_usage() +
         R"(
eval flags:
  --checkpoint PATH     trained model (required)
  --grid N              evaluation grid, 0 = the training grid (default 0)

predict flags:
  --checkpoint PATH     trained model (required)
  --image FILE.nii.gz   volume to segment (default: the evaluation volume of --data)
  --reference FILE      its label map, for the third panel and Dice
  --out PREFIX          writes PREFIX.nii.gz (labels on the image's grid) and PREFIX.png
  --grid N              inference grid, 0 = the training grid (default 0)

exit status: 0 on success, 1 on error (the message says what was wrong).
)";
}

}  // namespace lms::unet3d
