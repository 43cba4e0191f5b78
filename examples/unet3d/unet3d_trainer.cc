#include "unet3d_trainer.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "distributed.h"
#include "fmt/format.h"
#include "lms/facts.h"
#include "lms/profiler/recorder.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/training.h"
#include "lms/units.h"
#include "models.h"
#include "run_setup.h"
#include "subjects.h"

namespace lms::unet3d {
namespace {

double now_s() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// What a checkpoint must agree on for --resume to reproduce the same run,
// and what the ranks of a data-parallel run must agree on; the model fields
// are also what eval and predict rebuild the network from.
std::map<std::string, std::string> run_meta(const TrainOptions& o, const ModelSpec& m, int ranks) {
  return {{"model", "isensee_unet3d"},
          {"filters", fmt::format("{}", m.filters)},
          {"levels", fmt::format("{}", m.levels)},
          {"seg_levels", fmt::format("{}", m.segmentation_levels)},
          {"classes", fmt::format("{}", m.classes)},
          {"size", fmt::format("{}", m.size)},
          {"grid", fmt::format("{}", m.grid)},
          {"batch", fmt::format("{}", o.batch)},
          {"seed", fmt::format("{}", o.seed)},
          {"lr", fmt::format("{}", o.lr)},
          {"lr_decay_steps", fmt::format("{}", o.lr_decay_steps)},
          {"max_rotation_deg", fmt::format("{}", o.max_rotation_deg)},
          {"max_scaling", fmt::format("{}", o.max_scaling)},
          {"intensity_jitter", fmt::format("{}", o.intensity_jitter)},
          {"max_gamma", fmt::format("{}", o.max_gamma)},
          {"flips", o.no_flips ? "off" : "on"},
          {"ranks", fmt::format("{}", ranks)},
          {"scale_lr", o.distributed.scale_lr ? "on" : "off"},
          {"data", examples::data_identity(o.run.data_dir)}};
}

// "[=========>          ]" for step of steps.
std::string progress_bar(int64_t step, int64_t steps) {
  constexpr int kWidth = 20;
  const int filled = static_cast<int>(kWidth * step / std::max<int64_t>(steps, 1));
  std::string bar(kWidth, ' ');
  for (int i = 0; i < filled; ++i) bar[static_cast<size_t>(i)] = '=';
  if (filled < kWidth) bar[static_cast<size_t>(filled)] = '>';
  return "[" + bar + "]";
}

// One training run (Note [Data-parallel runs] with --distributed).
class TrainRun {
 public:
  TrainRun(const TrainOptions& o, examples::Ranks& ranks, std::ostream& log)
      : o_(o), ranks_(ranks), log_(ranks.root_log(log)) {}
  // The session, then a NCCL communicator, then the device.
  ~TrainRun() {
    session_.reset();
    ranks_.detach_device();
  }

  absl::Status prepare() {
    LMS_ASSIGN_OR_RETURN(cfg_, examples::load_lms_config(o_.run.lms_config, o_.run.lms_overrides));
    if (ranks_.is_root()) LMS_RETURN_IF_ERROR(examples::check_outputs(o_.checkpoint, o_.trace_dir));
    LMS_ASSIGN_OR_RETURN(DataSet full,
                         load_subjects(o_.run.data_dir, Split::kTrain, o_.model.classes));
    LMS_RETURN_IF_ERROR(check_batch_memory(o_, full.classes));
    model_ = {.filters = o_.model.filters,
              .levels = o_.model.levels,
              .segmentation_levels = o_.model.segmentation_levels,
              .classes = full.classes,
              .size = o_.size,
              .grid = resolved_grid(o_.size, o_.grid, o_.model.levels)};
    LMS_RETURN_IF_ERROR(ranks_.check_same_settings(meta()));
    LMS_RETURN_IF_ERROR(
        ranks_.check_same("LMS configs", o_.run.lms_active() ? cfg_.to_toml() : ""));
    const std::string sharing = take_share(full);
    LMS_ASSIGN_OR_RETURN(data_, on_cube(full, model_.grid));
    log_ << fmt::format("data: {}\n      resampled to {}^3 voxels, crops of {}^3{}\n",
                        data_.description, model_.grid, model_.size, sharing);
    LMS_RETURN_IF_ERROR(build_graph());
    examples::DeviceOptions device = o_.run.device;
    device.cuda_ordinal = ranks_.local_rank();
    LMS_ASSIGN_OR_RETURN(device_, examples::make_device(device, cfg_.link));
    LMS_RETURN_IF_ERROR(ranks_.attach_device(*device_));
    if (o_.run.lms_active()) {
      LMS_RETURN_IF_ERROR(apply_lms());
    } else {
      LMS_RETURN_IF_ERROR(lay_out());
    }
    log_ << examples::data_parallel_summary(ranks_, o_.batch, o_.lr, o_.distributed.scale_lr);
    const bool trace = !o_.trace_dir.empty() && ranks_.is_root();
    SessionOptions so{.fetches = {"loss"},
                      .sink = trace ? &recorder_ : nullptr,
                      .communicator = ranks_.communicator()};
    LMS_ASSIGN_OR_RETURN(session_, Session::create(train_, *device_, so));
    if (o_.resume) LMS_RETURN_IF_ERROR(resume());
    return absl::OkStatus();
  }

