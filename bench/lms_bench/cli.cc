#include "cli.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "contention.h"
#include "fmt/format.h"
#include "lms/io/file_util.h"
#include "lms/io/host_memory.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/units.h"
#include "model_factory.h"
#include "onnx_model.h"

namespace lms::bench {
namespace {

using Setter = std::function<absl::Status(BenchCommand&, const std::string&)>;

struct FlagSpec {
  std::set<Mode> modes;  // where the flag is allowed
  Setter set;
};

absl::StatusOr<int64_t> parse_int(const std::string& flag, const std::string& text, int64_t min,
                                  int64_t max) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < min || v > max) {
    return absl::InvalidArgumentError(
        fmt::format("{} '{}': expected an integer in [{}, {}]", flag, text, min, max));
  }
  return v;
}

absl::Status with_flag(const std::string& flag, const std::string& text, absl::Status s) {
  if (s.ok()) return s;
  return absl::InvalidArgumentError(fmt::format("{} '{}': {}", flag, text, to_std(s.message())));
}

Setter int_flag(const std::string& flag, int64_t BenchCommand::*field, int64_t min, int64_t max) {
  return [=](BenchCommand& c, const std::string& v) -> absl::Status {
    LMS_ASSIGN_OR_RETURN(c.*field, parse_int(flag, v, min, max));
    return absl::OkStatus();
  };
}

Setter bytes_flag(const std::string& flag, uint64_t BenchCommand::*field) {
  return [=](BenchCommand& c, const std::string& v) -> absl::Status {
    absl::StatusOr<uint64_t> b = parse_bytes(v);
    if (!b.ok()) return with_flag(flag, v, b.status());
    if (*b == 0) return absl::InvalidArgumentError(fmt::format("{} '{}': must be > 0", flag, v));
    c.*field = *b;
    return absl::OkStatus();
  };
}

// overhead and contention run one size.
absl::Status check_one_size(const BenchCommand& c, const char* flag, const std::string& v) {
  if (c.mode != Mode::kContention || c.sizes.size() == 1) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format("{} '{}': contention takes one size", flag, v));
}

absl::Status set_budget_fraction(BenchCommand& c, const std::string& v) {
  char* end = nullptr;
  double f = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(f > 0 && f < 1)) {
    return absl::InvalidArgumentError(
        fmt::format("--budget-fraction '{}': expected a number in (0, 1)", v));
  }
  c.budget_fraction = f;
  return absl::OkStatus();
}

Setter string_flag(std::string BenchCommand::*field) {
  return [=](BenchCommand& c, const std::string& v) {
    c.*field = v;
    return absl::OkStatus();
  };
}

// ratio: one positive size per model.
absl::Status set_ratio_size(const char* flag, const std::string& v, int64_t& field) {
  LMS_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, parse_size_list(flag, v));
  if (sizes.size() != 1) {
    return absl::InvalidArgumentError(fmt::format("{} '{}': ratio takes one size", flag, v));
  }
  field = sizes[0];
  return absl::OkStatus();
}

absl::Status set_ratio_models(BenchCommand& c, const std::string& v) {
  c.ratio_models.clear();
  for (size_t begin = 0; begin <= v.size();) {
    const size_t end = std::min(v.find(',', begin), v.size());
    const std::string word = v.substr(begin, end - begin);
    const bool onnx = word.size() > 5 && word.compare(word.size() - 5, 5, ".onnx") == 0;
    if (word != "vdsr" && word != "unet3d" && !onnx) {
      return absl::InvalidArgumentError(fmt::format(
          "--model '{}': unknown model '{}'; allowed are vdsr, unet3d and one FILE.onnx (with "
          "--input and --loss), comma-separated",
          v, word));
    }
    if (onnx && !c.onnx_path.empty()) {
      return absl::InvalidArgumentError(fmt::format(
          "--model '{}': one ONNX model per run ('{}' and '{}')", v, c.onnx_path, word));
    }
    if (onnx) c.onnx_path = word;
    c.ratio_models.push_back(word);
    begin = end + 1;
  }
  return absl::OkStatus();
}

// A positive finite number; InvalidArgument naming the flag and `what`.
absl::StatusOr<double> parse_positive(const char* flag, const std::string& v, const char* what) {
  char* end = nullptr;
  const double f = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(f > 0) || !std::isfinite(f)) {
    return absl::InvalidArgumentError(fmt::format("{} '{}': expected {}", flag, v, what));
  }
  return f;
}

absl::Status set_link_ratio(BenchCommand& c, const std::string& v) {
  LMS_ASSIGN_OR_RETURN(c.link_bytes_per_flop,
                       parse_positive("--link-ratio", v,
                                      "link bytes per FLOP of compute, a number > 0 (H100 + PCIe "
                                      "Gen5: 50e9 / 67e12 = 7.5e-4)"));
  return absl::OkStatus();
}

