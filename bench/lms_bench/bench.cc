#include "bench.h"

#include <algorithm>
#include <new>
#include <thread>

#include "case_study.h"
#include "contention.h"
#include "fmt/format.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/units.h"
#include "onnx_model.h"
#include "overhead.h"
#include "ratio.h"
#include "report.h"
#include "scaling.h"
#include "sweep.h"
#include "unet3d_data.h"
#include "vdsr_data.h"

namespace lms::bench {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

int fail(const absl::Status& s, std::ostream& err) {
  err << "lms-bench: " << to_std(s.message()) << "\n";
  return absl::IsInvalidArgument(s) ? kExitUsage : kExitFailure;
}

std::string link_text(double bytes_per_s) {
  return bytes_per_s > 0 ? fmt::format("{:.1f} GB/s", bytes_per_s / 1e9) : "unthrottled";
}

absl::StatusOr<ModelFactory> command_factory(const BenchCommand& cmd, std::ostream& err) {
  if (cmd.mode == Mode::kUnet3d) return command_unet_factory(cmd, err);
  if (cmd.mode == Mode::kOnnx) {
    LMS_ASSIGN_OR_RETURN(OnnxInput input, parse_onnx_input(cmd.onnx_input));
    LMS_ASSIGN_OR_RETURN(OnnxLoss loss, parse_onnx_loss(cmd.onnx_loss));
    LMS_ASSIGN_OR_RETURN(const DType precision, parse_precision(cmd.precision));
    return onnx_factory({.path = cmd.onnx_path,
                         .input = std::move(input),
                         .loss = loss,
                         .seed = cmd.seed,
                         .precision = precision});
  }
  return command_vdsr_factory(cmd, err);
}

// "S/G: 16/20, 24/30": each requested crop side with its grid side.
std::string crop_grid_sides(const BenchCommand& cmd) {
  std::string out;
  for (int64_t s : cmd.sizes) {
    out += fmt::format("{}{}/{}", out.empty() ? "" : ", ", s, unet_grid_side(s, cmd.levels));
  }
  return out;
}

// The case study at the sweep's limits (case_study.h).
absl::StatusOr<CaseStudyResult> run_command_case_study(const BenchCommand& cmd,
                                                       const SweepResult& sweep, std::ostream& out,
                                                       std::ostream& err) {
  const Limits& l = sweep.limits;
  if (!sweep.searched || l.no_lms_max < 1 || l.lms_max <= l.no_lms_max) {
    return absl::FailedPreconditionError(
        fmt::format("case study: needs searched limits with LMS above no LMS (have {} and {}; drop "
                    "--no-search or raise --capacity)",
                    l.no_lms_max, l.lms_max));
  }
  CaseStudyOptions o{.data_dir = cmd.data_dir,
                     .no_lms_size = l.no_lms_max,
                     .lms_size = l.lms_max,
                     .filters = cmd.base_filters,
                     .levels = cmd.levels,
                     .steps = cmd.study_steps,
                     .lr = cmd.study_lr,
                     .lr_decay = cmd.study_lr_decay,
                     .seed = cmd.seed,
                     .capacity_bytes = cmd.capacity_bytes,
                     .host_pool_bytes = cmd.host_pool_bytes,
                     .threads = cmd.threads,
                     .lms_file = cmd.lms_file,
                     .lms_sets = cmd.lms_sets,
                     .out_dir = cmd.out_dir};
  LMS_ASSIGN_OR_RETURN(CaseStudyResult study, run_case_study(o, err));
  out << "\n" << format_case_study(study);
  return study;
}

// How the LMS rows and probes are planned (Note [Sweep time model]).
std::string planning_text(const LmsConfig& cfg) {
  if (cfg.time_model == TimeModel::kMeasured)
    return "LMS planned with times measured on the device";
  return fmt::format("LMS planned with the roofline and a {} link",
                     link_text(cfg.link.h2d_bytes_per_s));
}

absl::Status run_sweep_command(const BenchCommand& cmd, std::ostream& out, std::ostream& err) {
  LMS_ASSIGN_OR_RETURN(LmsConfig cfg, command_config(cmd));
  cfg.time_model = cmd.time_model == "measured" ? TimeModel::kMeasured : TimeModel::kRoofline;
  LMS_ASSIGN_OR_RETURN(ModelFactory f, command_factory(cmd, err));
  SweepOptions o{.sizes = cmd.sizes,
                 .steps = cmd.steps,
                 .config = cfg,
                 .device = command_device(cmd, cfg),
                 .trace_dir = cmd.trace_dir,
                 .search = cmd.search,
                 .confirm = cmd.confirm};
  const char* kind = cmd.cuda ? "CUDA device" : "CPU-emulated device";
  const std::string link = cmd.cuda ? "the real link" : link_text(o.device.h2d_bytes_per_s);
  err << fmt::format("lms-bench {}: capacity {} ({}), link {}, {}, {} steps, {}\n", f.model,
                     format_bytes(o.device.capacity_bytes), kind, link, planning_text(cfg), o.steps,
                     f.data_note);
  LMS_ASSIGN_OR_RETURN(SweepResult r, run_sweep(f, o, err));
  out << fmt::format("{} under a {} {} ({}, link {}, {}):\n", f.model,
                     format_bytes(o.device.capacity_bytes), kind, f.data_note, link,
                     planning_text(cfg));
  out << format_table(r) << format_limits(r);
  nlohmann::json json = to_json(r);
  if (cmd.mode == Mode::kUnet3d && cmd.study_steps > 0 && !cmd.data_dir.empty() &&
      f.data_note.find(kMriImageFile) != std::string::npos) {
    LMS_ASSIGN_OR_RETURN(CaseStudyResult study, run_command_case_study(cmd, r, out, err));
    json["case_study"] = to_json(study);
  }
  if (!cmd.json_path.empty()) LMS_RETURN_IF_ERROR(write_json(json, cmd.json_path));
  return absl::OkStatus();
}

absl::Status run_overhead_command(const BenchCommand& cmd, std::ostream& out, std::ostream& err) {
  LMS_ASSIGN_OR_RETURN(LmsConfig cfg, command_config(cmd));
  LMS_ASSIGN_OR_RETURN(ModelFactory f, command_vdsr_factory(cmd, err));
  OverheadOptions o{.size = cmd.sizes.at(0),
                    .steps = cmd.steps,
                    .config = cfg,
                    .device = command_device(cmd, cfg),
                    .budget_fraction = cmd.budget_fraction};
  LMS_ASSIGN_OR_RETURN(OverheadResult r, run_overhead(f, o, err));
  out << format_overhead(r);
  if (!cmd.json_path.empty()) LMS_RETURN_IF_ERROR(write_json(to_json(r), cmd.json_path));
  return absl::OkStatus();
}

// Per Note [Failed ranks], an error on any rank ends every rank, after
// printing it with the rank's number.
absl::Status run_scaling_command(const BenchCommand& cmd, std::ostream& out, std::ostream& err) {
  LMS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> world, make_mpi_communicator());
  LMS_ASSIGN_OR_RETURN(LmsConfig cfg, command_config(cmd));
  ScalingOptions o{.batch = cmd.sizes.at(0),
                   .steps = cmd.steps,
                   .config = cfg,
                   .budget_fraction = cmd.budget_fraction};
  LMS_ASSIGN_OR_RETURN(const DType precision, parse_precision(cmd.precision));
  o.model = {.depth = cmd.depth,
             .channels = cmd.channels,
             .crop = cmd.crop,
             .seed = cmd.seed,
             .precision = precision};
  o.device = command_device(cmd, cfg);
  if (o.device.compute_threads == 0) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    o.device.compute_threads = std::max(1, cores / world->size());
  }
  absl::StatusOr<ScalingResult> r = run_scaling(*world, o, err);
  if (!r.ok()) {
    err << "lms-bench scaling: rank " << world->rank() << ": " << r.status() << "\n";
    err.flush();
    world->abort(r.status());
  }
  if (world->rank() != 0) return absl::OkStatus();
  out << format_scaling(*r);
  if (!cmd.json_path.empty()) LMS_RETURN_IF_ERROR(write_json(to_json(*r), cmd.json_path));
  return absl::OkStatus();
}

