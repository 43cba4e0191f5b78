#include "cli.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string_view>
#include <vector>

#include "contention.h"
#include "flags.h"
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

// A batch or a volume side.
constexpr flags::IntRange kSizeRange = {.min = 1, .max = 1 << 20};
// contention's default batch (VDSR) and volume side (U-Net).
constexpr int64_t kContentionVdsrBatch = 16;
constexpr int64_t kContentionUnetSize = 48;

constexpr char kExitStatus[] = "exit status: 0 on success, 2 for bad flags, 1 when a run fails.";

// The command of a mode: `summary` in lms-bench --help, `details` after the
// flags in lms-bench MODE --help.
CLI::App* add_mode(CLI::App& app, const char* name, const char* summary, const char* details) {
  CLI::App* m = app.add_subcommand(name, summary);
  m->footer(fmt::format("{}\n\n{}", details, kExitStatus));
  return m;
}

// A mode's command before its flags: the defaults --help shows.
BenchCommand mode_defaults(Mode m) {
  BenchCommand c;
  c.mode = m;
  c.capacity_bytes = (m == Mode::kOverhead ? uint64_t{1024} : uint64_t{256}) << 20;
  // ratio: 4 timed steps per run, for its best step (Note [Best timed step]).
  c.steps = m == Mode::kRatio                                ? 5
            : m == Mode::kOverhead || m == Mode::kContention ? 3
            : m == Mode::kScaling                            ? 4
                                                             : 2;
  if (m == Mode::kVdsr) c.sizes = {4, 8, 16, 32, 64};
  if (m == Mode::kUnet3d) c.sizes = {32, 48, 64};
  if (m == Mode::kOnnx) c.sizes = {1, 2, 4, 8};
  if (m == Mode::kOverhead) c.sizes = {8};
  if (m == Mode::kScaling) c.sizes = {4};
  c.out_dir = "out/unet3d_case_study";
  return c;
}

// One size into `sizes` (overhead, scaling and contention run one).
CLI::Option* add_one_size(CLI::App& app, std::string_view names, std::vector<int64_t>* sizes,
                          std::string help) {
  CLI::Option* o =
      flags::add_value(app, names, std::move(help), [=](const std::string& v) -> absl::Status {
        LMS_ASSIGN_OR_RETURN(int64_t n, flags::parse_int(v, kSizeRange));
        *sizes = {n};
        return absl::OkStatus();
      });
  return sizes->empty() ? o : o->default_str(fmt::format("{}", sizes->front()));
}

// One of two words into a bool: `yes` sets *target, `no` clears it.
CLI::Option* add_word_switch(CLI::App& app, std::string_view names, std::string help, bool* target,
                             std::string yes, std::string no) {
  const std::string allowed = fmt::format("one of {}, {}", no, yes);
  return flags::add_value(app, names, std::move(help),
                          [=](const std::string& v) -> absl::Status {
                            if (v != yes && v != no) {
                              return absl::InvalidArgumentError(flags::bad_value(v, allowed));
                            }
                            *target = v == yes;
                            return absl::OkStatus();
                          })
      ->default_str(*target ? yes : no);
}

// A number; `allowed` says what when it is not one within `range`.
CLI::Option* add_real(CLI::App& app, std::string_view names, double* target, std::string help,
                      flags::RealRange range, std::string allowed) {
  return flags::add_value(app, names, std::move(help), [=](const std::string& v) -> absl::Status {
    absl::StatusOr<double> x = flags::parse_real(v, range);
    if (!x.ok()) return absl::InvalidArgumentError(flags::bad_value(v, allowed));
    *target = *x;
    return absl::OkStatus();
  });
}

// Flags of every mode.
void add_common_flags(CLI::App& app, BenchCommand& c, std::string data_help) {
  flags::add_int(app, "--steps", &c.steps, "training steps per run", {.min = 1, .max = 100000});
  flags::add_int(app, "--seed", &c.seed, "weights and batches", {.max = int64_t{1} << 62});
  flags::add_string(app, "--lms FILE", &c.lms_file, "LMS config (TOML, configs/lms.toml)");
  flags::add_value(app, "--lms-set KEY=VALUE", "override a key of the config (repeatable)",
                   [&c](const std::string& v) -> absl::Status {
                     if (v.find('=') == std::string::npos) {
                       return absl::InvalidArgumentError(flags::bad_value(v, "key=value"));
                     }
                     c.lms_sets.push_back(v);
                     return absl::OkStatus();
                   })
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  flags::add_bytes(app, "--host-pool", &c.host_pool_bytes,
                   "pinned host pool limit (cpu 16GiB, reserved lazily; cuda 4GiB, pinned)");
  flags::add_string(app, "--json FILE", &c.json_path,
                    "every row and the limits as JSON, written atomically");
  flags::add_string(app, "--data DIR", &c.data_dir, std::move(data_help));
  flags::add_choice(app, "--precision", &c.precision,
                    "fp32, or mixed precision as torch.autocast: bf16, fp16 (lms::autocast)",
                    {"fp32", "bf16", "fp16"});
}