absl::Status set_gpu_efficiency(BenchCommand& c, const std::string& v) {
  static constexpr char kAllowed[] =
      "the fraction of the GPU's peak a step reaches, a number in (0, 1] (default: 1 for the "
      "FP32 presets, 0.5 for the tensor-core ones)";
  LMS_ASSIGN_OR_RETURN(c.gpu_efficiency, parse_positive("--gpu-efficiency", v, kAllowed));
  if (c.gpu_efficiency > 1) {
    return absl::InvalidArgumentError(fmt::format("--gpu-efficiency '{}': {}", v, kAllowed));
  }
  return absl::OkStatus();
}

absl::Status set_oversubscription(BenchCommand& c, const std::string& v) {
  c.oversubscription.clear();
  for (size_t begin = 0; begin <= v.size();) {
    const size_t end = std::min(v.find(',', begin), v.size());
    absl::StatusOr<double> k =
        parse_positive("--oversubscription", v.substr(begin, end - begin), "");
    if (!k.ok() || *k <= 1) {
      return absl::InvalidArgumentError(fmt::format(
          "--oversubscription '{}': expected a comma-separated list of factors > 1 (device "
          "capacity = no-LMS peak / factor)",
          v));
    }
    c.oversubscription.push_back(*k);
    begin = end + 1;
  }
  return absl::OkStatus();
}

const char* mode_name(Mode m);

