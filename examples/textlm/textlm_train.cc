#include "textlm_train.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

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
#include "text_data.h"

namespace lms::examples {
namespace {

constexpr int64_t kVocab = 256;  // one token per byte
constexpr const char* kNext = "next";

// The imported decoder at [batch, context] with the next-byte loss attached.
absl::StatusOr<Graph> import_with_loss(const TextLmOptions& o, const std::string& input) {
  LMS_ASSIGN_OR_RETURN(ImportedModel m,
                       import_onnx(o.model, {.input_shapes = {{input, {o.batch, o.context}}}}));
  if (m.inputs.size() != 1 || m.inputs[0] != input) {
    return absl::InvalidArgumentError(
        fmt::format("{}: textlm feeds a model with one input, '{}'", o.model, input));
  }
  const TensorId in = m.graph.find_tensor(input);
  if (m.graph.tensor(in).dtype != DType::kInt64) {
    return absl::InvalidArgumentError(
        fmt::format("{}: the input '{}' must be int64 token ids", o.model, input));
  }
  if (m.outputs.empty()) return absl::InvalidArgumentError(o.model + ": the model has no output");
  const Shape out = m.graph.tensor(m.graph.find_tensor(m.outputs[0])).shape;
  if (out != Shape{o.batch, o.context, kVocab}) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: the output '{}' is [{}]; textlm needs logits [{}, {}, {}] (one per byte value)",
        o.model, m.outputs[0], fmt::join(out, ","), o.batch, o.context, kVocab));
  }
  LMS_ASSIGN_OR_RETURN(
      TensorId loss,
      attach_loss(m.graph, m.outputs[0], CrossEntropy{.labels = kNext, .classes_last = true}));
  (void)loss;  // attach_loss made it the graph's loss
  LMS_RETURN_IF_ERROR(apply_precision(m.graph, o.precision));
  return std::move(m.graph);
}

// What one training run leaves.
struct Run {
  std::vector<float> losses;  // each step's, as fetched (compared bit for bit)
  std::vector<std::pair<int64_t, double>> held_out_bits;
  std::vector<std::pair<std::string, std::vector<float>>> weights;
  std::vector<std::vector<float>> raw_held_out;
};

// The mean loss over the held-out windows in bits per character, with the
// weights of `trained` copied into `eval` by name.
absl::StatusOr<double> held_out_bits(const TextLmOptions& o, Session& trained, Session& eval,
                                     const std::string& input, const std::vector<int64_t>& ids,
                                     const std::vector<int64_t>& next, std::vector<float>* raw) {
  for (const std::string& name : eval.persistent_tensors()) {
    LMS_ASSIGN_OR_RETURN(std::vector<float> values, trained.read(name));
    LMS_RETURN_IF_ERROR(eval.write(name, values));
  }
  const size_t per_batch = static_cast<size_t>(o.batch * o.context);
  double sum = 0;
  int64_t batches = 0;
  for (size_t first = 0; first + per_batch <= ids.size(); first += per_batch) {
    StepResult r;
    LMS_RETURN_IF_ERROR(eval.run(
        {},
        {{input, std::vector<int64_t>(ids.begin() + first, ids.begin() + first + per_batch)},
         {kNext, std::vector<int64_t>(next.begin() + first, next.begin() + first + per_batch)}},
        &r));
    const float loss = r.fetched.at("loss").at(0);
    raw->push_back(loss);
    sum += loss;
    ++batches;
  }
  return sum / static_cast<double>(batches) / std::log(2.0);
}