void add_capacity(CLI::App& app, BenchCommand& c) {
  flags::add_bytes(app, "--capacity", &c.capacity_bytes, "device memory");
}

void add_threads(CLI::App& app, BenchCommand& c, std::string help) {
  flags::add_int(app, "--threads", &c.threads, std::move(help), {.max = flags::kMaxThreads});
}

void add_link(CLI::App& app, BenchCommand& c, std::string help) {
  flags::add_bandwidth(app, "--link", &c.link_bytes_per_s, std::move(help));
}

void add_trace(CLI::App& app, BenchCommand& c) {
  flags::add_string(app, "--trace DIR", &c.trace_dir,
                    "per run a Chrome trace, per size a memory SVG (LMS off and on)");
}

void add_budget_fraction(CLI::App& app, BenchCommand& c) {
  flags::add_real(app, "--budget-fraction", &c.budget_fraction,
                  "the LMS budget as a fraction of the no-LMS peak",
                  {.min = 0, .max = 1, .min_open = true, .max_open = true});
}

// vdsr, unet3d and onnx: the sweeps.
void add_sweep_flags(CLI::App& app, BenchCommand& c) {
  add_capacity(app, c);
  add_word_switch(app, "--device cpu|cuda",
                  "the emulated device (cpu) or CUDA GPU 0; on cuda copies run at the\n"
                  "real link's speed",
                  &c.cuda, "cuda", "cpu");
  flags::add_choice(app, "--time-model", &c.time_model,
                    "how the LMS rows and probes are planned (lms::rewrite on the device;\n"
                    "replaces the config's time_model). measured: each node and the link\n"
                    "profiled on the device first (default on cuda); roofline: the config's\n"
                    "[cost_model] and [link] (default on cpu, whose link is that throttle;\n"
                    "measured makes the CPU sweep several times slower). The table says which",
                    {"measured", "roofline"});
  add_threads(app, c, "compute threads (0 = all cores)");
  add_link(app, c,
           "link bandwidth both ways: the CPU device's copy throttle and the\n"
           "roofline's link (default: the config's [link])");
  add_trace(app, c);
  flags::add_switch(app, "--search", &c.search, "search the limits (the default)");
  flags::add_switch(app, "--no-search", &c.search, "skip the search of the limits", false);
  flags::add_switch(app, "--no-confirm", &c.confirm, "skip the real steps at the limits", false);
}

// VDSR's shape (vdsr, overhead, contention, scaling, ratio).
void add_vdsr_shape(CLI::App& app, BenchCommand& c) {
  flags::add_int(app, "--crop", &c.crop, "patch side in pixels", {.min = 1, .max = 4096});
  flags::add_int(app, "--depth", &c.depth, "conv layers", {.min = 2, .max = 1000});
  flags::add_int(app, "--channels", &c.channels, "filters per layer", {.min = 1, .max = 4096});
}

// The U-Net's shape (unet3d, contention, ratio).
void add_unet_shape(CLI::App& app, BenchCommand& c) {
  flags::add_int(app, "--filters", &c.base_filters, "base filters", {.min = 1, .max = 1024});
  flags::add_int(app, "--levels", &c.levels, "resolution levels", {.min = 1, .max = 8});
}

// --input and --loss of an ONNX model (onnx, ratio), checked after parsing.
void add_onnx_flags(CLI::App& app, BenchCommand& c, const std::string& size_letters) {
  flags::add_string(
      app, "--input NAME:DIMS", &c.onnx_input,
      fmt::format("the model's input and its shape, {} the swept dimension", size_letters));
  flags::add_string(app, "--loss cross-entropy:C|mse", &c.onnx_loss,
                    "cross-entropy against random labels in [0, C) on the logits [N, C] or\n"
                    "[..., C] (a label per position), or mse against a random target");
}

