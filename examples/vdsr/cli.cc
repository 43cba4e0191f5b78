#include "cli.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "flags.h"
#include "fmt/format.h"
#include "lms/io/host_memory.h"
#include "lms/status.h"

namespace lms::vdsr {
namespace {

using examples::bad_value;
using examples::Bytes;
using examples::Flag;
using examples::StringList;

std::vector<Flag> run_flags(RunOptions& r) {
  return {{"data", &r.data_dir},
          {"device", &r.device},
          {"capacity", Bytes{&r.capacity_bytes}},
          {"host-memory", Bytes{&r.host_pool_bytes}},
          {"threads", &r.threads, 0, examples::kMaxThreads},
          {"max-images", &r.max_images, 0}};
}

std::vector<Flag> train_flags(TrainOptions& t) {
  std::vector<Flag> f = run_flags(t.run);
  std::vector<Flag> own = {
      {"batch", &t.batch, 1},        {"crop", &t.crop, 2},
      {"steps", &t.steps, 1},        {"lr", &t.lr},
      {"clip-norm", &t.clip_norm},   {"depth", &t.depth, 2, 1000},
      {"channels", &t.channels, 1},  {"seed", &t.seed, 0},
      {"lms", &t.lms_config},        {"lms-set", StringList{&t.lms_overrides}},
      {"checkpoint", &t.checkpoint}, {"checkpoint-every", &t.checkpoint_every, 0},
      {"resume", &t.resume},         {"trace", &t.trace_dir},
      {"log-every", &t.log_every, 1}};
  f.insert(f.end(), own.begin(), own.end());
  std::vector<Flag> ranks = examples::distributed_flags(t.distributed);
  f.insert(f.end(), ranks.begin(), ranks.end());
  return f;
}

std::vector<Flag> eval_flags(EvalOptions& e) {
  std::vector<Flag> f = run_flags(e.run);
  std::vector<Flag> own = {
      {"checkpoint", &e.checkpoint}, {"out", &e.out}, {"eval-crop", &e.eval_crop, 0}};
  f.insert(f.end(), own.begin(), own.end());
  return f;
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
  if (t.lr <= 0) return bad_value("lr", fmt::format("{}", t.lr), "a learning rate > 0");
  if (t.resume && t.checkpoint.empty()) {
    return absl::InvalidArgumentError("--resume needs --checkpoint PATH to resume from");
  }
  if (t.checkpoint_every > 0 && t.checkpoint.empty()) {
    return absl::InvalidArgumentError("--checkpoint-every needs --checkpoint PATH to write to");
  }
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
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") return cmd;
  if (args[0] == "train") {
    cmd.kind = CommandKind::kTrain;
    LMS_RETURN_IF_ERROR(examples::parse_flags("vdsr", "train", train_flags(cmd.train), args));
    LMS_RETURN_IF_ERROR(check_train(cmd.train));
    return cmd;
  }
  if (args[0] == "eval") {
    cmd.kind = CommandKind::kEval;
    LMS_RETURN_IF_ERROR(examples::parse_flags("vdsr", "eval", eval_flags(cmd.eval), args));
    if (cmd.eval.checkpoint.empty()) {
      return absl::InvalidArgumentError("vdsr eval: --checkpoint PATH is required");
    }
    return cmd;
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown command '{}' (allowed: train, eval, help)", args[0]));
}

std::string usage() {
  return std::string(R"(vdsr: VDSR x2 super-resolution (Kim et al., CVPR 2016) on the lms runtime.

usage: vdsr train [flags]    train on <data>/train/*.{png,jpg}
       vdsr eval  [flags]    PSNR of VDSR vs bicubic on <data>/eval
       vdsr help

common flags:
  --data DIR            data folder (default data)
  --device cpu          cpu: the emulated device; cuda: a GPU (needs the CUDA backend and a device)
  --capacity BYTES      device memory, e.g. 256MiB (default 1GiB)
  --host-memory BYTES   pinned host pool limit (default 8GiB)
  --threads N           compute threads 0..1024, 0 = all cores (default 0)
  --max-images N        use the first N images only (of the rank's share), 0 = all (default 0)

train flags:
  --batch N             patches per step (default 16)
  --crop N              patch side in pixels (default 48)
  --steps N             total training steps (default 100)
  --lr X                Adam learning rate (default 1e-4)
  --clip-norm X         global gradient-norm clip, 0 = off (default 0.4)
  --depth N             conv layers 2..1000 (default 20)
  --channels N          filters per layer (default 64)
  --seed N              weights and batches (default 1)
  --lms FILE.toml       enable Large Model Support with this config
  --lms-set KEY=VALUE   override a config key (repeatable; enables LMS)
  --checkpoint PATH     write weights + optimizer state here
  --checkpoint-every N  also every N steps (default 0: only at the end)
  --resume              continue bit-exactly from --checkpoint
  --trace DIR           write DIR/trace.json, DIR/memory.svg and a summary
  --log-every N         progress line every N steps (default 1)

)") + examples::distributed_usage() +
         R"(
eval flags:
  --checkpoint PATH     trained weights (required)
  --eval-crop N         centre crop side, 0 = whole image (default 256)
  --out FILE.png        side-by-side bicubic | VDSR | ground truth of the first image

exit status: 0 on success, 1 on error (the message says what was wrong).
)";
}

}  // namespace lms::vdsr
