#include "unet3d_evaluate.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "brain_task.h"
#include "fmt/format.h"
#include "lms/io/image.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "models.h"
#include "run_setup.h"
#include "slices.h"
#include "subjects.h"

namespace lms::unet3d {
namespace {

absl::Status check_grid(std::string_view flag, int64_t grid, const ModelSpec& m) {
  const int64_t step = int64_t{1} << (m.levels - 1);
  if (grid < 1 || grid % step != 0) {
    return absl::InvalidArgumentError(
        fmt::format("--{} {}: must be a positive multiple of {} (2^(levels-1) of the model)", flag,
                    grid, step));
  }
  return absl::OkStatus();
}

std::vector<int32_t> as_labels(const io::Volume& v) {
  std::vector<int32_t> out(v.voxels.size());
  std::transform(v.voxels.begin(), v.voxels.end(), out.begin(),
                 [](float x) { return static_cast<int32_t>(std::lround(x)); });
  return out;
}

double foreground_mean(const std::vector<double>& dice) {
  if (dice.size() < 2) return dice.empty() ? 0.0 : dice[0];
  double sum = 0;
  for (size_t c = 1; c < dice.size(); ++c) sum += dice[c];
  return sum / static_cast<double>(dice.size() - 1);
}

struct Context {
  io::Checkpoint ck;
  ModelSpec model;
  std::optional<LmsConfig> lms;
  std::unique_ptr<Device> device;
};

absl::StatusOr<Context> open(const RunOptions& run, const std::string& checkpoint) {
  Context c;
  LMS_ASSIGN_OR_RETURN(c.ck, io::load_usable_checkpoint(checkpoint));
  LMS_ASSIGN_OR_RETURN(c.model, model_spec(c.ck, checkpoint));
  LMS_ASSIGN_OR_RETURN(LmsConfig cfg, examples::load_lms_config(run.lms_config, run.lms_overrides));
  if (run.lms_active()) c.lms = cfg;
  LMS_ASSIGN_OR_RETURN(c.device, examples::make_device(run.device, cfg.link));
  return c;
}

void print_table(const EvalResult& r, std::ostream& log) {
  log << fmt::format("{:<14}", "class");
  for (const SubjectScore& s : r.subjects) log << fmt::format(" {:>18}", s.name);
  log << "\n";
  for (size_t c = 0; c < r.class_names.size(); ++c) {
    log << fmt::format("{:<14}", r.class_names[c]);
    for (const SubjectScore& s : r.subjects) log << fmt::format(" {:18.4f}", s.dice[c]);
    log << "\n";
  }
  log << fmt::format("{:<14}", "mean (fg)");
  for (const SubjectScore& s : r.subjects) log << fmt::format(" {:18.4f}", s.mean_dice);
  log << "\n";
}

}  // namespace

absl::StatusOr<io::Volume> segment(const io::Volume& image, const ModelSpec& model,
                                   const io::Checkpoint& ck, Device& device, const LmsConfig* lms) {
  const int64_t s = image.dims[0];
  if (image.dims[1] != s || image.dims[2] != s) {
    return absl::InvalidArgumentError(fmt::format("segment: the image is {}x{}x{}, not a cube",
                                                  image.dims[0], image.dims[1], image.dims[2]));
  }
  LMS_RETURN_IF_ERROR(check_grid("grid", s, model));
  Graph g;
  models::ModelTensors t =
      models::build_isensee_unet(g, {.batch = 1,
                                     .in_channels = 1,
                                     .classes = model.classes,
                                     .size = s,
                                     .base_filters = model.filters,
                                     .levels = model.levels,
                                     .segmentation_levels = model.segmentation_levels});
  LMS_RETURN_IF_ERROR(g.status());
  const std::string probs = g.tensor(t.output).name;
  if (lms != nullptr) {
    LMS_RETURN_IF_ERROR(rewrite(g, *lms, device, {.fetched = {probs}}).status());
  }
  LMS_ASSIGN_OR_RETURN(auto session, Session::create(g, device, {.fetches = {probs}}));
  LMS_RETURN_IF_ERROR(examples::restore_session(*session, g, ck, /*parameters_only=*/true));
  const int64_t voxels = s * s * s;
  Feeds feeds;
  feeds.emplace("image", image.voxels);  // Volume order (x fastest) is NCDHW's
  feeds.emplace("labels", std::vector<float>(static_cast<size_t>(model.classes * voxels), 0.0f));
  StepResult r;
  absl::Status st = session->run(feeds, &r);
  if (!st.ok()) {
    return absl::Status(
        st.code(), fmt::format("segmenting on {}^3 voxels (LMS or a larger --capacity help): {}", s,
                               to_std(st.message())));
  }
  const std::vector<float>& p = r.fetched.at(probs);
  io::Volume out = image;
  for (int64_t v = 0; v < voxels; ++v) {
    int best = 0;
    for (int c = 1; c < model.classes; ++c) {
      if (p[static_cast<size_t>(c * voxels + v)] > p[static_cast<size_t>(best * voxels + v)])
        best = c;
    }
    out.voxels[static_cast<size_t>(v)] = static_cast<float>(best);
  }
  return out;
}

absl::StatusOr<EvalResult> evaluate(const EvalOptions& opts, std::ostream& log,
                                    int64_t score_grid) {
  LMS_ASSIGN_OR_RETURN(Context ctx, open(opts.run, opts.checkpoint));
  EvalResult result;
  result.model = ctx.model;
  result.grid = opts.grid != 0 ? opts.grid : ctx.model.grid;
  result.score_grid = score_grid != 0 ? score_grid : result.grid;
  LMS_RETURN_IF_ERROR(check_grid("grid", result.grid, ctx.model));
  LMS_ASSIGN_OR_RETURN(DataSet data,
                       load_subjects(opts.run.data_dir, Split::kEval, ctx.model.classes));
  result.class_names = data.class_names;
  log << fmt::format(
      "model: 3-D U-Net filters {} levels {} classes {} from {} (step {}, trained on {}^3 crops "
      "of a {}^3 grid)\ndata: {}\ninference on {}^3 voxels, Dice on {}^3\n",
      ctx.model.filters, ctx.model.levels, ctx.model.classes, opts.checkpoint, ctx.ck.step,
      ctx.model.size, ctx.model.grid, data.description, result.grid, result.score_grid);
  result.dice.assign(static_cast<size_t>(ctx.model.classes), 0.0);
  for (const Subject& s : data.subjects) {
    LMS_ASSIGN_OR_RETURN(BrainPair cube, to_cube(s.pair, result.grid));
    LMS_ASSIGN_OR_RETURN(io::Volume pred, segment(cube.image, ctx.model, ctx.ck, *ctx.device,
                                                  ctx.lms ? &*ctx.lms : nullptr));
    LMS_ASSIGN_OR_RETURN(BrainPair ref, to_cube(s.pair, result.score_grid));
    if (result.score_grid != result.grid) {
      LMS_ASSIGN_OR_RETURN(pred, io::resample(pred, ref.labels.dims, ref.labels.spacing_mm,
                                              io::Interpolation::kNearest));
    }
    SubjectScore score{s.name, {}, 0};
    LMS_ASSIGN_OR_RETURN(score.dice,
                         dice_per_class(as_labels(pred), as_labels(ref.labels), ctx.model.classes));
    score.mean_dice = foreground_mean(score.dice);
    for (size_t c = 0; c < score.dice.size(); ++c)
      result.dice[c] += score.dice[c] / static_cast<double>(data.subjects.size());
    result.subjects.push_back(std::move(score));
  }
  result.mean_dice = foreground_mean(result.dice);
  print_table(result, log);
  return result;
}

absl::StatusOr<PredictResult> predict(const PredictOptions& opts, std::ostream& log) {
  LMS_ASSIGN_OR_RETURN(Context ctx, open(opts.run, opts.checkpoint));
  const int64_t grid = opts.grid != 0 ? opts.grid : ctx.model.grid;
  LMS_RETURN_IF_ERROR(check_grid("grid", grid, ctx.model));
  BrainPair source;
  bool has_reference = true;
  std::string name;
  if (opts.image.empty()) {
    LMS_ASSIGN_OR_RETURN(DataSet data,
                         load_subjects(opts.run.data_dir, Split::kEval, ctx.model.classes));
    source = std::move(data.subjects.front().pair);
    name = data.subjects.front().name;
  } else {
    name = opts.image;
    LMS_ASSIGN_OR_RETURN(source.image, io::read_nifti(opts.image));
    has_reference = !opts.reference.empty();
    if (has_reference) {
      LMS_ASSIGN_OR_RETURN(source.labels, io::read_nifti(opts.reference));
      LMS_RETURN_IF_ERROR(
          io::check_same_grid(source.image, source.labels, opts.image, opts.reference));
      // The reference is scored as train reads labels: class ids of the model.
      LMS_RETURN_IF_ERROR(
          check_label_map(source.labels, opts.reference, ctx.model.classes).status());
    } else {
      // The mask to normalise over (to_cube normalises again on the grid).
      source.labels = source.image;
      for (float& v : source.labels.voxels) v = v != 0.0f ? 1.0f : 0.0f;
    }
    normalise(source.image, source.labels);
  }
  LMS_ASSIGN_OR_RETURN(BrainPair cube, to_cube(source, grid));
  PredictResult result;
  LMS_ASSIGN_OR_RETURN(result.prediction, segment(cube.image, ctx.model, ctx.ck, *ctx.device,
                                                  ctx.lms ? &*ctx.lms : nullptr));
  result.image_cube = cube.image;
  if (has_reference) {
    result.reference_cube = cube.labels;
    LMS_ASSIGN_OR_RETURN(result.dice, dice_per_class(as_labels(result.prediction),
                                                     as_labels(cube.labels), ctx.model.classes));
  }
  // Back onto the input's grid (to_cube and resample share the grid centre).
  LMS_ASSIGN_OR_RETURN(io::Volume on_source,
                       io::resample(result.prediction, source.image.dims, source.image.spacing_mm,
                                    io::Interpolation::kNearest));
  on_source.affine = source.image.affine;
  result.nifti_path = opts.out + ".nii.gz";
  result.png_path = opts.out + ".png";
  LMS_RETURN_IF_ERROR(io::write_nifti_labels(result.nifti_path, on_source));
  LMS_ASSIGN_OR_RETURN(io::Image png, orthogonal_slices(cube.image, result.prediction,
                                                        has_reference ? &cube.labels : nullptr));
  LMS_RETURN_IF_ERROR(io::write_png(png, result.png_path));
  log << fmt::format("{}: segmented on {}^3 voxels\nlabels: {} ({}x{}x{}, the input's grid)\n",
                     name, grid, result.nifti_path, source.image.dims[0], source.image.dims[1],
                     source.image.dims[2]);
  log << fmt::format("slices: {} (rows axial, coronal, sagittal; columns image | prediction{})\n",
                     result.png_path, has_reference ? " | reference" : "");
  if (has_reference) {
    log << fmt::format("Dice (foreground mean) {:.4f}\n", foreground_mean(result.dice));
  }
  return result;
}

}  // namespace lms::unet3d