const std::map<std::string, FlagSpec>& flags() {
  const std::set<Mode> all = {Mode::kVdsr,    Mode::kUnet3d, Mode::kOverhead, Mode::kContention,
                              Mode::kScaling, Mode::kRatio,  Mode::kOnnx};
  // ratio throttles the link itself (--preset, --gpu-link, --link-ratio).
  const std::set<Mode> linked = {Mode::kVdsr,       Mode::kUnet3d,  Mode::kOverhead,
                                 Mode::kContention, Mode::kScaling, Mode::kOnnx};
  const std::set<Mode> threaded = {Mode::kVdsr,    Mode::kUnet3d, Mode::kOverhead,
                                   Mode::kScaling, Mode::kRatio,  Mode::kOnnx};
  // contention sets each device's capacity and compute threads itself.
  const std::set<Mode> sized = {Mode::kVdsr, Mode::kUnet3d, Mode::kOverhead, Mode::kScaling,
                                Mode::kOnnx};
  const std::set<Mode> sweeps = {Mode::kVdsr, Mode::kUnet3d, Mode::kOnnx};
  const std::set<Mode> vdsr_like = {Mode::kVdsr, Mode::kOverhead, Mode::kContention, Mode::kScaling,
                                    Mode::kRatio};
  const std::set<Mode> batched = {Mode::kVdsr,    Mode::kOverhead, Mode::kContention,
                                  Mode::kScaling, Mode::kRatio,    Mode::kOnnx};
  const std::set<Mode> unet_like = {Mode::kUnet3d, Mode::kContention, Mode::kRatio};
  const std::set<Mode> one_size = {Mode::kOverhead, Mode::kContention, Mode::kScaling};
  static const auto* table = new std::map<std::string, FlagSpec>{
      {"--batch",
       {batched,
        [](BenchCommand& c, const std::string& v) -> absl::Status {
          if (c.mode == Mode::kRatio) return set_ratio_size("--batch", v, c.ratio_batch);
          LMS_ASSIGN_OR_RETURN(c.sizes, parse_size_list("--batch", v));
          if ((c.mode == Mode::kOverhead || c.mode == Mode::kScaling) && c.sizes.size() != 1) {
            return absl::InvalidArgumentError(
                fmt::format("--batch '{}': {} takes one batch", v, mode_name(c.mode)));
          }
          return check_one_size(c, "--batch", v);
        }}},
      {"--size",
       {unet_like,
        [](BenchCommand& c, const std::string& v) -> absl::Status {
          if (c.mode == Mode::kRatio) return set_ratio_size("--size", v, c.ratio_size);
          LMS_ASSIGN_OR_RETURN(c.sizes, parse_size_list("--size", v));
          return check_one_size(c, "--size", v);
        }}},
      {"--model",
       {{Mode::kContention, Mode::kRatio, Mode::kOnnx},
        [](BenchCommand& c, const std::string& v) -> absl::Status {
          if (c.mode == Mode::kRatio) return set_ratio_models(c, v);
          if (c.mode == Mode::kOnnx) {
            c.onnx_path = v;
            return absl::OkStatus();
          }
          if (v != "vdsr" && v != "unet3d") {
            return absl::InvalidArgumentError(
                fmt::format("--model '{}': allowed are vdsr and unet3d", v));
          }
          c.model = v;
          return absl::OkStatus();
        }}},
      {"--devices",
       {{Mode::kContention},
        [](BenchCommand& c, const std::string& v) -> absl::Status {
          LMS_ASSIGN_OR_RETURN(c.devices, parse_size_list("--devices", v));
          for (int64_t k : c.devices) {
            if (k > 16) {
              return absl::InvalidArgumentError(fmt::format(
                  "--devices '{}': each count of devices per link must be in [1, 16]", v));
            }
          }
          return absl::OkStatus();
        }}},
      {"--capacity", {sized, bytes_flag("--capacity", &BenchCommand::capacity_bytes)}},
      {"--device",
       {sweeps,
        [](BenchCommand& c, const std::string& v) -> absl::Status {
          if (v != "cpu" && v != "cuda") {
            return absl::InvalidArgumentError(
                fmt::format("--device '{}': allowed are cpu (the emulated device) and cuda", v));
          }
          c.cuda = v == "cuda";
          return absl::OkStatus();
        }}},
      {"--host-pool", {all, bytes_flag("--host-pool", &BenchCommand::host_pool_bytes)}},
      {"--time-model",
       {sweeps,
        [](BenchCommand& c, const std::string& v) -> absl::Status {
          if (v != "measured" && v != "roofline") {
            return absl::InvalidArgumentError(fmt::format(
                "--time-model '{}': allowed are measured (profile the graph and the link on the "
                "device) and roofline (the config's [cost_model] and [link])",
                v));
          }
          c.time_model = v;
          return absl::OkStatus();
        }}},
      {"--steps",
       {all,
        [](BenchCommand& c, const std::string& v) -> absl::Status {
          LMS_ASSIGN_OR_RETURN(int64_t n, parse_int("--steps", v, 1, 100000));
          c.steps = static_cast<int>(n);
          return absl::OkStatus();
        }}},
      {"--threads",
       {threaded,
        [](BenchCommand& c, const std::string& v) -> absl::Status {
          LMS_ASSIGN_OR_RETURN(int64_t n, parse_int("--threads", v, 0, 1024));
          c.threads = static_cast<int>(n);
          return absl::OkStatus();
        }}},
      {"--seed",
       {all,
        [](BenchCommand& c, const std::string& v) -> absl::Status {
          LMS_ASSIGN_OR_RETURN(int64_t n, parse_int("--seed", v, 0, int64_t{1} << 62));
          c.seed = static_cast<uint64_t>(n);
          return absl::OkStatus();
        }}},
      {"--lms", {all, string_flag(&BenchCommand::lms_file)}},
      {"--lms-set",
       {all,
        [](BenchCommand& c, const std::string& v) -> absl::Status {
          if (v.find('=') == std::string::npos) {
            return absl::InvalidArgumentError(fmt::format("--lms-set '{}': expected key=value", v));
          }
          c.lms_sets.push_back(v);
          return absl::OkStatus();
        }}},
      {"--link",
       {linked,
        [](BenchCommand& c, const std::string& v) -> absl::Status {
          absl::StatusOr<double> bw = parse_bandwidth(v);
          if (!bw.ok()) return with_flag("--link", v, bw.status());
          c.link_bytes_per_s = *bw;
          return absl::OkStatus();
        }}},
      {"--json", {all, string_flag(&BenchCommand::json_path)}},
      {"--data", {all, string_flag(&BenchCommand::data_dir)}},
      {"--arch",
       {{Mode::kUnet3d},
        [](BenchCommand& c, const std::string& v) -> absl::Status {
          if (v != "isensee" && v != "reduced") {
            return absl::InvalidArgumentError(fmt::format(
                "--arch '{}': allowed are isensee (models::build_isensee_unet) and reduced "
                "(models::build_unet)",
                v));
          }
          c.arch = v;
          return absl::OkStatus();
        }}},
      {"--study-steps",
       {{Mode::kUnet3d}, int_flag("--study-steps", &BenchCommand::study_steps, 0, 1000000)}},
      {"--study-lr",
       {{Mode::kUnet3d},
        [](BenchCommand& c, const std::string& v) -> absl::Status {
          char* end = nullptr;
          double f = std::strtod(v.c_str(), &end);
          if (v.empty() || *end != '\0' || !(f > 0 && f < 1)) {
            return absl::InvalidArgumentError(
                fmt::format("--study-lr '{}': expected a learning rate in (0, 1)", v));
          }
          c.study_lr = f;
          return absl::OkStatus();
        }}},
      {"--study-lr-decay",
       {{Mode::kUnet3d},
        [](BenchCommand& c, const std::string& v) -> absl::Status {
          if (v != "poly" && v != "constant") {
            return absl::InvalidArgumentError(fmt::format(
                "--study-lr-decay '{}': allowed are poly (decay over --study-steps) and constant",
                v));
          }
          c.study_lr_decay = v == "poly";
          return absl::OkStatus();
        }}},
      {"--out", {{Mode::kUnet3d}, string_flag(&BenchCommand::out_dir)}},
      {"--crop", {vdsr_like, int_flag("--crop", &BenchCommand::crop, 1, 4096)}},
      {"--depth", {vdsr_like, int_flag("--depth", &BenchCommand::depth, 2, 1000)}},
      {"--channels", {vdsr_like, int_flag("--channels", &BenchCommand::channels, 1, 4096)}},
      {"--filters", {unet_like, int_flag("--filters", &BenchCommand::base_filters, 1, 1024)}},
      {"--levels", {unet_like, int_flag("--levels", &BenchCommand::levels, 1, 8)}},
      {"--trace",
       {{Mode::kVdsr, Mode::kUnet3d, Mode::kContention, Mode::kOnnx},
        string_flag(&BenchCommand::trace_dir)}},
      {"--budget-fraction", {one_size, set_budget_fraction}},
      {"--preset",
       {{Mode::kRatio},
        [](BenchCommand& c, const std::string& v) -> absl::
                                                      Status {
                                                        LMS_ASSIGN_OR_RETURN(c.targets,
                                                                             parse_presets(v));
                                                        return absl::OkStatus();
                                                      }}},
      {"--gpu-flops",
       {{Mode::kRatio},
        [](BenchCommand& c,
           const std::string& v) -> absl::
                                     Status {
                                       absl::StatusOr<double> f = parse_flop_rate(v);
                                       if (!f.ok())
                                         return absl::InvalidArgumentError(fmt::format(
                                             "--gpu-flops {}", to_std(f.status().message())));
                                       c.gpu_flops_per_s = *f;
                                       return absl::OkStatus();
                                     }}},
      {"--gpu-link",
       {{Mode::kRatio},
        [](BenchCommand& c, const std::string& v) -> absl::
                                                      Status {
                                                        absl::StatusOr<double> bw =
                                                            parse_bandwidth(v);
                                                        if (!bw.ok())
                                                          return with_flag("--gpu-link", v,
                                                                           bw.status());
                                                        c.gpu_link_bytes_per_s = *bw;
                                                        return absl::OkStatus();
                                                      }}},
      {"--link-ratio", {{Mode::kRatio}, set_link_ratio}},
      {"--gpu-efficiency", {{Mode::kRatio}, set_gpu_efficiency}},
      {"--input", {{Mode::kOnnx, Mode::kRatio}, string_flag(&BenchCommand::onnx_input)}},
      {"--loss", {{Mode::kOnnx, Mode::kRatio}, string_flag(&BenchCommand::onnx_loss)}},
      {"--oversubscription", {{Mode::kRatio}, set_oversubscription}},
  };
  return *table;
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kVdsr:
      return "vdsr";
    case Mode::kUnet3d:
      return "unet3d";
    case Mode::kOverhead:
      return "overhead";
    case Mode::kScaling:
      return "scaling";
    case Mode::kContention:
      return "contention";
    case Mode::kRatio:
      return "ratio";
    case Mode::kOnnx:
      return "onnx";
    case Mode::kHelp:
      break;
  }
  return "help";
}