absl::Status run_contention_command(const BenchCommand& cmd, std::ostream& out, std::ostream& err) {
  LMS_ASSIGN_OR_RETURN(LmsConfig cfg, command_config(cmd));
  LMS_ASSIGN_OR_RETURN(ModelFactory f, cmd.model == "unet3d" ? command_unet_factory(cmd, err)
                                                             : command_vdsr_factory(cmd, err));
  ContentionOptions o{.size = cmd.sizes.at(0),
                      .steps = cmd.steps,
                      .devices = cmd.devices,
                      .config = cfg,
                      .link = {.d2h_bytes_per_s = cfg.link.d2h_bytes_per_s,
                               .h2d_bytes_per_s = cfg.link.h2d_bytes_per_s,
                               .latency_s = cfg.link.copy_latency_s},
                      .host_pool_bytes = cmd.host_pool_bytes,
                      .budget_fraction = cmd.budget_fraction,
                      .trace_dir = cmd.trace_dir};
  LMS_ASSIGN_OR_RETURN(ContentionResult r, run_contention(f, o, err));
  out << format_contention(r);
  if (!cmd.json_path.empty()) LMS_RETURN_IF_ERROR(write_json(to_json(r), cmd.json_path));
  return absl::OkStatus();
}

// Each model of --model in turn, every target and oversubscription on it.
absl::Status run_ratio_command(const BenchCommand& cmd, std::ostream& out, std::ostream& err) {
  LMS_ASSIGN_OR_RETURN(LmsConfig cfg, command_config(cmd));
  RatioResult r{.steps = cmd.steps, .compute_threads = cmd.threads};
  for (const std::string& model : cmd.ratio_models) {
    const bool unet = model == "unet3d";
    BenchCommand one = cmd;
    one.sizes = {unet ? cmd.ratio_size : cmd.ratio_batch};
    // An ONNX model at --batch: its batch, or its context for an input
    // given with T.
    if (model != "vdsr" && !unet) one.mode = Mode::kOnnx;
    LMS_ASSIGN_OR_RETURN(ModelFactory f, unet ? command_unet_factory(one, err)
                                         : one.mode == Mode::kOnnx
                                             ? command_factory(one, err)
                                             : command_vdsr_factory(one, err));
    RatioOptions o{.size = one.sizes[0],
                   .steps = cmd.steps,
                   .oversubscription = cmd.oversubscription,
                   .targets = cmd.targets,
                   .config = cfg,
                   .device = command_device(one, cfg)};
    LMS_ASSIGN_OR_RETURN(RatioModel m, run_ratio(f, o, err));
    r.models.push_back(std::move(m));
  }
  out << format_ratio(r);
  if (!cmd.json_path.empty()) LMS_RETURN_IF_ERROR(write_json(to_json(r), cmd.json_path));
  return absl::OkStatus();
}