  absl::Status run() {
    result_.first_step = next_step_;
    result_.model = model_;
    const double start = now_s();
    for (int64_t step = next_step_; step <= o_.steps; ++step) {
      LMS_RETURN_IF_ERROR(ranks_.inject_fault(step));
      LMS_RETURN_IF_ERROR(run_step(step));
      const bool periodic = o_.checkpoint_every > 0 && step % o_.checkpoint_every == 0;
      if (!o_.checkpoint.empty() && (periodic || step == o_.steps)) {
        LMS_RETURN_IF_ERROR(
            examples::save_on_root(ranks_, *session_, train_, o_.checkpoint, step, meta()));
      }
    }
    result_.total_s = now_s() - start;
    const int64_t ran = o_.steps - result_.first_step + 1;
    result_.voxels_per_s = static_cast<double>(ran * global_batch() * o_.size * o_.size * o_.size) /
                           std::max(result_.total_s, 1e-9);
    for (const std::string& name : session_->persistent_tensors()) {
      LMS_ASSIGN_OR_RETURN(result_.persistent[name], session_->read(name));
    }
    if (!o_.trace_dir.empty() && ranks_.is_root()) {
      LMS_RETURN_IF_ERROR(
          examples::write_trace_files(recorder_, o_.run.device.capacity_bytes, o_.trace_dir,
                                      o_.run.lms_active() ? "LMS on" : "LMS off",
                                      static_cast<int64_t>(result_.losses.size()) - 1,
                                      fmt::format("3-D U-Net {}^3, last step", o_.size), log_));
    }
    print_summary();
    return absl::OkStatus();
  }

  TrainResult take_result() { return std::move(result_); }

 private:
  std::map<std::string, std::string> meta() const { return run_meta(o_, model_, ranks_.size()); }
  int64_t global_batch() const { return o_.batch * ranks_.size(); }
  double learning_rate() const { return ranks_.learning_rate(o_.lr, o_.distributed.scale_lr); }
  // Each rank its own crops (Note [Data-parallel runs]).
  uint64_t data_seed() const { return examples::rank_seed(o_.seed, ranks_.rank()); }

  // Keeps this rank's subjects, subjects[rank::ranks], when there are at
  // least as many as ranks; otherwise every rank keeps them all and only
  // the crops differ. Returns the log's note on what was done.
  std::string take_share(DataSet& data) const {
    const int n = ranks_.size();
    if (n == 1) return "";
    if (data.subjects.size() < static_cast<size_t>(n)) {
      return fmt::format(
          "\n      {} subject(s) for {} ranks: every rank trains on all of them, each on its own "
          "random crops",
          data.subjects.size(), n);
    }
    std::vector<Subject> share;
    for (size_t i = static_cast<size_t>(ranks_.rank()); i < data.subjects.size(); i += n) {
      share.push_back(std::move(data.subjects[i]));
    }
    const size_t total = data.subjects.size();
    data.subjects = std::move(share);
    return fmt::format(
        "\n      {} subjects sharded over {} ranks: rank r trains on subjects r, r+{}, ...", total,
        n, n);
  }

  absl::Status build_graph() {
    Graph g;
    models::ModelTensors m =
        models::build_isensee_unet(g, {.batch = o_.batch,
                                       .in_channels = 1,
                                       .classes = model_.classes,
                                       .size = model_.size,
                                       .base_filters = model_.filters,
                                       .levels = model_.levels,
                                       .segmentation_levels = model_.segmentation_levels,
                                       .seed = o_.seed});
    LMS_RETURN_IF_ERROR(g.status());
    g.set_loss(m.loss);
    LMS_RETURN_IF_ERROR(examples::apply_precision(g, o_.precision));
    TrainingOptions to = examples::precision_training_options(o_.precision);
    if (ranks_.distributed()) to.data_parallel = DataParallel{};
    LMS_ASSIGN_OR_RETURN(
        train_, training_graph(g, g.loss(),
                               Adam{.lr = learning_rate(), .decay_steps = o_.lr_decay_steps}, to));
    return absl::OkStatus();
  }

