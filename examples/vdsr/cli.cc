#include "cli.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <string_view>
#include <variant>

#include "fmt/format.h"
#include "lms/io/host_memory.h"
#include "lms/status.h"
#include "lms/units.h"

namespace lms::vdsr {
namespace {

struct Bytes {
  uint64_t* value;
};
struct StringList {
  std::vector<std::string>* value;
};
using Target =
    std::variant<int*, int64_t*, uint64_t*, double*, bool*, std::string*, Bytes, StringList>;

struct Flag {
  std::string_view name;  // without "--"
  Target target;
  int64_t min = 0;  // integers: smallest allowed value
};

absl::Status bad_value(std::string_view flag, std::string_view value, std::string_view allowed) {
  return absl::InvalidArgumentError(fmt::format("--{}: bad value '{}' ({})", flag, value, allowed));
}

template <typename T>
absl::Status parse_integer(const Flag& f, std::string_view v, T* out) {
  T parsed{};
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), parsed);
  if (ec != std::errc() || end != v.data() + v.size() || static_cast<int64_t>(parsed) < f.min) {
    return bad_value(f.name, v, fmt::format("an integer >= {}", f.min));
  }
  *out = parsed;
  return absl::OkStatus();
}

absl::Status parse_double(const Flag& f, std::string_view v, double* out) {
  std::string s(v);
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(d) || d < 0) {
    return bad_value(f.name, v, "a finite number >= 0");
  }
  *out = d;
  return absl::OkStatus();
}

absl::Status assign(const Flag& f, std::string_view v) {
  struct Visitor {
    const Flag& f;
    std::string_view v;
    absl::Status operator()(int* p) { return parse_integer(f, v, p); }
    absl::Status operator()(int64_t* p) { return parse_integer(f, v, p); }
    absl::Status operator()(uint64_t* p) { return parse_integer(f, v, p); }
    absl::Status operator()(double* p) { return parse_double(f, v, p); }
    absl::Status operator()(bool* p) {
      *p = true;
      return absl::OkStatus();
    }
    absl::Status operator()(std::string* p) {
      if (v.empty()) return bad_value(f.name, v, "a non-empty string");
      *p = std::string(v);
      return absl::OkStatus();
    }
    absl::Status operator()(Bytes b) {
      absl::StatusOr<uint64_t> n = parse_bytes(v);
      if (!n.ok() || *n == 0) return bad_value(f.name, v, "a positive size such as 256MiB or 2GB");
      *b.value = *n;
      return absl::OkStatus();
    }
    absl::Status operator()(StringList l) {
      if (v.empty()) return bad_value(f.name, v, "a non-empty string");
      l.value->emplace_back(v);
      return absl::OkStatus();
    }
  };
  return std::visit(Visitor{f, v}, f.target);
}

std::vector<Flag> run_flags(RunOptions& r) {
  return {{"data", &r.data_dir},
          {"device", &r.device},
          {"capacity", Bytes{&r.capacity_bytes}},
          {"host-memory", Bytes{&r.host_pool_bytes}},
          {"threads", &r.threads, 0},
          {"max-images", &r.max_images, 0}};
}

std::vector<Flag> train_flags(TrainOptions& t) {
  std::vector<Flag> f = run_flags(t.run);
  std::vector<Flag> own = {
      {"batch", &t.batch, 1},        {"crop", &t.crop, 2},
      {"steps", &t.steps, 1},        {"lr", &t.lr},
      {"clip-norm", &t.clip_norm},   {"depth", &t.depth, 2},
      {"channels", &t.channels, 1},  {"seed", &t.seed, 0},
      {"lms", &t.lms_config},        {"lms-set", StringList{&t.lms_overrides}},
      {"checkpoint", &t.checkpoint}, {"checkpoint-every", &t.checkpoint_every, 0},
      {"resume", &t.resume},         {"trace", &t.trace_dir},
      {"log-every", &t.log_every, 1}};
  f.insert(f.end(), own.begin(), own.end());
  return f;
}