absl::Status run_command(const BenchCommand& cmd, std::ostream& out, std::ostream& err) {
  switch (cmd.mode) {
    case Mode::kOverhead:
      return run_overhead_command(cmd, out, err);
    case Mode::kContention:
      return run_contention_command(cmd, out, err);
    case Mode::kScaling:
      return run_scaling_command(cmd, out, err);
    case Mode::kRatio:
      return run_ratio_command(cmd, out, err);
    default:
      return run_sweep_command(cmd, out, err);
  }
}

}  // namespace

absl::StatusOr<LmsConfig> command_config(const BenchCommand& cmd) {
  LmsConfig cfg;
  if (!cmd.lms_file.empty()) {
    absl::StatusOr<LmsConfig> file = LmsConfig::from_file(cmd.lms_file);
    if (!file.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("--lms {}: {}", cmd.lms_file, to_std(file.status().message())));
    }
    cfg = *file;
  }
  for (const std::string& kv : cmd.lms_sets) {
    absl::Status s = cfg.apply_override(kv);
    if (!s.ok()) {
      return absl::InvalidArgumentError(fmt::format("--lms-set {}: {}", kv, to_std(s.message())));
    }
  }
  if (!cfg.enabled) {
    return absl::InvalidArgumentError(
        "the LMS config sets enabled = false; lms-bench compares LMS off and on by itself");
  }
  if (cmd.link_bytes_per_s > 0) {
    cfg.link.d2h_bytes_per_s = cmd.link_bytes_per_s;
    cfg.link.h2d_bytes_per_s = cmd.link_bytes_per_s;
  }
  return cfg;
}

DeviceSetup command_device(const BenchCommand& cmd, const LmsConfig& cfg) {
  return {.cuda = cmd.cuda,
          .capacity_bytes = cmd.capacity_bytes,
          .host_pool_bytes = cmd.host_pool_bytes,
          .d2h_bytes_per_s = cfg.link.d2h_bytes_per_s,
          .h2d_bytes_per_s = cfg.link.h2d_bytes_per_s,
          .copy_latency_s = cfg.link.copy_latency_s,
          .compute_threads = cmd.threads};
}

