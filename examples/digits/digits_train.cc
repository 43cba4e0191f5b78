#include "digits_train.h"

#include <chrono>
#include <utility>

#include "digits_data.h"
#include "fmt/format.h"
#include "lms/device.h"
#include "lms/loss.h"
#include "lms/onnx.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/training.h"
#include "lms/units.h"
#include "run_setup.h"

namespace lms::examples {
namespace {

constexpr const char* kInput = "input";

// The imported classifier at `batch`: the training graph (eval = false) or
// the forward graph with running batch-norm statistics (eval = true).
absl::StatusOr<ImportedModel> import_at(const DigitsOptions& o, int64_t batch, bool eval) {
  return import_onnx(o.model,
                     {.input_shapes = {{kInput, {batch, 1, o.side, o.side}}}, .eval_mode = eval});
}

absl::StatusOr<Graph> training_graph_at(const DigitsOptions& o) {
  LMS_ASSIGN_OR_RETURN(ImportedModel m, import_at(o, o.batch, false));
  if (m.outputs.empty()) return absl::InvalidArgumentError(o.model + ": the model has no output");
  LMS_ASSIGN_OR_RETURN(TensorId loss,
                       attach_loss(m.graph, m.outputs[0], CrossEntropy{.labels = "labels"}));
  LMS_RETURN_IF_ERROR(apply_precision(m.graph, o.precision));
  loss = m.graph.loss();
  return training_graph(m.graph, loss,
                        Sgd{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay},
                        precision_training_options(o.precision));
}

// The fraction of `test` the trained weights of `trained` classify right,
// with the forward graph in eval mode on a device of the same capacity.
absl::StatusOr<double> evaluate(const DigitsOptions& o, const Digits& test, Session& trained,
                                const LmsConfig& cfg) {
  LMS_ASSIGN_OR_RETURN(ImportedModel m, import_at(o, o.batch, true));
  LMS_RETURN_IF_ERROR(apply_precision(m.graph, o.precision));
  LMS_ASSIGN_OR_RETURN(
      auto device,
      make_device({.capacity_bytes = o.capacity_bytes, .threads = o.threads}, cfg.link));
  LMS_ASSIGN_OR_RETURN(auto session,
                       Session::create(m.graph, *device, {.fetches = {m.outputs[0]}}));
  for (const std::string& name : session->persistent_tensors()) {
    LMS_ASSIGN_OR_RETURN(std::vector<float> values, trained.read(name));
    LMS_RETURN_IF_ERROR(session->write(name, values));
  }
  int64_t right = 0;
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  for (int64_t first = 0; first < test.count(); first += o.batch) {
    digits_batch(test, first, o.batch, &pixels, &labels);
    StepResult r;
    LMS_RETURN_IF_ERROR(session->run({{kInput, pixels}}, &r));
    const std::vector<float>& logits = r.fetched.at(m.outputs[0]);
    for (int64_t k = 0; k < o.batch && first + k < test.count(); ++k) {
      int64_t best = 0;
      for (int64_t c = 1; c < 10; ++c) {
        if (logits[static_cast<size_t>(k * 10 + c)] > logits[static_cast<size_t>(k * 10 + best)]) {
          best = c;
        }
      }
      right += best == labels[static_cast<size_t>(k)];
    }
  }
  return static_cast<double>(right) / static_cast<double>(test.count());
}

}  // namespace

absl::StatusOr<DigitsResult> train_digits(const DigitsOptions& o, std::ostream& log) {
  LMS_ASSIGN_OR_RETURN(Digits all, read_digits(o.data, o.side));
  const DigitsSplit split = split_digits(all, o.test_fraction, o.seed);
  DigitsResult result;
  result.train_images = split.train.count();
  result.test_images = split.test.count();
  log << fmt::format("digits: {} training and {} held-out images of {}x{} (seed {})\n",
                     result.train_images, result.test_images, o.side, o.side, o.seed);
  LMS_ASSIGN_OR_RETURN(LmsConfig cfg, load_lms_config(o.lms_file, o.lms_sets));
  LMS_ASSIGN_OR_RETURN(Graph train, training_graph_at(o));
  LMS_ASSIGN_OR_RETURN(
      auto device,
      make_device({.capacity_bytes = o.capacity_bytes, .threads = o.threads}, cfg.link));
  // What the step needs without LMS, on a device large enough to hold it.
  {
    LMS_ASSIGN_OR_RETURN(
        auto big,
        make_device({.capacity_bytes = uint64_t{64} << 30, .threads = o.threads}, cfg.link));
    LmsConfig off = cfg;
    off.enabled = false;
    Graph probe = train;
    LMS_ASSIGN_OR_RETURN(RewriteReport none, rewrite(probe, off, *big, {.fetched = {"loss"}}));
    result.no_lms_peak_bytes = none.peak_bytes_after;
  }
  LMS_ASSIGN_OR_RETURN(RewriteReport rep, rewrite(train, cfg, *device, {.fetched = {"loss"}}));
  result.lms_peak_bytes = rep.peak_bytes_after;
  result.swapped = static_cast<int64_t>(rep.swapped.size());
  result.recomputed = static_cast<int64_t>(rep.recomputed.size());
  log << fmt::format(
      "digits: batch {} needs {} without LMS; the device has {}: {}\n", o.batch,
      format_bytes(result.no_lms_peak_bytes), format_bytes(o.capacity_bytes),
      result.no_lms_peak_bytes > o.capacity_bytes ? "LMS needed" : "fits without LMS");
  log << rep.summary() << "\n" << std::flush;
  LMS_ASSIGN_OR_RETURN(auto session, Session::create(train, *device));
  const int64_t per_epoch = (result.train_images + o.batch - 1) / o.batch;
  const int64_t steps = o.max_steps > 0 ? o.max_steps : per_epoch * o.epochs;
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    digits_batch(split.train, step * o.batch, o.batch, &pixels, &labels);
    StepResult r;
    LMS_RETURN_IF_ERROR(session->run({{kInput, pixels}}, {{"labels", labels}}, &r));
    if (r.peak_device_bytes != rep.peak_bytes_after) {
      return absl::FailedPreconditionError(
          fmt::format("digits: step {} peaked at {} bytes, planned {}", step + 1,
                      r.peak_device_bytes, rep.peak_bytes_after));
    }
    const double loss = r.fetched.at("loss").at(0);
    result.losses.push_back(loss);
    if ((step + 1) % o.log_every == 0 || step + 1 == steps) {
      log << fmt::format("step {:4d} (epoch {:.2f})  loss {:.4f}  {:.2f} s/step\n", step + 1,
                         static_cast<double>(step + 1) / static_cast<double>(per_epoch), loss,
                         r.step_s)
          << std::flush;
    }
  }
  result.train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  LMS_ASSIGN_OR_RETURN(result.test_accuracy, evaluate(o, split.test, *session, cfg));
  log << fmt::format(
      "digits: test accuracy {:.2f}% on {} held-out images after {} steps ({:.0f} s); peak {} "
      "(planned), {} swapped, {} recomputed\n",
      100 * result.test_accuracy, result.test_images, steps, result.train_s,
      format_bytes(result.lms_peak_bytes), result.swapped, result.recomputed);
  log << fmt::format("goal: test accuracy >= 95%: {:.2f}% {}\n", 100 * result.test_accuracy,
                     result.test_accuracy >= 0.95 ? "PASS" : "FAIL");
  return result;
}

}  // namespace lms::examples