std::vector<Flag> eval_flags(EvalOptions& e) {
  std::vector<Flag> f = run_flags(e.run);
  std::vector<Flag> own = {
      {"checkpoint", &e.checkpoint}, {"out", &e.out}, {"eval-crop", &e.eval_crop, 0}};
  f.insert(f.end(), own.begin(), own.end());
  return f;
}

absl::Status parse_flags(std::string_view command, const std::vector<Flag>& flags,
                         const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a.substr(0, 2) != "--") {
      return absl::InvalidArgumentError(fmt::format(
          "vdsr {}: unexpected argument '{}' (flags start with --; see 'vdsr help')", command, a));
    }
    a.remove_prefix(2);
    std::string_view name = a.substr(0, a.find('='));
    const Flag* flag = nullptr;
    for (const Flag& f : flags) flag = f.name == name ? &f : flag;
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          fmt::format("vdsr {}: unknown flag '--{}' (see 'vdsr help')", command, name));
    }
    bool boolean = std::holds_alternative<bool*>(flag->target);
    std::string_view value;
    if (a.find('=') != std::string_view::npos) {
      if (boolean) return bad_value(name, a.substr(name.size() + 1), "a switch takes no value");
      value = a.substr(name.size() + 1);
    } else if (!boolean) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(fmt::format("--{}: missing value", name));
      }
      value = args[++i];
    }
    LMS_RETURN_IF_ERROR(assign(*flag, value));
  }
  return absl::OkStatus();
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
    LMS_RETURN_IF_ERROR(parse_flags("train", train_flags(cmd.train), args));
    LMS_RETURN_IF_ERROR(check_train(cmd.train));
    return cmd;
  }
  if (args[0] == "eval") {
    cmd.kind = CommandKind::kEval;
    LMS_RETURN_IF_ERROR(parse_flags("eval", eval_flags(cmd.eval), args));
    if (cmd.eval.checkpoint.empty()) {
      return absl::InvalidArgumentError("vdsr eval: --checkpoint PATH is required");
    }
    return cmd;
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown command '{}' (allowed: train, eval, help)", args[0]));
}

std::string usage() {
  return R"(vdsr: VDSR x2 super-resolution (Kim et al., CVPR 2016) on the lms runtime.

usage: vdsr train [flags]    train on <data>/train/*.{png,jpg}
       vdsr eval  [flags]    PSNR of VDSR vs bicubic on <data>/eval
       vdsr help

common flags:
  --data DIR            data folder (default data)
  --device cpu          cpu: the emulated device; cuda: a GPU (needs the CUDA backend and a device)
  --capacity BYTES      device memory, e.g. 256MiB (default 1GiB)
  --host-memory BYTES   pinned host pool limit (default 8GiB)
  --threads N           compute threads, 0 = all cores (default 0)
  --max-images N        use the first N images only, 0 = all (default 0)

train flags:
  --batch N             patches per step (default 16)
  --crop N              patch side in pixels (default 48)
  --steps N             total training steps (default 100)
  --lr X                Adam learning rate (default 1e-4)
  --clip-norm X         global gradient-norm clip, 0 = off (default 0.4)
  --depth N             conv layers (default 20)
  --channels N          filters per layer (default 64)
  --seed N              weights and batches (default 1)
  --lms FILE.toml       enable Large Model Support with this config
  --lms-set KEY=VALUE   override a config key (repeatable; enables LMS)
  --checkpoint PATH     write weights + optimizer state here
  --checkpoint-every N  also every N steps (default 0: only at the end)
  --resume              continue bit-exactly from --checkpoint
  --trace DIR           write DIR/trace.json, DIR/memory.svg and a summary
  --log-every N         progress line every N steps (default 1)

eval flags:
  --checkpoint PATH     trained weights (required)
  --eval-crop N         centre crop side, 0 = whole image (default 256)
  --out FILE.png        side-by-side bicubic | VDSR | ground truth of the first image

exit status: 0 on success, 1 on error (the message says what was wrong).
)";
}

}  // namespace lms::vdsr