absl::StatusOr<ModelFactory> command_vdsr_factory(const BenchCommand& cmd, std::ostream& err) {
  LMS_ASSIGN_OR_RETURN(const DType precision, parse_precision(cmd.precision));
  VdsrBenchModel m{.depth = cmd.depth,
                   .channels = cmd.channels,
                   .crop = cmd.crop,
                   .seed = cmd.seed,
                   .precision = precision};
  VdsrBatchSource source;
  if (!cmd.data_dir.empty()) {
    std::vector<std::string> warnings;
    absl::StatusOr<VdsrBatchSource> photos =
        load_vdsr_photos(cmd.data_dir, cmd.seed, cmd.crop, &warnings);
    for (const std::string& w : warnings) err << "warning: skipped " << w << "\n";
    // Photos that decode but are all smaller than --crop: the flag is wrong,
    // random data would hide it.
    if (absl::IsInvalidArgument(photos.status())) return photos.status();
    if (photos.ok()) {
      source = *photos;
      // Fails now rather than mid-sweep when the crop exceeds a photo.
      std::vector<float> lr, hr;
      LMS_RETURN_IF_ERROR(source(0, 1, cmd.crop, &lr, &hr));
    } else {
      err << "warning: " << to_std(photos.status().message()) << "; using random data\n";
    }
  } else {
    err << "warning: no --data folder; VDSR trains on random data\n";
  }
  return vdsr_factory(m, source);
}

Unet3dBenchModel command_unet_model(const BenchCommand& cmd) {
  const bool mri = !cmd.data_dir.empty();
  return {.arch = cmd.arch == "isensee" ? UnetArch::kIsensee : UnetArch::kReduced,
          .in_channels = mri ? 1 : 4,
          .classes = mri ? kMriClasses : 4,
          .base_filters = cmd.base_filters,
          .levels = cmd.levels,
          .segmentation_levels = 3,
          .seed = cmd.seed,
          .precision = parse_precision(cmd.precision).value_or(DType::kFloat32)};
}

absl::StatusOr<ModelFactory> command_unet_factory(const BenchCommand& cmd, std::ostream& err) {
  const Unet3dBenchModel m = command_unet_model(cmd);
  Unet3dBatchSource source;
  if (!cmd.data_dir.empty()) {
    absl::StatusOr<Unet3dBatchSource> mri = load_mri_volumes(cmd.data_dir, cmd.seed, cmd.levels);
    // A volume that reads but is wrong (a bad header, an atlas without
    // regions): random data would hide it.
    if (absl::IsInvalidArgument(mri.status())) {
      return absl::InvalidArgumentError(
          fmt::format("--data {}: {}", cmd.data_dir, to_std(mri.status().message())));
    }
    if (mri.ok()) {
      source = *mri;
    } else {
      err << "warning: " << to_std(mri.status().message()) << "; using random volumes (1 channel, "
          << kMriClasses << " classes)\n";
    }
  }
  LMS_ASSIGN_OR_RETURN(ModelFactory f, unet_factory(m, source));
  const std::string arch = m.arch == UnetArch::kIsensee ? "Isensee U-Net" : "reduced U-Net";
  f.data_note = source ? fmt::format(
                             "{}, {} T1 + AAL {} classes from {}, crops of side S from a cube grid "
                             "of side G = S + S/4 rounded up to a multiple of {} (S/G: {})",
                             arch, kMriImageFile, kMriClasses, cmd.data_dir, f.size_step,
                             crop_grid_sides(cmd))
                       : fmt::format("{}, {}", arch, f.data_note);
  return f;
}

int run_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<BenchCommand> cmd = parse_command_line(args);
  if (!cmd.ok()) return fail(cmd.status(), err);
  if (cmd->mode == Mode::kHelp) {
    out << cmd->help;
    return kExitOk;
  }
  // Host memory can run out anywhere a run allocates (the import of a large
  // model, the host pool, the feeds): a message and exit 1, never an
  // uncaught std::bad_alloc (Note [Host memory at import]).
  absl::Status s;
  try {
    s = run_command(*cmd, out, err);
  } catch (const std::bad_alloc&) {
    s = absl::ResourceExhaustedError(fmt::format(
        "lms-bench {}: host memory ran out (std::bad_alloc); free host memory or raise the "
        "process's limit (ulimit -v), or run smaller sizes (--batch / --size)",
        args.empty() ? std::string("") : args.front()));
  }
  if (!s.ok()) return fail(s, err);
  return kExitOk;
}

}  // namespace lms::bench