  // Without LMS the rewrite only picks the device's activation layouts
  // (blocked between convolutions on the CPU), so a run without LMS compiles
  // the same kernels as one with it.
  absl::Status lay_out() {
    LmsConfig off;
    off.enabled = false;
    return rewrite(train_, off, *device_, {.fetched = {"loss"}}).status();
  }

  absl::Status apply_lms() {
    // With ranks, rank 0 measures and every rank plans with its facts, so
    // all ranks plan the same step (lms::gather_facts).
    const RewriteOptions options{.fetched = {"loss"}};
    LMS_ASSIGN_OR_RETURN(PlanningFacts facts,
                         gather_facts(train_, cfg_, *device_, ranks_.communicator(),
                                      {.rewrite = options, .measure_times = cfg_.enabled}));
    LMS_ASSIGN_OR_RETURN(result_.lms_report, rewrite(train_, cfg_, *device_, options, facts));
    log_ << "LMS: " << result_.lms_report.summary();
    if (!result_.lms_report.decisions.empty()) {
      log_ << "  per tensor (action, bytes, restores per step, predicted seconds per step):\n"
           << result_.lms_report.decisions_text();
    }
    log_ << "\n";
    return absl::OkStatus();
  }

  absl::Status resume() {
    LMS_ASSIGN_OR_RETURN(
        const int64_t step,
        examples::resume_session(*session_, train_, o_.checkpoint, meta(), o_.steps));
    next_step_ = step + 1;
    log_ << fmt::format("resumed from {} at step {}\n", o_.checkpoint, step);
    return absl::OkStatus();
  }

  // The batch of `step`: sample n comes from the subject and crop that
  // (data_seed(), step, n) draw.
  absl::Status make_step_batch(int64_t step, std::vector<float>* image,
                               std::vector<float>* onehot) const {
    const int64_t voxels = o_.size * o_.size * o_.size;
    image->assign(static_cast<size_t>(o_.batch * voxels), 0.0f);
    onehot->assign(static_cast<size_t>(o_.batch * model_.classes * voxels), 0.0f);
    std::vector<float> one_image, one_hot;
    for (int64_t n = 0; n < o_.batch; ++n) {
      std::seed_seq seq{data_seed(), static_cast<uint64_t>(step), static_cast<uint64_t>(n)};
      std::mt19937_64 rng(seq);
      const size_t pick = std::uniform_int_distribution<size_t>(0, data_.subjects.size() - 1)(rng);
      BatchOptions bo{.crop = o_.size,
                      .batch = 1,
                      .flips = !o_.no_flips,
                      .intensity_jitter = o_.intensity_jitter,
                      .max_gamma = o_.max_gamma,
                      .max_rotation_deg = o_.max_rotation_deg,
                      .max_scaling = o_.max_scaling,
                      .classes = model_.classes,
                      .swap_left_right = data_.swap_left_right};
      LMS_RETURN_IF_ERROR(make_batch(data_.subjects[pick].pair, bo, data_seed(),
                                     step * o_.batch + n, &one_image, &one_hot));
      std::copy(one_image.begin(), one_image.end(), image->begin() + n * voxels);
      std::copy(one_hot.begin(), one_hot.end(), onehot->begin() + n * model_.classes * voxels);
    }
    return absl::OkStatus();
  }