absl::StatusOr<Mode> parse_mode(const std::string& word) {
  if (word == "vdsr") return Mode::kVdsr;
  if (word == "unet3d") return Mode::kUnet3d;
  if (word == "overhead") return Mode::kOverhead;
  if (word == "scaling") return Mode::kScaling;
  if (word == "contention") return Mode::kContention;
  if (word == "ratio") return Mode::kRatio;
  if (word == "onnx") return Mode::kOnnx;
  if (word == "help" || word == "--help" || word == "-h") return Mode::kHelp;
  return absl::InvalidArgumentError(
      fmt::format("unknown command '{}': expected vdsr, unet3d, onnx, overhead, contention, "
                  "scaling, ratio or help (see lms-bench --help)",
                  word));
}

// contention: the link is slow enough that copies take a good part of a
// step on this CPU (kContentionLinkBytesPerS), each device computes on one
// thread, and the U-Net is the reduced one on random volumes unless --data.
void apply_contention_defaults(BenchCommand& c) {
  if (c.link_bytes_per_s == 0) c.link_bytes_per_s = kContentionLinkBytesPerS;
  if (c.arch.empty()) c.arch = c.data_dir.empty() ? "reduced" : "isensee";
  c.threads = 1;
}

// ratio: the custom target joins the presets; without either, the two
// targets of the goals (v100-nvlink2, h100-pcie5-tc). --gpu-efficiency
// applies to every target.
absl::Status apply_ratio_defaults(BenchCommand& c) {
  if (c.mode != Mode::kRatio) return absl::OkStatus();
  if ((c.gpu_flops_per_s > 0) != (c.gpu_link_bytes_per_s > 0)) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: a custom target needs both --gpu-flops and --gpu-link (e.g. --gpu-flops 60TFLOP/s "
        "--gpu-link 50GB/s)",
        c.gpu_flops_per_s > 0 ? "--gpu-flops without --gpu-link"
                              : "--gpu-link without --gpu-flops"));
  }
  if (c.gpu_flops_per_s > 0 && c.link_bytes_per_flop > 0) {
    return absl::InvalidArgumentError(
        "--link-ratio: give either --link-ratio or --gpu-flops and --gpu-link, not both");
  }
  if (c.gpu_flops_per_s > 0) {
    c.targets.push_back(
        {.name = "custom",
         .label = fmt::format("custom {:g} TFLOP/s + {:g} GB/s", c.gpu_flops_per_s / 1e12,
                              c.gpu_link_bytes_per_s / 1e9),
         .gpu_flops_per_s = c.gpu_flops_per_s,
         .link_bytes_per_s = c.gpu_link_bytes_per_s});
  }
  if (c.link_bytes_per_flop > 0) {
    // Only the ratio matters: a 1 TFLOP/s GPU with the link that gives it.
    c.targets.push_back({.name = "custom",
                         .label = fmt::format("custom {:g} B/FLOP", c.link_bytes_per_flop),
                         .gpu_flops_per_s = 1e12,
                         .link_bytes_per_s = c.link_bytes_per_flop * 1e12});
  }
  if (c.targets.empty()) {
    LMS_ASSIGN_OR_RETURN(c.targets, parse_presets("v100-nvlink2,h100-pcie5-tc"));
  }
  if (c.gpu_efficiency > 0) {
    for (LinkPreset& t : c.targets) t.efficiency = c.gpu_efficiency;
  }
  if (c.arch.empty()) c.arch = c.data_dir.empty() ? "reduced" : "isensee";
  // Per Note [Ratio threads], one compute thread unless --threads N.
  if (c.threads == 0) c.threads = 1;
  return absl::OkStatus();
}