CLI::App* add_vdsr(CLI::App& app, BenchCommand& c) {
  CLI::App* m = add_mode(
      app, "vdsr",
      "VDSR (Adam): a batch sweep with LMS off and on, then the largest batch each way",
      "VDSR: trains every --batch (Adam) for --steps steps with LMS off and on (lms::rewrite on\n"
      "the device, auto policy, budget = the capacity unless the config sets\n"
      "device_memory_limit, within the device's pinned host pool, times from --time-model),\n"
      "prints the table (time/step is the mean after the first step) and the time model of\n"
      "the plans, then searches the largest batch each way and the planner's working-set\n"
      "limit.");
  flags::add_int_list(*m, "--batch", &c.sizes, "the batches, comma-separated", kSizeRange);
  add_vdsr_shape(*m, c);
  add_sweep_flags(*m, c);
  add_common_flags(*m, c, "photo patches from DIR/train (else random data)");
  return m;
}

CLI::App* add_unet3d(CLI::App& app, BenchCommand& c) {
  CLI::App* m = add_mode(
      app, "unet3d", "3-D U-Net: a volume-side sweep with LMS off and on; with --data a case study",
      "3-D U-Net: the vdsr sweep over volume sides (batch 1), then with --data the case study\n"
      "(TFLMS, arXiv 1807.02037 Sec. 5): the same U-Net trained --study-steps steps (Adam,\n"
      "--study-lr, decayed to 0 over the steps as nnU-Net's poly schedule unless\n"
      "--study-lr-decay constant) at the largest size without LMS and at the largest with LMS,\n"
      "both under --capacity; Dice per class on the evaluation volume (ch2better) on the\n"
      "high-resolution grid, the low-resolution prediction resampled up. Checkpoints and\n"
      "three-slice PNGs go to --out. --study-steps 0 skips it.");
  flags::add_int_list(*m, "--size", &c.sizes, "the volume sides, comma-separated", kSizeRange);
  add_unet_shape(*m, c);
  flags::add_choice(*m, "--arch", &c.arch,
                    "isensee (Isensee et al.'s U-Net with deep supervision; default with --data)\n"
                    "or reduced (default without)",
                    {"isensee", "reduced"});
  flags::add_int(*m, "--study-steps", &c.study_steps,
                 "steps of each case-study run (default 100 with --data, 0 without)",
                 {.max = 1000000})
      ->default_str("");
  add_real(*m, "--study-lr", &c.study_lr, "Adam's rate in the case study",
           {.min = 0, .max = 1, .min_open = true, .max_open = true}, "a learning rate in (0, 1)")
      ->default_str(fmt::format("{}", c.study_lr));
  add_word_switch(*m, "--study-lr-decay poly|constant",
                  "poly: decay over --study-steps; constant: a constant rate", &c.study_lr_decay,
                  "poly", "constant");
  flags::add_string(*m, "--out DIR", &c.out_dir, "the case study's checkpoints and PNGs");
  add_sweep_flags(*m, c);
  add_common_flags(
      *m, c,
      "data/mri of scripts/fetch_data.sh: ch2bet T1 + AAL atlas in 13 classes, crops of\n"
      "side S (flips, jitter, rotations, scalings) from the pair resampled to a cube of side\n"
      "S + S/4 (rounded up to a multiple of 2^(levels-1)); 1 input channel. Without --data:\n"
      "random volumes, 4 channels, 4 classes");
  return m;
}

CLI::App* add_onnx(CLI::App& app, BenchCommand& c) {
  CLI::App* m = add_mode(
      app, "onnx", "the vdsr sweep for an ONNX model of your own (--model, --input, --loss)",
      "the vdsr sweep for a model of your own, exported from PyTorch with\n"
      "scripts/export_onnx.py: lms::import_onnx with the input NAME's shape DIMS (B: the batch\n"
      "of the row; or T: the context length of the row at a fixed batch, a transformer's\n"
      "context sweep, e.g. --input ids:4,T --batch 128,256,512), lms::attach_loss on the\n"
      "model's first output, SGD with momentum 0.9 and rate 0.01, standard normal inputs (an\n"
      "int64 input: token ids drawn in [0, V) of the embedding that reads it).\n"
      "Needs --model, --input and --loss.");
  flags::add_string(*m, "--model FILE.onnx", &c.onnx_path, "the model");
  add_onnx_flags(*m, c, "B (the batch) or T (the tokens at a fixed batch)");
  flags::add_int_list(*m, "--batch", &c.sizes, "the values of B or T, comma-separated", kSizeRange);
  add_sweep_flags(*m, c);
  add_common_flags(*m, c, "unused: the inputs are random");
  return m;
}

