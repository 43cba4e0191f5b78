#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>

#include "dataset.h"
#include "distributed.h"
#include "fmt/format.h"
#include "lms/facts.h"
#include "lms/io/checkpoint.h"
#include "lms/io/host_memory.h"
#include "lms/profiler/recorder.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/training.h"
#include "lms/units.h"
#include "models.h"
#include "run_setup.h"
#include "setup.h"

namespace lms::vdsr {
namespace {

constexpr int kScale = 2;

double now_s() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// What a checkpoint must agree on for --resume to reproduce the same run,
// and what the ranks of a data-parallel run must agree on.
std::map<std::string, std::string> run_meta(const TrainOptions& o, int ranks) {
  return {{"model", "vdsr"},
          {"depth", fmt::format("{}", o.depth)},
          {"channels", fmt::format("{}", o.channels)},
          {"scale", fmt::format("{}", kScale)},
          {"batch", fmt::format("{}", o.batch)},
          {"crop", fmt::format("{}", o.crop)},
          {"seed", fmt::format("{}", o.seed)},
          {"lr", fmt::format("{}", o.lr)},
          {"clip_norm", fmt::format("{}", o.clip_norm)},
          {"max_images", fmt::format("{}", o.run.max_images)},
          {"ranks", fmt::format("{}", ranks)},
          {"scale_lr", o.distributed.scale_lr ? "on" : "off"},
          {"data", examples::data_identity(o.run.data_dir)}};
}

// One training run (Note [Data-parallel runs] with --distributed): the
// objects that must outlive the session, in order.
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
    // Options built in code skip parse_command_line's check.
    LMS_RETURN_IF_ERROR(check_host_memory(o_, io::host_memory_limit_bytes()));
    LMS_ASSIGN_OR_RETURN(cfg_, examples::load_lms_config(o_.lms_config, o_.lms_overrides));
    LMS_RETURN_IF_ERROR(ranks_.check_same_settings(meta()));
    LMS_RETURN_IF_ERROR(ranks_.check_same("LMS configs", o_.lms_active() ? cfg_.to_toml() : ""));
    if (ranks_.is_root()) LMS_RETURN_IF_ERROR(examples::check_outputs(o_.checkpoint, o_.trace_dir));
    LMS_RETURN_IF_ERROR(load_data());
    LMS_RETURN_IF_ERROR(build_graph());
    LMS_ASSIGN_OR_RETURN(device_, make_device(o_.run, cfg_.link, ranks_.local_rank()));
    LMS_RETURN_IF_ERROR(ranks_.attach_device(*device_));
    if (o_.lms_active()) {
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
    double start = now_s();
    for (int64_t step = next_step_; step <= o_.steps; ++step) {
      LMS_RETURN_IF_ERROR(ranks_.inject_fault(step));
      LMS_RETURN_IF_ERROR(run_step(step));
      bool periodic = o_.checkpoint_every > 0 && step % o_.checkpoint_every == 0;
      if (!o_.checkpoint.empty() && (periodic || step == o_.steps)) {
        LMS_RETURN_IF_ERROR(
            examples::save_on_root(ranks_, *session_, train_, o_.checkpoint, step, meta()));
      }
    }
    result_.total_s = now_s() - start;
    int64_t ran = o_.steps - result_.first_step + 1;
    result_.images_per_s =
        static_cast<double>(ran * global_batch()) / std::max(result_.total_s, 1e-9);
    for (const std::string& name : session_->persistent_tensors()) {
      LMS_ASSIGN_OR_RETURN(result_.persistent[name], session_->read(name));
    }
    LMS_RETURN_IF_ERROR(write_trace());
    print_summary();
    return absl::OkStatus();
  }

  TrainResult take_result() { return std::move(result_); }

 private:
  std::map<std::string, std::string> meta() const { return run_meta(o_, ranks_.size()); }
  int64_t global_batch() const { return int64_t{o_.batch} * ranks_.size(); }
  double learning_rate() const { return ranks_.learning_rate(o_.lr, o_.distributed.scale_lr); }

  // Each rank its own batches (Note [Data-parallel runs]).
  BatchOptions batch_options() const {
    return {o_.batch, o_.crop, examples::rank_seed(o_.seed, ranks_.rank()), true};
  }

