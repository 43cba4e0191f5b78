// Command line of lms-bench: one CLI11 command per mode
// (examples/common/flags.h; tests parse in-process). Flags are `--name
// value` or `--name=value`; `lms-bench MODE --help` lists a mode's flags.
//
//   lms-bench vdsr     --batch 4,8,16,32,64 --capacity 256MiB [--data DIR] [--crop 48]
//   lms-bench unet3d   --size 32,48,64 --capacity 256MiB [--data DIR] [--arch isensee|reduced]
//   lms-bench overhead [--batch 8] [--capacity 1GiB] [--link 12GB/s]
//   mpirun -np 4 lms-bench scaling [--batch 4] [--threads 1] [--steps 4]
//   lms-bench contention [--model vdsr|unet3d] [--batch 16] [--link 100MB/s] [--devices 1,2]
//   lms-bench ratio    [--model vdsr,unet3d] [--preset h100-pcie5,v100-nvlink2]
//                      [--gpu-flops 60TFLOP/s --gpu-link 50GB/s] [--oversubscription 1.5,2,4]
//
//   LMS_ASSIGN_OR_RETURN(lms::bench::BenchCommand cmd, lms::bench::parse_command_line(args));
//
// Every error is InvalidArgument naming the flag, the value and what is
// allowed; a flag of another mode is an unexpected argument.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ratio.h"

namespace lms::bench {

enum class Mode { kHelp, kVdsr, kUnet3d, kOverhead, kContention, kScaling, kRatio, kOnnx };

// Note [Sweep time model]: the LMS rows and probes of vdsr / unet3d plan
// with the Device overload of lms::rewrite, whose LmsConfig::time_model
// says where predicted times come from. --time-model sets it, replacing the
// config's. The default is "measured" on cuda, so a GPU plans for its real
// link and kernels (planned for the cost model's 12 GB/s, VDSR batch 256
// stalled 107 ms of a 150 ms step on an H100 whose link copies at 55 GB/s),
// and "roofline" on the CPU device: "measured" profiles every node there
// at each LMS row and each probe of the limit search, which made the
// default VDSR sweep several times slower (bench/README.md, "Time model of
// the LMS rows"), while the emulated device's link is the configured
// throttle the roofline already plans for.

struct BenchCommand {
  Mode mode = Mode::kHelp;
  std::string help;  // kHelp: the help text asked for (`lms-bench`, `lms-bench ratio --help`)
  // --batch (vdsr, onnx; overhead, scaling and contention: one value) or
  // --size (unet3d; contention --model unet3d: one value); the mode's
  // default when empty.
  std::vector<int64_t> sizes;
  uint64_t capacity_bytes = 0;        // --capacity; the mode's default when 0
  int steps = 0;                      // --steps; the mode's default when 0
  std::string lms_file;               // --lms FILE (TOML)
  std::vector<std::string> lms_sets;  // --lms-set key=value, repeatable
  double link_bytes_per_s = 0;        // --link; 0 = the config's [link]
  std::string trace_dir;              // --trace DIR
  std::string json_path;              // --json FILE
  std::string data_dir;               // --data DIR (vdsr, unet3d); empty = random data
  bool search = true;                 // --search / --no-search
  bool confirm = true;                // --no-confirm: skip the real steps at the limits
  int64_t crop = 48;                  // --crop (vdsr, overhead)
  int64_t depth = 20;                 // --depth (vdsr, overhead)
  int64_t channels = 64;              // --channels (vdsr, overhead)
  int64_t base_filters = 8;           // --filters (unet3d)
  int64_t levels = 3;                 // --levels (unet3d)
  // --arch (unet3d): "isensee" (models::build_isensee_unet) or "reduced"
  // (models::build_unet); default isensee with --data, reduced without.
  std::string arch;
  // The case study after the unet3d sweep on --data (case_study.h): steps of
  // each training run (--study-steps; 0 = no case study; default 100 with
  // --data, 0 without), Adam's rate (--study-lr), its schedule
  // (--study-lr-decay poly|constant: poly decay over the steps, the default,
  // or a constant rate) and where checkpoints and prediction PNGs go (--out;
  // default out/unet3d_case_study).
  int64_t study_steps = -1;
  double study_lr = 3e-3;
  bool study_lr_decay = true;
  std::string out_dir;
  int threads = 0;  // --threads, 0 = all cores
  // --precision fp32|bf16|fp16: the dtype the models compute in
  // (lms::autocast; autocast_training_graph in model_factory.h).
  std::string precision = "fp32";
  bool cuda = false;  // --device cuda (vdsr, unet3d); default cpu
  // --time-model measured|roofline (vdsr, unet3d): the LMS rows' and
  // probes' LmsConfig::time_model, replacing the config's; default roofline
  // on the CPU device, measured on cuda (Note [Sweep time model]).
  std::string time_model;
  // --host-pool; 0 = the device's default: 16 GiB on the CPU device (reserved
  // lazily), 4 GiB on CUDA (cudaHostAlloc pins all of it up front).
  uint64_t host_pool_bytes = 0;
  uint64_t seed = 1;             // --seed
  double budget_fraction = 0.6;  // --budget-fraction (overhead, contention), (0, 1)
  // contention: the model (--model vdsr|unet3d) and the counts of devices
  // sharing one link (--devices, one configuration each).
  std::string model = "vdsr";
  std::vector<int64_t> devices = {1, 2};
  // ratio (ratio.h): the models in order (--model vdsr,unet3d), VDSR's batch
  // (--batch) and the U-Net's volume side (--size), one each; the targets
  // (--preset list, then the custom one of --gpu-flops and --gpu-link or of
  // --link-ratio; default v100-nvlink2 and h100-pcie5-tc) and the
  // oversubscription factors (--oversubscription, each > 1).
  std::vector<std::string> ratio_models = {"vdsr", "unet3d"};
  // onnx (onnx_model.h): the model file (--model), the input and its shape
  // with the batch as B (--input NAME:B,DIMS) and the loss (--loss
  // cross-entropy:C or mse).
  std::string onnx_path;
  std::string onnx_input;
  std::string onnx_loss;
  int64_t ratio_batch = 8;
  int64_t ratio_size = 32;
  std::vector<LinkPreset> targets;
  double gpu_flops_per_s = 0;       // --gpu-flops
  double gpu_link_bytes_per_s = 0;  // --gpu-link
  double link_bytes_per_flop = 0;   // --link-ratio
  double gpu_efficiency = 0;        // --gpu-efficiency; 0: each target's own
  std::vector<double> oversubscription = {1.5, 2, 4};
};

// args excludes the program name: {"vdsr", "--batch", "4,8"}; no mode,
// `help` or --help is Mode::kHelp with its help text. Also checks the
// command's host buffers (check_host_memory) against
// io::host_memory_limit_bytes(), so sizes this machine cannot hold are
// refused before anything runs.
absl::StatusOr<BenchCommand> parse_command_line(const std::vector<std::string>& args);

// The input buffers of the largest size must fit `limit_bytes`: VDSR's lr
// and hr batches (2 x batch x crop x crop x 4 bytes), the U-Net's image and
// labels ((in_channels + classes) x size^3 x 4 bytes: 4 + 4 on random data,
// 1 + 13 with --data). Overflow-checked;
// InvalidArgument naming the flags, the bytes, the limit and the largest
// size that fits otherwise.
absl::Status check_host_memory(const BenchCommand& cmd, uint64_t limit_bytes);

}  // namespace lms::bench