void apply_defaults(BenchCommand& c) {
  const bool overhead = c.mode == Mode::kOverhead;
  if (c.capacity_bytes == 0) c.capacity_bytes = (overhead ? uint64_t{1024} : uint64_t{256}) << 20;
  if (c.steps == 0) {
    const bool three = overhead || c.mode == Mode::kContention;
    // ratio: 4 timed steps per run, for its best step (Note [Best timed step]).
    c.steps = c.mode == Mode::kRatio ? 5 : three ? 3 : c.mode == Mode::kScaling ? 4 : 2;
  }
  if (c.host_pool_bytes == 0) c.host_pool_bytes = (c.cuda ? uint64_t{4} : uint64_t{16}) << 30;
  // Note [Sweep time model].
  if (c.time_model.empty()) c.time_model = c.cuda ? "measured" : "roofline";
  if (c.sizes.empty()) {
    if (c.mode == Mode::kVdsr) c.sizes = {4, 8, 16, 32, 64};
    if (c.mode == Mode::kUnet3d) c.sizes = {32, 48, 64};
    if (c.mode == Mode::kOnnx) c.sizes = {1, 2, 4, 8};
    if (overhead) c.sizes = {8};
    if (c.mode == Mode::kScaling) c.sizes = {4};
    if (c.mode == Mode::kContention) c.sizes = {c.model == "unet3d" ? int64_t{48} : 16};
  }
  if (c.mode == Mode::kContention) apply_contention_defaults(c);
  if (c.mode == Mode::kUnet3d && c.arch.empty())
    c.arch = c.data_dir.empty() ? "reduced" : "isensee";
  if (c.study_steps < 0) c.study_steps = c.mode == Mode::kUnet3d && !c.data_dir.empty() ? 100 : 0;
  if (c.out_dir.empty()) c.out_dir = "out/unet3d_case_study";
}

// One flag at args[*i] (and its value); advances *i past what it used.
absl::Status parse_flag(const std::vector<std::string>& args, size_t* i, BenchCommand& c) {
  std::string arg = args[*i];
  if (arg == "--help" || arg == "-h") {
    c.mode = Mode::kHelp;
    return absl::OkStatus();
  }
  if (arg == "--search" || arg == "--no-search" || arg == "--no-confirm") {
    if (c.mode == Mode::kOverhead || c.mode == Mode::kContention || c.mode == Mode::kScaling ||
        c.mode == Mode::kRatio) {
      return absl::InvalidArgumentError(
          fmt::format("{}: not a flag of `lms-bench {}`", arg, mode_name(c.mode)));
    }
    if (arg == "--no-confirm")
      c.confirm = false;
    else
      c.search = arg == "--search";
    return absl::OkStatus();
  }
  std::string value;
  bool has_value = false;
  if (size_t eq = arg.find('='); eq != std::string::npos) {
    value = arg.substr(eq + 1);
    arg = arg.substr(0, eq);
    has_value = true;
  }
  auto it = flags().find(arg);
  if (it == flags().end()) {
    return absl::InvalidArgumentError(
        fmt::format("unknown flag '{}' (see lms-bench --help)", args[*i]));
  }
  if (!it->second.modes.count(c.mode)) {
    return absl::InvalidArgumentError(
        fmt::format("{}: not a flag of `lms-bench {}`", arg, mode_name(c.mode)));
  }
  if (!has_value) {
    if (*i + 1 >= args.size()) {
      return absl::InvalidArgumentError(fmt::format("{}: missing value", arg));
    }
    value = args[++*i];
  }
  return it->second.set(c, value);
}