// overhead and scaling: one VDSR batch, LMS at a fraction of its peak.
CLI::App* add_budget_mode(CLI::App& app, BenchCommand& c, const char* name, const char* summary,
                          const char* details, const char* batch_help, const char* threads_help) {
  CLI::App* m = add_mode(app, name, summary, details);
  add_one_size(*m, "--batch N", &c.sizes, batch_help);
  add_vdsr_shape(*m, c);
  add_capacity(*m, c);
  add_budget_fraction(*m, c);
  add_threads(*m, c, threads_help);
  add_link(*m, c,
           "link bandwidth both ways, the CPU device's copy throttle (default: the\n"
           "config's [link])");
  add_common_flags(*m, c, "photo patches from DIR/train (else random data)");
  return m;
}

CLI::App* add_contention(CLI::App& app, BenchCommand& c) {
  CLI::App* m = add_mode(
      app, "contention", "one model per emulated device, devices sharing one host link",
      "one model per emulated device, with LMS (capacity = --budget-fraction of the no-LMS\n"
      "peak), for each count of --devices sharing one host link of --link each way: per device\n"
      "the copy throughput each way, compute utilisation and step time, the simulator's\n"
      "predicted step (LmsConfig::link_devices) and its error, and each count against 1\n"
      "device per link. Each device computes on 1 thread, so 2 devices on 2 cores share the\n"
      "link, not cores.");
  flags::add_choice(*m, "--model", &c.model, "the model of every device", {"vdsr", "unet3d"});
  add_one_size(*m, "--batch N", &c.sizes, "VDSR's batch")
      ->default_str(fmt::format("{}", kContentionVdsrBatch));
  add_one_size(*m, "--size N", &c.sizes, "the U-Net's volume side")
      ->default_str(fmt::format("{}", kContentionUnetSize));
  flags::add_int_list(*m, "--devices", &c.devices,
                      "the counts of devices sharing the link, one configuration each",
                      {.min = 1, .max = 16});
  add_vdsr_shape(*m, c);
  add_unet_shape(*m, c);
  add_budget_fraction(*m, c);
  add_link(*m, c,
           fmt::format("the shared link, each way (default {}MB/s, so copies matter)",
                       kContentionLinkBytesPerS / 1e6));
  add_trace(*m, c);
  add_common_flags(*m, c, "vdsr: photo patches from DIR/train; unet3d: the MRI (else random)");
  return m;
}

void add_ratio_model(CLI::App& app, BenchCommand& c) {
  flags::add_value(
      app, "--model vdsr,unet3d,FILE.onnx",
      "the models, in order; one FILE.onnx at most, as lms-bench onnx builds it\n"
      "(with --input and --loss), at the --batch value of its B or T dimension",
      [&c](const std::string& v) -> absl::Status {
        static constexpr char kAllowed[] =
            "vdsr, unet3d and one FILE.onnx (with --input and --loss), comma-separated";
        std::vector<std::string> models;
        std::string onnx;
        for (size_t begin = 0; begin <= v.size();) {
          const size_t end = std::min(v.find(',', begin), v.size());
          const std::string word = v.substr(begin, end - begin);
          const bool is_onnx = word.size() > 5 && word.ends_with(".onnx");
          if (word != "vdsr" && word != "unet3d" && !is_onnx) {
            return absl::InvalidArgumentError(
                flags::bad_value(v, fmt::format("'{}' is none of {}", word, kAllowed)));
          }
          if (is_onnx && !onnx.empty()) {
            return absl::InvalidArgumentError(flags::bad_value(
                v, fmt::format("one ONNX model per run, not '{}' and '{}'", onnx, word)));
          }
          if (is_onnx) onnx = word;
          models.push_back(word);
          begin = end + 1;
        }
        c.ratio_models = std::move(models);
        c.onnx_path = onnx;
        return absl::OkStatus();
      })
      ->default_str(fmt::format("{}", fmt::join(c.ratio_models, ",")));
}

