#include "case_study.h"

#include <filesystem>
#include <sstream>
#include <utility>

#include "fmt/format.h"
#include "lms/status.h"
#include "lms/units.h"

#if LMS_BENCH_HAVE_UNET3D_DATA
#include "unet3d_evaluate.h"
#include "unet3d_trainer.h"
#endif

namespace lms::bench {

#if LMS_BENCH_HAVE_UNET3D_DATA
namespace {

namespace fs = std::filesystem;

unet3d::RunOptions run_options(const CaseStudyOptions& o, bool lms) {
  unet3d::RunOptions r;
  r.data_dir = o.data_dir;
  r.device.capacity_bytes = o.capacity_bytes;
  if (o.host_pool_bytes != 0) r.device.host_pool_bytes = o.host_pool_bytes;
  r.device.threads = o.threads;
  if (lms) {
    r.lms_config = o.lms_file;
    r.lms_overrides = o.lms_sets;
    if (r.lms_config.empty() && r.lms_overrides.empty()) r.lms_overrides = {"policy=auto"};
  }
  return r;
}

absl::StatusOr<CaseStudyRun> train_and_score(const CaseStudyOptions& o, bool lms, int64_t size,
                                             int64_t common_grid, const fs::path& dir,
                                             std::vector<std::string>* class_names,
                                             std::ostream& log) {
  CaseStudyRun run;
  run.lms = lms;
  run.size = size;
  run.grid = unet3d::resolved_grid(size, 0, o.levels);
  run.checkpoint = (dir / fmt::format("unet3d_{}_{}.ckpt", size, lms ? "lms" : "nolms")).string();
  unet3d::TrainOptions t;
  t.run = run_options(o, lms);
  t.model.filters = o.filters;
  t.model.levels = o.levels;
  t.size = size;
  t.steps = o.steps;
  t.lr = o.lr;
  t.lr_decay_steps = o.lr_decay ? o.steps : 0;
  t.seed = o.seed;
  t.checkpoint = run.checkpoint;
  t.log_every = std::max<int64_t>(1, o.steps / 5);
  log << fmt::format(
      "== case study: training at {}^3 crops ({}^3 grid), LMS {}, {} steps, lr {} {}\n", size,
      run.grid, lms ? "on" : "off", o.steps, o.lr, o.lr_decay ? "with poly decay" : "constant");
  LMS_ASSIGN_OR_RETURN(unet3d::TrainResult tr, unet3d::train(t, log));
  run.train_s = tr.total_s;
  run.voxels_per_s = tr.voxels_per_s;
  run.peak_device_bytes = tr.peak_device_bytes;
  run.bytes_swapped_per_step = tr.bytes_d2h_per_step;
  run.final_loss = tr.losses.empty() ? 0.0f : tr.losses.back();
  unet3d::RunOptions eval_run = run_options(o, false);
  eval_run.device.capacity_bytes = std::max(o.capacity_bytes, kCaseStudyEvalCapacity);
  unet3d::EvalOptions e{.run = eval_run, .checkpoint = run.checkpoint, .grid = 0};
  LMS_ASSIGN_OR_RETURN(unet3d::EvalResult er, unet3d::evaluate(e, log, common_grid));
  run.dice = er.dice;
  run.mean_dice = er.mean_dice;
  *class_names = er.class_names;
  unet3d::PredictOptions p{
      .run = eval_run,
      .checkpoint = run.checkpoint,
      .out = (dir / fmt::format("unet3d_{}_{}_pred", size, lms ? "lms" : "nolms")).string()};
  LMS_ASSIGN_OR_RETURN(unet3d::PredictResult pr, unet3d::predict(p, log));
  run.png = pr.png_path;
  return run;
}

}  // namespace

absl::StatusOr<CaseStudyResult> run_case_study(const CaseStudyOptions& o, std::ostream& log) {
  if (o.no_lms_size < 1 || o.lms_size <= o.no_lms_size || o.steps < 1) {
    return absl::InvalidArgumentError(fmt::format(
        "case study: sizes {} (no LMS) and {} (LMS) must satisfy 1 <= no LMS < LMS, steps {} >= 1",
        o.no_lms_size, o.lms_size, o.steps));
  }
  fs::path dir =
      o.out_dir.empty() ? fs::temp_directory_path() / "lms_case_study" : fs::path(o.out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        fmt::format("case study: cannot create '{}': {}", dir.string(), ec.message()));
  }
  CaseStudyResult r;
  r.steps = o.steps;
  r.common_grid = unet3d::resolved_grid(o.lms_size, 0, o.levels);
  LMS_ASSIGN_OR_RETURN(
      r.low, train_and_score(o, false, o.no_lms_size, r.common_grid, dir, &r.class_names, log));
  LMS_ASSIGN_OR_RETURN(
      r.high, train_and_score(o, true, o.lms_size, r.common_grid, dir, &r.class_names, log));
  return r;
}
#else
absl::StatusOr<CaseStudyResult> run_case_study(const CaseStudyOptions&, std::ostream&) {
  return absl::UnimplementedError(
      "the case study needs examples/unet3d (configure with -DLMS_BUILD_EXAMPLES=ON)");
}
#endif