// `steps` steps of `train` on `device`, each checked to peak at
// `planned_peak`, with the held-out loss of the forward graph `eval_graph`
// (on a device of its own) before the first, every eval_every steps and
// after the last.
absl::StatusOr<Run> train_run(const TextLmOptions& o, const Graph& train, const Graph& eval_graph,
                              Device& device, Device& eval_device, uint64_t planned_peak,
                              const TextSplit& split, const std::string& input, bool verbose,
                              std::ostream& log) {
  Run run;
  LMS_ASSIGN_OR_RETURN(auto session, Session::create(train, device));
  LMS_ASSIGN_OR_RETURN(auto eval, Session::create(eval_graph, eval_device, {.fetches = {"loss"}}));
  std::vector<int64_t> eval_ids, eval_next;
  eval_windows(split.held_out, o.eval_windows, o.context, &eval_ids, &eval_next);
  auto evaluate = [&](int64_t step) -> absl::Status {
    std::vector<float> raw;
    LMS_ASSIGN_OR_RETURN(double bits,
                         held_out_bits(o, *session, *eval, input, eval_ids, eval_next, &raw));
    run.held_out_bits.emplace_back(step, bits);
    run.raw_held_out.push_back(std::move(raw));
    if (verbose) {
      log << fmt::format("held-out after {:4d} steps: {:.4f} bits/char\n", step, bits)
          << std::flush;
    }
    return absl::OkStatus();
  };
  LMS_RETURN_IF_ERROR(evaluate(0));
  std::vector<int64_t> ids, next;
  for (int64_t step = 0; step < o.steps; ++step) {
    text_batch(split.train, o.batch, o.context, o.seed, step, &ids, &next);
    StepResult r;
    LMS_RETURN_IF_ERROR(session->run({}, {{input, ids}, {kNext, next}}, &r));
    if (planned_peak != 0 && r.peak_device_bytes != planned_peak) {
      return absl::FailedPreconditionError(
          fmt::format("textlm: step {} peaked at {} bytes, planned {}", step + 1,
                      r.peak_device_bytes, planned_peak));
    }
    const std::vector<float>& loss = r.fetched.at("loss");
    run.losses.push_back(loss.at(0));
    if (verbose && ((step + 1) % o.log_every == 0 || step + 1 == o.steps)) {
      log << fmt::format("step {:4d}  loss {:.4f} bits/char  {:.2f} s/step\n", step + 1,
                         loss.at(0) / std::log(2.0), r.step_s)
          << std::flush;
    }
    if ((step + 1) % o.eval_every == 0 || step + 1 == o.steps) {
      LMS_RETURN_IF_ERROR(evaluate(step + 1));
    }
  }
  for (const std::string& name : session->persistent_tensors()) {
    LMS_ASSIGN_OR_RETURN(std::vector<float> values, session->read(name));
    run.weights.emplace_back(name, std::move(values));
  }
  return run;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool same_run(const Run& a, const Run& b) {
  if (!same_bits(a.losses, b.losses) || a.raw_held_out.size() != b.raw_held_out.size() ||
      a.weights.size() != b.weights.size()) {
    return false;
  }
  for (size_t k = 0; k < a.raw_held_out.size(); ++k) {
    if (!same_bits(a.raw_held_out[k], b.raw_held_out[k])) return false;
  }
  for (size_t k = 0; k < a.weights.size(); ++k) {
    if (a.weights[k].first != b.weights[k].first ||
        !same_bits(a.weights[k].second, b.weights[k].second)) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<TextLmResult> train_text_lm(const TextLmOptions& o, std::ostream& log) {
  LMS_ASSIGN_OR_RETURN(std::string text, read_text(o.data));
  const TextSplit split = split_text(text, o.held_out_fraction);
  const int64_t window_bytes = o.context + 1;
  if (static_cast<int64_t>(split.held_out.size()) <= window_bytes ||
      static_cast<int64_t>(split.train.size()) <= window_bytes) {
    return absl::InvalidArgumentError(fmt::format(
        "textlm: {} bytes split into {} to train and {} held out; each needs more than a window "
        "of {} bytes",
        text.size(), split.train.size(), split.held_out.size(), window_bytes));
  }
  TextLmResult result;
  result.train_bytes = static_cast<int64_t>(split.train.size());
  result.held_out_bytes = static_cast<int64_t>(split.held_out.size());
  log << fmt::format(
      "textlm: {} bytes to train on and {} held out (the last {:.0f}%); windows of {} bytes, "
      "batch {}, seed {}\n",
      result.train_bytes, result.held_out_bytes, 100 * o.held_out_fraction, o.context, o.batch,
      o.seed);
  const std::string& input = o.input;
  LMS_ASSIGN_OR_RETURN(Graph forward, import_with_loss(o, input));
  LMS_ASSIGN_OR_RETURN(Graph train, training_graph(forward, forward.loss(), Adam{.lr = o.lr},
                                                   precision_training_options(o.precision)));
  LMS_ASSIGN_OR_RETURN(LmsConfig cfg, load_lms_config(o.lms_file, o.lms_sets));
  LMS_ASSIGN_OR_RETURN(
      auto big,
      make_device({.capacity_bytes = uint64_t{64} << 30, .threads = o.threads}, cfg.link));
  LmsConfig off = cfg;
  off.enabled = false;
  Graph plain = train;
  LMS_ASSIGN_OR_RETURN(RewriteReport none, rewrite(plain, off, *big, {.fetched = {"loss"}}));
  result.no_lms_peak_bytes = none.peak_bytes_after;
  LMS_ASSIGN_OR_RETURN(
      auto device,
      make_device({.capacity_bytes = o.capacity_bytes, .threads = o.threads}, cfg.link));
  Graph planned = train;
  LMS_ASSIGN_OR_RETURN(RewriteReport rep, rewrite(planned, cfg, *device, {.fetched = {"loss"}}));
  result.lms_peak_bytes = rep.peak_bytes_after;
  result.swapped = static_cast<int64_t>(rep.swapped.size());
  result.recomputed = static_cast<int64_t>(rep.recomputed.size());
  log << fmt::format(
      "textlm: batch {} x {} tokens needs {} without LMS; the device has {}: {}\n", o.batch,
      o.context, format_bytes(result.no_lms_peak_bytes), format_bytes(o.capacity_bytes),
      result.no_lms_peak_bytes > o.capacity_bytes ? "LMS needed" : "fits without LMS");
  log << rep.summary() << "\n" << std::flush;

  const auto start = std::chrono::steady_clock::now();
  // The held-out loss is a forward pass (no saved activations): a device
  // of its own, large enough, for both runs.
  LMS_ASSIGN_OR_RETURN(
      auto eval_device,
      make_device({.capacity_bytes = uint64_t{64} << 30, .threads = o.threads}, cfg.link));
  LMS_ASSIGN_OR_RETURN(Run with_lms, train_run(o, planned, forward, *device, *eval_device,
                                               rep.peak_bytes_after, split, input, true, log));
  result.train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.losses.assign(with_lms.losses.begin(), with_lms.losses.end());
  result.held_out_bits = with_lms.held_out_bits;
  if (o.compare_without_lms) {
    log << "textlm: the same steps without LMS on a large device\n" << std::flush;
    LMS_ASSIGN_OR_RETURN(Run without, train_run(o, plain, forward, *big, *eval_device,
                                                none.peak_bytes_after, split, input, false, log));
    result.compared = true;
    result.bit_identical = same_run(with_lms, without);
  }
  const double first = result.held_out_bits.front().second;
  const double last = result.held_out_bits.back().second;
  log << fmt::format(
      "textlm: held-out {:.4f} -> {:.4f} bits/char after {} steps ({:.0f} s); peak {} "
      "(planned), {} swapped, {} recomputed\n",
      first, last, o.steps, result.train_s, format_bytes(result.lms_peak_bytes), result.swapped,
      result.recomputed);
  log << fmt::format("goal: held-out loss decreases: {}\n", last < first ? "PASS" : "FAIL");
  if (result.compared) {
    log << fmt::format(
        "goal: LMS run bit-identical to the run without LMS (every step's loss, every held-out "
        "loss, the trained weights): {}\n",
        result.bit_identical ? "PASS" : "FAIL");
  }
  return result;
}

}  // namespace lms::examples