  absl::Status load_data() {
    std::vector<std::string> warnings;
    std::string dir = (std::filesystem::path(o_.run.data_dir) / "train").string();
    LMS_ASSIGN_OR_RETURN(Dataset d, Dataset::load(dir,
                                                  {.scale = kScale,
                                                   .max_images = o_.run.max_images,
                                                   .min_side = o_.crop,
                                                   .rank = ranks_.rank(),
                                                   .ranks = ranks_.size()},
                                                  &warnings));
    for (const std::string& w : warnings) ranks_.warn(log_, "skipped " + w);
    data_.emplace(std::move(d));
    LMS_RETURN_IF_ERROR(data_->batch(0, batch_options()).status());  // crop fits every image
    LMS_ASSIGN_OR_RETURN(double images, ranks_.sum(static_cast<double>(data_->pairs().size())));
    log_ << fmt::format("data: {} images from {}{}\n", static_cast<int64_t>(images), dir,
                        ranks_.distributed() ? fmt::format(", rank r of {} trains on images r, "
                                                           "r+{}, ...",
                                                           ranks_.size(), ranks_.size())
                                             : "");
    return absl::OkStatus();
  }

  absl::Status build_graph() {
    Graph g;
    models::ModelTensors m = models::build_vdsr(g, {.batch = o_.batch,
                                                    .height = o_.crop,
                                                    .width = o_.crop,
                                                    .depth = o_.depth,
                                                    .channels = o_.channels,
                                                    .seed = o_.seed});
    LMS_RETURN_IF_ERROR(g.status());
    g.set_loss(m.loss);
    LMS_RETURN_IF_ERROR(examples::apply_precision(g, o_.precision));
    TrainingOptions to = examples::precision_training_options(o_.precision);
    if (ranks_.distributed()) to.data_parallel = DataParallel{};
    LMS_ASSIGN_OR_RETURN(
        train_,
        training_graph(g, g.loss(), Adam{.lr = learning_rate(), .clip_norm = o_.clip_norm}, to));
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
    // The Device overload: the device's capacity, alignment and kernel
    // workspaces, the time model of cfg_ (measured on the device by
    // default) and the least-workspace fallback for tight budgets.
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

  absl::Status run_step(int64_t step) {
    LMS_ASSIGN_OR_RETURN(Batch b, data_->batch(step - 1, batch_options()));
    Feeds feeds;
    feeds.emplace("lr", std::move(b.lr));
    feeds.emplace("hr", std::move(b.hr));
    StepResult r;
    absl::Status s = session_->run(feeds, &r);
    if (!s.ok())
      return absl::Status(s.code(), fmt::format("step {}: {}", step, to_std(s.message())));
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
    if (step % o_.log_every == 0 || step == o_.steps) {
      log_ << fmt::format(
          "step {:>6}/{}  loss {:.6e}  {:7.1f} img/s  peak {}  swap out {} in {}  stall {:.3f} s\n",
          step, o_.steps, loss, global_batch() / std::max(r.step_s, 1e-9),
          format_bytes(r.peak_device_bytes), format_bytes(r.bytes_d2h), format_bytes(r.bytes_h2d),
          r.stall_s);
      log_.flush();
    }
    return absl::OkStatus();
  }

  absl::Status write_trace() {
    if (o_.trace_dir.empty() || !ranks_.is_root()) return absl::OkStatus();
    return examples::write_trace_files(recorder_, o_.run.capacity_bytes, o_.trace_dir,
                                       o_.lms_active() ? "LMS on" : "LMS off",
                                       static_cast<int64_t>(result_.losses.size()) - 1,
                                       fmt::format("VDSR batch {}, last step", o_.batch), log_);
  }

  void print_summary() {
    log_ << fmt::format("done: steps {}..{} in {:.1f} s ({:.1f} img/s), final loss {:.6e}\n",
                        result_.first_step, o_.steps, result_.total_s, result_.images_per_s,
                        result_.losses.back());
    log_ << examples::format_run_end({.lms_report = &result_.lms_report,
                                      .peak_device_bytes = result_.peak_device_bytes,
                                      .capacity_bytes = o_.run.capacity_bytes,
                                      .bytes_d2h_per_step = result_.bytes_d2h_per_step,
                                      .bytes_h2d_per_step = result_.bytes_h2d_per_step,
                                      .checkpoint = o_.checkpoint,
                                      .last_step = o_.steps});
  }

  const TrainOptions& o_;
  examples::Ranks& ranks_;
  std::ostream& log_;  // null on ranks > 0
  LmsConfig cfg_;
  std::optional<Dataset> data_;
  Graph train_;
  Recorder recorder_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Session> session_;  // declared last: destroyed before the device
  int64_t next_step_ = 1;
  TrainResult result_;
};

}  // namespace

absl::StatusOr<TrainResult> train(const TrainOptions& opts, std::ostream& log) {
  LMS_ASSIGN_OR_RETURN(examples::Ranks ranks, examples::Ranks::join(opts.distributed));
  TrainRun run(opts, ranks, log);
  absl::Status s = run.prepare();
  if (s.ok()) s = run.run();
  if (!s.ok()) return ranks.fail(s);  // with peers: ends the job, naming this rank
  return run.take_result();
}

}  // namespace lms::vdsr
