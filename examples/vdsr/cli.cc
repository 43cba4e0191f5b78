#include "cli.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "distributed.h"
#include "example_flags.h"
#include "flags.h"
#include "fmt/format.h"
#include "lms/io/host_memory.h"
#include "lms/status.h"

namespace lms::vdsr {
namespace {

void add_run_flags(CLI::App& app, RunOptions& r) {
  flags::add_string(app, "--data DIR", &r.data_dir, "data folder");
  examples::add_device_flags(app, &r.device, &r.capacity_bytes, &r.host_pool_bytes, &r.threads);
  flags::add_int(app, "--max-images", &r.max_images,
                 "use the first N images only (of the rank's share), 0 = all");
}

void add_train_flags(CLI::App& app, TrainOptions& t) {
  add_run_flags(app, t.run);
  flags::add_int(app, "--batch", &t.batch, "patches per step", {.min = 1});
  flags::add_int(app, "--crop", &t.crop, "patch side in pixels", {.min = 2});
  flags::add_int(app, "--steps", &t.steps, "total training steps", {.min = 1});
  flags::add_real(app, "--lr", &t.lr, "Adam learning rate", {.min = 0, .min_open = true});
  flags::add_real(app, "--clip-norm", &t.clip_norm, "global gradient-norm clip, 0 = off");
  flags::add_int(app, "--depth", &t.depth, "conv layers", {.min = 2, .max = 1000});
  flags::add_int(app, "--channels", &t.channels, "filters per layer", {.min = 1});
  flags::add_int(app, "--seed", &t.seed, "weights and batches");
  examples::add_lms_flags(app, &t.lms_config, &t.lms_overrides);
  examples::add_output_flags(app, t);
  examples::add_precision_flag(app, &t.precision);
  examples::add_distributed_flags(app, t.distributed);
}

void add_eval_flags(CLI::App& app, EvalOptions& e) {
  add_run_flags(app, e.run);
  flags::add_string(app, "--checkpoint PATH", &e.checkpoint, "trained weights")->required();
  flags::add_int(app, "--eval-crop", &e.eval_crop, "centre crop side, 0 = whole image");
  flags::add_string(app, "--out FILE.png", &e.out,
                    "side-by-side bicubic | VDSR | ground truth of the first image");
}

absl::Status check_input_batches(const TrainOptions& t, uint64_t limit) {
  const std::optional<uint64_t> per_patch = io::checked_product({2, t.crop, t.crop, 4});
  std::string allowed =
      per_patch && *per_patch <= limit
          ? fmt::format("at --crop {} the largest --batch is {}", t.crop, limit / *per_patch)
          : fmt::format("the largest --crop (at --batch 1) is {}",
                        io::largest_square_side(limit, 2 * 4));
  return io::check_host_bytes(fmt::format("--batch {} with --crop {}", t.batch, t.crop),
                              "the lr and hr input batches",
                              fmt::format("2 x {} x {} x {} x 4", t.batch, t.crop, t.crop),
                              io::checked_product({2, t.batch, t.crop, t.crop, 4}), limit, allowed);
}

absl::Status check_model_state(const TrainOptions& t, uint64_t limit) {
  const int64_t widest = t.channels + int64_t{1};
  const std::optional<uint64_t> per_layer = io::checked_product({3, 9, widest, widest, 4});
  std::string allowed =
      per_layer && *per_layer <= limit
          ? fmt::format("at --channels {} the largest --depth is {}", t.channels,
                        limit / *per_layer)
          : fmt::format("the largest --channels (at --depth {}) is {}", t.depth,
                        std::max<int64_t>(
                            0, io::largest_square_side(limit, uint64_t{3 * 9 * 4} * t.depth) - 1));
  return io::check_host_bytes(
      fmt::format("--depth {} with --channels {}", t.depth, t.channels),
      "the weights and Adam moments (read back for checkpoints)",
      fmt::format("at most 3 x {} x 9 x {} x {} x 4", t.depth, widest, widest),
      io::checked_product({3, t.depth, 9, widest, widest, 4}), limit, allowed);
}

absl::Status check_train(const TrainOptions& t) {
  LMS_RETURN_IF_ERROR(examples::check_output_flags(t));
  LMS_RETURN_IF_ERROR(examples::check_distributed(t.distributed));
  return check_host_memory(t, io::host_memory_limit_bytes());
}

}  // namespace

absl::Status check_host_memory(const TrainOptions& t, uint64_t limit_bytes) {
  LMS_RETURN_IF_ERROR(check_input_batches(t, limit_bytes));
  return check_model_state(t, limit_bytes);
}

absl::StatusOr<Command> parse_command_line(const std::vector<std::string>& args) {
  Command cmd;
  CLI::App app("vdsr: VDSR x2 super-resolution (Kim et al., CVPR 2016) on the lms runtime.",
               "vdsr");
  app.require_subcommand(0, 1);
  app.footer("exit status: 0 on success, 1 on error (the message says what was wrong).");
  CLI::App* train = app.add_subcommand("train", "train on <data>/train/*.{png,jpg}");
  add_train_flags(*train, cmd.train);
  CLI::App* eval = app.add_subcommand("eval", "PSNR of VDSR vs bicubic on <data>/eval");
  add_eval_flags(*eval, cmd.eval);
  LMS_ASSIGN_OR_RETURN(cmd.help, flags::parse(app, args));
  if (!cmd.help.empty()) return cmd;
  if (train->parsed()) {
    cmd.kind = CommandKind::kTrain;
    LMS_RETURN_IF_ERROR(check_train(cmd.train));
  } else {
    cmd.kind = CommandKind::kEval;
  }
  return cmd;
}

}  // namespace lms::vdsr