// The largest side s with s^3 * per_unit <= limit.
int64_t largest_cube_side(uint64_t limit, uint64_t per_unit) {
  const uint64_t cubes = limit / per_unit;
  auto fits = [&](int64_t s) {
    return io::checked_product({s, s, s}).value_or(UINT64_MAX) <= cubes;
  };
  int64_t s = static_cast<int64_t>(std::cbrt(static_cast<double>(cubes)));
  while (s > 0 && !fits(s)) --s;
  while (fits(s + 1)) ++s;
  return s;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> parse_size_list(const std::string& flag,
                                                     const std::string& text) {
  std::vector<int64_t> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    absl::StatusOr<int64_t> v = parse_int(flag, text.substr(begin, end - begin), 1, 1 << 20);
    if (!v.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("{} '{}': expected a comma-separated list of positive integers", flag, text));
    }
    out.push_back(*v);
    begin = end + 1;
  }
  return out;
}

absl::Status check_host_memory(const BenchCommand& c, uint64_t limit) {
  if (c.mode == Mode::kRatio) {  // each model at its one size
    for (const std::string& model : c.ratio_models) {
      BenchCommand one = c;
      one.mode = model == "unet3d" ? Mode::kUnet3d : model == "vdsr" ? Mode::kVdsr : Mode::kOnnx;
      one.sizes = {model == "unet3d" ? c.ratio_size : c.ratio_batch};
      LMS_RETURN_IF_ERROR(check_host_memory(one, limit));
    }
    return absl::OkStatus();
  }
  if (c.sizes.empty() || c.mode == Mode::kHelp) return absl::OkStatus();
  const int64_t size = *std::max_element(c.sizes.begin(), c.sizes.end());
  if (c.mode == Mode::kOnnx) {
    LMS_ASSIGN_OR_RETURN(const OnnxInput in, parse_onnx_input(c.onnx_input));
    std::vector<int64_t> dims = in.shape;
    dims[static_cast<size_t>(in.batch_axis)] = size;
    dims.push_back(4);
    auto product = [](const std::vector<int64_t>& v) -> std::optional<uint64_t> {
      uint64_t p = 1;
      for (int64_t d : v) {
        if (__builtin_mul_overflow(p, static_cast<uint64_t>(d), &p)) return std::nullopt;
      }
      return p;
    };
    const std::optional<uint64_t> per_sample = product(in.shape);
    return io::check_host_bytes(
        fmt::format("--batch {}", size), fmt::format("the input batch of '{}'", in.name),
        fmt::format("{} x 4", fmt::join(dims.begin(), dims.end() - 1, " x ")), product(dims), limit,
        per_sample && *per_sample * 4 <= limit
            ? fmt::format("the largest --batch is {}", limit / (*per_sample * 4))
            : std::string("not even one sample fits"));
  }
  if (c.mode == Mode::kUnet3d || (c.mode == Mode::kContention && c.model == "unet3d")) {
    const Unet3dBenchModel m;
    const int64_t channels = c.data_dir.empty() ? m.in_channels + m.classes : 1 + kMriClasses;
    const uint64_t per_voxel = static_cast<uint64_t>(channels) * 4;
    return io::check_host_bytes(
        fmt::format("--size {}", size), "the image and label volumes",
        fmt::format("{} x {} x {} x {} x 4", channels, size, size, size),
        io::checked_product({channels, size, size, size, 4}), limit,
        fmt::format("the largest --size is {}", largest_cube_side(limit, per_voxel)));
  }
  const std::optional<uint64_t> per_patch = io::checked_product({2, c.crop, c.crop, 4});
  std::string allowed =
      per_patch && *per_patch <= limit
          ? fmt::format("at --crop {} the largest --batch is {}", c.crop, limit / *per_patch)
          : fmt::format("the largest --crop (at --batch 1) is {}",
                        io::largest_square_side(limit, 2 * 4));
  return io::check_host_bytes(fmt::format("--batch {} with --crop {}", size, c.crop),
                              "the lr and hr input batches",
                              fmt::format("2 x {} x {} x {} x 4", size, c.crop, c.crop),
                              io::checked_product({2, size, c.crop, c.crop, 4}), limit, allowed);
}

// The outputs are probed before a sweep that may run for an hour: --json
// FILE must be writable, and so must a file in --trace DIR (both created if
// missing, as the writers would).
absl::Status check_outputs(const BenchCommand& c) {
  auto probe = [](const char* flag, const std::string& value, const std::string& path) {
    absl::Status s = io::check_writable(path);
    if (s.ok()) return s;
    return absl::InvalidArgumentError(
        fmt::format("{} {}: cannot be written: {}", flag, value, std::string(s.message())));
  };
  if (!c.json_path.empty()) LMS_RETURN_IF_ERROR(probe("--json", c.json_path, c.json_path));
  if (!c.trace_dir.empty()) {
    LMS_RETURN_IF_ERROR(probe("--trace", c.trace_dir, c.trace_dir + "/lms-bench.probe"));
  }
  return absl::OkStatus();
}