CLI::App* add_ratio(CLI::App& app, BenchCommand& c) {
  CLI::App* m = add_mode(
      app, "ratio", "the link throttled to a target system's compute-to-link ratio",
      "the link throttled to a target system's compute-to-link ratio, link = measured device\n"
      "FLOP/s (best convolution node, calibrate_cost_model) x target link / (target GPU peak\n"
      "FLOP/s x --gpu-efficiency); presets with FP32 peaks and efficiency 1: v100-pcie3\n"
      "(15.7 TFLOP/s, 12 GB/s), v100-nvlink2 (15.7, 60), h100-pcie5 (67, 50), gh200-c2c (67,\n"
      "350); with dense TF32 tensor-core peaks and efficiency 0.5: h100-pcie5-tc (495, 50),\n"
      "h200-pcie5-tc (495, 50), gh200-c2c-tc (495, 350); dense BF16 peaks, efficiency 0.5, for\n"
      "--precision bf16: h100-pcie5-bf16 (989, 50), h200-pcie5-bf16 (989, 50), gh200-c2c-bf16\n"
      "(989, 350); or a custom target (--gpu-flops and\n"
      "--gpu-link, or --link-ratio in link bytes per FLOP; efficiency 1). For each model,\n"
      "target and oversubscription (device capacity = no-LMS peak / factor): step time under\n"
      "the swap, recompute and joint plans (LmsConfig auto_actions) measured and predicted,\n"
      "throughput relative to no LMS at unlimited memory on the same link, and the goals\n"
      "(joint >= 80% of ideal at 2x under h100-pcie5-tc, >= 95% under v100-nvlink2, joint\n"
      "never slower than the better single plan).");
  add_ratio_model(*m, c);
  add_onnx_flags(*m, c, "B or T the dimension --batch sets");
  flags::add_value(*m, "--preset NAMES",
                   "targets, comma-separated, or all (default v100-nvlink2,h100-pcie5-tc\n"
                   "unless a custom target is given)",
                   [&c](const std::string& v) -> absl::Status {
                     absl::StatusOr<std::vector<LinkPreset>> presets = parse_presets(v);
                     if (!presets.ok()) {
                       return absl::InvalidArgumentError(
                           flags::bad_value(v, to_std(presets.status().message())));
                     }
                     c.targets = *std::move(presets);
                     return absl::OkStatus();
                   });
  flags::add_value(*m, "--gpu-flops RATE",
                   "a custom target's peak, e.g. 60TFLOP/s (with --gpu-link)",
                   [&c](const std::string& v) -> absl::Status {
                     absl::StatusOr<double> f = parse_flop_rate(v);
                     if (!f.ok()) {
                       return absl::InvalidArgumentError(flags::bad_value(
                           v,
                           "a FLOP rate > 0 such as 60TFLOP/s, in FLOP/s, GFLOP/s, TFLOP/s or "
                           "PFLOP/s"));
                     }
                     c.gpu_flops_per_s = *f;
                     return absl::OkStatus();
                   });
  flags::add_bandwidth(*m, "--gpu-link", &c.gpu_link_bytes_per_s,
                       "a custom target's link, e.g. 50GB/s (with --gpu-flops)");
  add_real(*m, "--link-ratio", &c.link_bytes_per_flop,
           "a custom target as link bytes per FLOP of compute", {.min = 0, .min_open = true},
           "link bytes per FLOP of compute, a number > 0 (H100 + PCIe Gen5: 50e9 / 67e12 = "
           "7.5e-4)");
  add_real(*m, "--gpu-efficiency", &c.gpu_efficiency,
           "the fraction of the GPU's peak a step reaches, for every target",
           {.min = 0, .max = 1, .min_open = true},
           "the fraction of the GPU's peak a step reaches, a number in (0, 1] (default: 1 for "
           "the FP32 presets, 0.5 for the tensor-core ones)");
  flags::add_real_list(*m, "--oversubscription", &c.oversubscription,
                       "factors: device capacity = no-LMS peak / factor",
                       {.min = 1, .min_open = true});
  flags::add_int(*m, "--batch", &c.ratio_batch, "VDSR's batch (and an ONNX model's B or T)",
                 kSizeRange);
  flags::add_int(*m, "--size", &c.ratio_size, "the U-Net's volume side", kSizeRange);
  add_vdsr_shape(*m, c);
  add_unet_shape(*m, c);
  add_threads(*m, c, "compute threads (Note [Ratio threads]: 1 unless given)");
  add_common_flags(*m, c, "vdsr: photo patches from DIR/train; unet3d: the MRI (else random)");
  return m;
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

// What depends on other flags: the host pool and the time model on
// --device, contention's size on --model, the U-Net's architecture and the
// case study on --data.
void apply_defaults(BenchCommand& c) {
  if (c.host_pool_bytes == 0) c.host_pool_bytes = (c.cuda ? uint64_t{4} : uint64_t{16}) << 30;
  // Note [Sweep time model].
  if (c.time_model.empty()) c.time_model = c.cuda ? "measured" : "roofline";
  if (c.mode == Mode::kContention && c.sizes.empty()) {
    c.sizes = {c.model == "unet3d" ? kContentionUnetSize : kContentionVdsrBatch};
  }
  if (c.mode == Mode::kContention) apply_contention_defaults(c);
  if (c.mode == Mode::kUnet3d && c.arch.empty())
    c.arch = c.data_dir.empty() ? "reduced" : "isensee";
  if (c.study_steps < 0) c.study_steps = c.mode == Mode::kUnet3d && !c.data_dir.empty() ? 100 : 0;
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
  // One command per mode, each with the mode's defaults; the one parsed is
  // the result.
  constexpr std::array<Mode, 7> modes = {Mode::kVdsr,     Mode::kUnet3d,  Mode::kOnnx,
                                         Mode::kOverhead, Mode::kScaling, Mode::kContention,
                                         Mode::kRatio};
  std::array<BenchCommand, modes.size()> commands;  // the flags point into them
  for (size_t i = 0; i < modes.size(); ++i) commands[i] = mode_defaults(modes[i]);
  CLI::App app(
      "lms-bench: what Large Model Support buys under one device capacity (CPU-emulated device\n"
      "or, with --device cuda, a GPU).",
      "lms-bench");
  app.require_subcommand(0, 1);
  const std::array<CLI::App*, modes.size()> mode_commands = {
      add_vdsr(app, commands[0]),
      add_unet3d(app, commands[1]),
      add_onnx(app, commands[2]),
      add_budget_mode(
          app, commands[3], "overhead", "LMS overhead on one VDSR batch that fits both ways",
          "one VDSR batch that fits both ways; time per step without LMS, with LMS forced to swap\n"
          "(budget = --budget-fraction of the no-LMS peak) on an unthrottled link and on a link\n"
          "throttled to --link; predicted (simulator) vs measured stall and step time.",
          "the batch", "compute threads (0 = all cores)"),
      add_budget_mode(
          app, commands[4], "scaling", "data-parallel VDSR with LMS under mpirun (weak scaling)",
          "under mpirun -np N: data-parallel VDSR with LMS (gradient all-reduce over MPI)\n"
          "on 1, 2, 4 ... ranks of the launch, --batch per rank (weak scaling), LMS budget\n"
          "--budget-fraction of the no-LMS peak; ranks, step time, speedup and efficiency.",
          "the batch per rank",
          "compute threads per rank (0: the cores divided by the ranks, at least 1)"),
      add_contention(app, commands[5]),
      add_ratio(app, commands[6])};
  app.footer(
      std::string("lms-bench MODE --help lists the flags of a mode, e.g. lms-bench vdsr --help.\n"
                  "  lms-bench vdsr --batch 4,8,16,32,64 --capacity 256MiB [--data DIR]\n"
                  "  lms-bench unet3d --size 32,48,64 --capacity 256MiB [--data data/mri]\n"
                  "  lms-bench onnx --model FILE.onnx --input input:B,3,224,224 --loss "
                  "cross-entropy:1000\n"
                  "  lms-bench overhead --batch 8 --capacity 1GiB --link 12GB/s\n"
                  "  mpirun -np 4 lms-bench scaling --batch 4 --threads 1\n"
                  "  lms-bench contention --model vdsr --devices 1,2 --link 100MB/s\n"
                  "  lms-bench ratio --model vdsr,unet3d --preset v100-nvlink2,h100-pcie5-tc\n") +
      kExitStatus);
  LMS_ASSIGN_OR_RETURN(std::string help, flags::parse(app, args));
  if (!help.empty()) return BenchCommand{.help = std::move(help)};
  size_t parsed = 0;
  while (!mode_commands[parsed]->parsed()) ++parsed;
  BenchCommand c = std::move(commands[parsed]);
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

}  // namespace lms::bench