  absl::Status run_step(int64_t step) {
    std::vector<float> image, onehot;
    LMS_RETURN_IF_ERROR(make_step_batch(step, &image, &onehot));
    Feeds feeds;
    feeds.emplace("image", std::move(image));
    feeds.emplace("labels", std::move(onehot));
    StepResult r;
    absl::Status s = session_->run(feeds, &r);
    if (!s.ok()) {
      std::string hint = absl::IsResourceExhausted(s) && !o_.run.lms_active()
                             ? " (enable LMS with --lms configs/lms.toml or lower --size)"
                             : "";
      return absl::Status(s.code(), fmt::format("step {}: {}{}", step, to_std(s.message()), hint));
    }
    // The mean over the ranks (the same bits on each), so all stop together.
    LMS_ASSIGN_OR_RETURN(const double mean_loss, ranks_.mean(r.fetched.at("loss")[0]));
    const float loss = static_cast<float>(mean_loss);
    if (!std::isfinite(loss)) {
      return absl::InternalError(fmt::format("step {}: loss is {} (try a lower --lr)", step, loss));
    }
    result_.losses.push_back(loss);
    result_.peak_device_bytes = std::max(result_.peak_device_bytes, r.peak_device_bytes);
    result_.bytes_d2h_per_step = r.bytes_d2h;
    result_.bytes_h2d_per_step = r.bytes_h2d;
    const bool line = step % o_.log_every == 0 || step == o_.steps;
    if (line || o_.live_progress) {
      const double voxels = static_cast<double>(global_batch() * o_.size * o_.size * o_.size);
      log_ << fmt::format(
          "{}{} step {:>5}/{}  loss {:.4f}  {:8.3g} vox/s  peak {}  swap out {} in {}  stall "
          "{:.3f} s{}",
          o_.live_progress ? "\r" : "", progress_bar(step, o_.steps), step, o_.steps, loss,
          voxels / std::max(r.step_s, 1e-9), format_bytes(r.peak_device_bytes),
          format_bytes(r.bytes_d2h), format_bytes(r.bytes_h2d), r.stall_s, line ? "\n" : "");
      log_.flush();
    }
    return absl::OkStatus();
  }

  void print_summary() {
    log_ << fmt::format("done: steps {}..{} in {:.1f} s ({:.3g} voxels/s), final loss {:.4f}\n",
                        result_.first_step, o_.steps, result_.total_s, result_.voxels_per_s,
                        result_.losses.empty() ? 0.0f : result_.losses.back());
    log_ << examples::format_run_end({.lms_report = &result_.lms_report,
                                      .peak_device_bytes = result_.peak_device_bytes,
                                      .capacity_bytes = o_.run.device.capacity_bytes,
                                      .bytes_d2h_per_step = result_.bytes_d2h_per_step,
                                      .bytes_h2d_per_step = result_.bytes_h2d_per_step,
                                      .checkpoint = o_.checkpoint,
                                      .last_step = o_.steps});
  }

  const TrainOptions& o_;
  examples::Ranks& ranks_;
  std::ostream& log_;  // null on ranks > 0
  LmsConfig cfg_;
  ModelSpec model_;
  DataSet data_;
  Graph train_;
  Recorder recorder_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Session> session_;  // declared last: destroyed before the device
  int64_t next_step_ = 1;
  TrainResult result_;
};

absl::StatusOr<int64_t> meta_int(const io::Checkpoint& ck, const std::string& path,
                                 const std::string& key) {
  auto it = ck.meta.find(key);
  int64_t v = 0;
  if (it != ck.meta.end()) {
    const std::string& s = it->second;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && end == s.data() + s.size() && v > 0) return v;
  }
  return absl::DataLossError(fmt::format(
      "checkpoint '{}' has no positive integer '{}' in its meta (not written by unet3d train)",
      path, key));
}

}  // namespace

absl::StatusOr<ModelSpec> model_spec(const io::Checkpoint& ck, const std::string& path) {
  LMS_RETURN_IF_ERROR(examples::check_model_entry(ck, path, "isensee_unet3d", "unet3d"));
  ModelSpec m;
  LMS_ASSIGN_OR_RETURN(m.filters, meta_int(ck, path, "filters"));
  LMS_ASSIGN_OR_RETURN(m.levels, meta_int(ck, path, "levels"));
  LMS_ASSIGN_OR_RETURN(m.segmentation_levels, meta_int(ck, path, "seg_levels"));
  LMS_ASSIGN_OR_RETURN(int64_t classes, meta_int(ck, path, "classes"));
  m.classes = static_cast<int>(classes);
  LMS_ASSIGN_OR_RETURN(m.size, meta_int(ck, path, "size"));
  LMS_ASSIGN_OR_RETURN(m.grid, meta_int(ck, path, "grid"));
  return m;
}

absl::StatusOr<TrainResult> train(const TrainOptions& opts, std::ostream& log) {
  LMS_ASSIGN_OR_RETURN(examples::Ranks ranks, examples::Ranks::join(opts.distributed));
  TrainRun run(opts, ranks, log);
  absl::Status s = run.prepare();
  if (s.ok()) s = run.run();
  if (!s.ok()) return ranks.fail(s);  // with peers: ends the job, naming this rank
  return run.take_result();
}

}  // namespace lms::unet3d