std::string format_case_study(const CaseStudyResult& r) {
  std::string out = fmt::format(
      "case study: the same 3-D U-Net trained {} steps at {}^3 without LMS and at {}^3 with LMS "
      "({:.2f}x the voxels); Dice on the common {}^3 grid (the {}^3 model's prediction on "
      "its {}^3 grid resampled up)\n",
      r.steps, r.low.size, r.high.size,
      static_cast<double>(r.high.size * r.high.size * r.high.size) /
          static_cast<double>(r.low.size * r.low.size * r.low.size),
      r.common_grid, r.low.size, r.low.grid);
  out += fmt::format("{:<14} {:>14} {:>14}\n", "class", fmt::format("{}^3 no LMS", r.low.size),
                     fmt::format("{}^3 LMS", r.high.size));
  for (size_t c = 0; c < r.class_names.size() && c < r.low.dice.size() && c < r.high.dice.size();
       ++c) {
    out +=
        fmt::format("{:<14} {:14.4f} {:14.4f}\n", r.class_names[c], r.low.dice[c], r.high.dice[c]);
  }
  out += fmt::format("{:<14} {:14.4f} {:14.4f}\n", "mean (fg)", r.low.mean_dice, r.high.mean_dice);
  for (const CaseStudyRun* run : {&r.low, &r.high}) {
    out += fmt::format(
        "{}^3 LMS {}: train {:.1f} s ({:.3g} voxels/s), peak {}, swapped {}/step, final loss "
        "{:.4f}, slices {}\n",
        run->size, run->lms ? "on " : "off", run->train_s, run->voxels_per_s,
        format_bytes(run->peak_device_bytes), format_bytes(run->bytes_swapped_per_step),
        run->final_loss, run->png);
  }
  out += fmt::format(
      "goal: Dice at the LMS resolution >= Dice at the no-LMS resolution: {:.4f} vs "
      "{:.4f} {}\n",
      r.high.mean_dice, r.low.mean_dice, r.high.mean_dice >= r.low.mean_dice ? "PASS" : "FAIL");
  return out;
}

nlohmann::json to_json(const CaseStudyResult& r) {
  auto run = [](const CaseStudyRun& x) {
    return nlohmann::json{{"lms", x.lms},
                          {"size", x.size},
                          {"grid", x.grid},
                          {"train_s", x.train_s},
                          {"voxels_per_s", x.voxels_per_s},
                          {"peak_device_bytes", x.peak_device_bytes},
                          {"bytes_swapped_per_step", x.bytes_swapped_per_step},
                          {"final_loss", x.final_loss},
                          {"dice", x.dice},
                          {"mean_dice", x.mean_dice},
                          {"checkpoint", x.checkpoint},
                          {"png", x.png}};
  };
  return {{"common_grid", r.common_grid},
          {"steps", r.steps},
          {"class_names", r.class_names},
          {"no_lms", run(r.low)},
          {"lms", run(r.high)}};
}

}  // namespace lms::bench