absl::StatusOr<BenchCommand> parse_command_line(const std::vector<std::string>& args) {
  BenchCommand c;
  if (args.empty()) return c;  // help
  LMS_ASSIGN_OR_RETURN(c.mode, parse_mode(args[0]));
  if (c.mode == Mode::kHelp) return c;
  for (size_t i = 1; i < args.size(); ++i) {
    LMS_RETURN_IF_ERROR(parse_flag(args, &i, c));
    if (c.mode == Mode::kHelp) return c;
  }
  apply_defaults(c);
  if (c.mode == Mode::kRatio && !c.onnx_path.empty()) {
    if (c.onnx_input.empty() || c.onnx_loss.empty()) {
      return absl::InvalidArgumentError(fmt::format(
          "lms-bench ratio --model {} needs --input NAME:DIMS (B or T the dimension --batch "
          "sets) and --loss cross-entropy:C|mse (e.g. --input ids:4,T --loss cross-entropy:256 "
          "--batch 512)",
          c.onnx_path));
    }
    LMS_RETURN_IF_ERROR(parse_onnx_input(c.onnx_input).status());
    LMS_RETURN_IF_ERROR(parse_onnx_loss(c.onnx_loss).status());
  }
  if (c.mode == Mode::kOnnx) {
    if (c.onnx_path.empty() || c.onnx_input.empty() || c.onnx_loss.empty()) {
      return absl::InvalidArgumentError(
          "lms-bench onnx needs --model FILE.onnx, --input NAME:B,DIMS and --loss "
          "cross-entropy:C|mse (e.g. --model resnet50.onnx --input input:B,3,224,224 --loss "
          "cross-entropy:1000)");
    }
    LMS_RETURN_IF_ERROR(parse_onnx_input(c.onnx_input).status());
    LMS_RETURN_IF_ERROR(parse_onnx_loss(c.onnx_loss).status());
  }
  LMS_RETURN_IF_ERROR(apply_ratio_defaults(c));
  LMS_RETURN_IF_ERROR(check_host_memory(c, io::host_memory_limit_bytes()));
  LMS_RETURN_IF_ERROR(check_outputs(c));
  return c;
}

std::string usage() {
  return R"(lms-bench: what Large Model Support buys under one device capacity (CPU-emulated device
or, with --device cuda, a GPU).

  lms-bench vdsr     [--batch 4,8,16,32,64] [--capacity 256MiB] [--data DIR] [--crop 48]
                     [--depth 20] [--channels 64] [--steps 2] [--trace DIR] [--json FILE]
                     [--no-search] [--no-confirm]
  lms-bench unet3d   [--size 32,48,64] [--capacity 256MiB] [--data DIR] [--arch isensee|reduced]
                     [--filters 8] [--levels 3] [--steps 2] [--trace DIR] [--json FILE]
                     [--study-steps 100] [--study-lr 3e-3] [--study-lr-decay poly|constant]
                     [--out DIR] [...]
  lms-bench onnx     --model FILE.onnx --input NAME:B,DIMS|NAME:N,T --loss cross-entropy:C|mse
                     [--batch 1,2,4,8] [--capacity 256MiB] [--steps 2] [--trace DIR]
                     [--json FILE] [--no-search] [--no-confirm] [...]
  lms-bench overhead [--batch 8] [--capacity 1GiB] [--link 12GB/s] [--budget-fraction 0.6]
                     [--steps 3] [--data DIR] [--json FILE]
  mpirun -np N lms-bench scaling [--batch 4] [--threads 1] [--depth 20] [--channels 64]
                     [--crop 48] [--capacity 256MiB] [--budget-fraction 0.6] [--steps 4]
                     [--json FILE]
  lms-bench contention [--model vdsr|unet3d] [--batch 16 | --size 48] [--devices 1,2]
                     [--link 100MB/s] [--budget-fraction 0.6] [--steps 3] [--trace DIR]
                     [--json FILE] [--data DIR] [--filters 8] [--levels 3] [...]
  lms-bench ratio    [--model vdsr,unet3d,FILE.onnx] [--input NAME:DIMS --loss ...]
                     [--preset v100-nvlink2,h100-pcie5-tc | all]
                     [--gpu-flops 60TFLOP/s --gpu-link 50GB/s | --link-ratio 7.5e-4]
                     [--gpu-efficiency 0.5]
                     [--oversubscription 1.5,2,4] [--batch 8] [--size 32] [--steps 5]
                     [--threads 1] [--json FILE] [--crop 48] [--depth 20] [--filters 8] [...]

vdsr / unet3d: trains every batch (VDSR, Adam) or volume side (3-D U-Net, batch 1) for --steps
steps with LMS off and on (lms::rewrite on the device, auto policy, budget = the capacity unless
the config sets device_memory_limit, within the device's pinned host pool, times from
--time-model), prints the table (time/step is the mean after the first step) and the time model
of the plans, then searches the largest batch / size each way and the planner's working-set
limit.
vdsr --data DIR: photo patches from DIR/train (else random data). unet3d --data DIR (data/mri
of scripts/fetch_data.sh): ch2bet T1 + AAL atlas in 13 classes, crops of side S (flips, jitter,
rotations, scalings) from the pair resampled to a cube of side S + S/4 (rounded up to a multiple
of 2^(levels-1)); 1 input channel. Without --data: random volumes, 4 channels, 4 classes.
--arch isensee (Isensee et al.'s U-Net with deep supervision; default with --data) or reduced
(default without).
unet3d --data, then the case study (TFLMS, arXiv 1807.02037 Sec. 5): the same U-Net trained
--study-steps steps (Adam, --study-lr, decayed to 0 over the steps as nnU-Net's poly schedule
unless --study-lr-decay constant) at the largest size without LMS and at the largest with
LMS, both under --capacity; Dice per class on the evaluation volume (ch2better) on the
high-resolution grid, the low-resolution prediction resampled up. Checkpoints and three-slice
PNGs go to --out (out/unet3d_case_study). --study-steps 0 skips it.
onnx: the vdsr sweep for a model of your own, exported from PyTorch with scripts/export_onnx.py:
lms::import_onnx with the input NAME's shape DIMS (B: the batch of the row; or T: the context
length of the row at a fixed batch, a transformer's context sweep, e.g. --input ids:4,T --batch
128,256,512), lms::attach_loss on the model's first output (cross-entropy:C against random labels
in [0, C), the output logits [N, C] or [..., C], a label per position; or mse against a random
target), SGD with momentum 0.9 and rate 0.01, standard normal inputs (an int64 input: token ids
drawn in [0, V) of the embedding that reads it).
overhead: one batch that fits both ways; time per step without LMS, with LMS forced to swap
(budget = --budget-fraction of the no-LMS peak) on an unthrottled link and on a link throttled
to --link; predicted (simulator) vs measured stall and step time.
scaling (under mpirun): data-parallel VDSR with LMS (gradient all-reduce over MPI) on 1, 2, 4 ...
ranks of the launch, --batch per rank (weak scaling), LMS budget --budget-fraction of the no-LMS
peak; ranks, step time, speedup and efficiency.
--threads per rank defaults to the cores divided by the ranks (at least 1).
contention: one model per emulated device, with LMS (capacity = --budget-fraction of the no-LMS
peak), for each count of --devices sharing one host link of --link each way (default 100MB/s,
so copies matter): per device the copy throughput each way, compute utilisation and step time,
the simulator's predicted step (LmsConfig::link_devices) and its error, and each count against
1 device per link. Each device computes on 1 thread, so 2 devices on 2 cores share the link,
not cores.
ratio: the link throttled to a target system's compute-to-link ratio, link = measured device
FLOP/s (best convolution node, calibrate_cost_model) x target link / (target GPU peak FLOP/s x
--gpu-efficiency); presets with FP32 peaks and efficiency 1: v100-pcie3 (15.7 TFLOP/s, 12 GB/s),
v100-nvlink2 (15.7, 60), h100-pcie5 (67, 50), gh200-c2c (67, 350); with dense TF32 tensor-core
peaks and efficiency 0.5: h100-pcie5-tc (495, 50), h200-pcie5-tc (495, 50), gh200-c2c-tc (495,
350); or a custom target (--gpu-flops and --gpu-link, or --link-ratio in link bytes per FLOP;
efficiency 1). For each model, target and oversubscription (device capacity = no-LMS peak /
factor): step time under the swap, recompute and joint plans (LmsConfig auto_actions) measured
and predicted, throughput relative to no LMS at unlimited memory on the same link, and the goals
(joint >= 80% of ideal at 2x under h100-pcie5-tc, >= 95% under v100-nvlink2, joint never slower
than the better single plan). The device computes on 1 thread unless --threads N. A model given
as FILE.onnx (one per run) runs as lms-bench onnx builds it, with --input and --loss, at the
--batch value of its B or T dimension.

Common flags:
  --capacity BYTES    device memory (256MiB; overhead 1GiB)
  --device cpu|cuda   vdsr, unet3d: the emulated device (cpu) or CUDA GPU 0; on cuda copies run at
                      the real link's speed
  --time-model measured|roofline
                      vdsr, unet3d: how the LMS rows and probes are planned (lms::rewrite on the
                      device; replaces the config's time_model). measured: each node and the link
                      profiled on the device first (default on cuda); roofline: the config's
                      [cost_model] and [link] (default on cpu, whose link is that throttle;
                      measured makes the CPU sweep several times slower). The table says which
  --lms FILE          LMS config (TOML, configs/lms.toml); --lms-set key=value overrides a key
  --link BW           link bandwidth both ways ("12GB/s"): the CPU device's copy throttle and the
                      roofline's link (default: the config's [link])
  --host-pool BYTES   pinned host pool limit (cpu 16GiB, reserved lazily; cuda 4GiB, pinned)
  --threads N         compute threads (0 = all cores)    --seed N   weights and batches (1)
  --trace DIR         per run a Chrome trace, per size a memory SVG (LMS off and on)
  --json FILE         every row and the limits as JSON, written atomically
)";
}

}  // namespace lms::bench
