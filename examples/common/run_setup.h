// Pieces every example training program shares: the device factory, the LMS
// config from a file and overrides, the bridge between a Session's persistent
// tensors and a checkpoint file, the output checks made before a run, the
// resume check and the trace files written after it.
//
//   LMS_ASSIGN_OR_RETURN(LmsConfig cfg, examples::load_lms_config(file, {"policy=auto"}));
//   LMS_ASSIGN_OR_RETURN(auto device, examples::make_device(device_options, cfg.link));
//   ...
//   LMS_RETURN_IF_ERROR(examples::save_session(*session, train, "model.ckpt", step, meta));
//   LMS_ASSIGN_OR_RETURN(io::Checkpoint ck, io::load_usable_checkpoint("model.ckpt"));
//   LMS_RETURN_IF_ERROR(examples::restore_session(*session, train, ck, false));
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/config.h"
#include "lms/device.h"
#include "lms/graph.h"
#include "lms/io/checkpoint.h"
#include "lms/profiler/recorder.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/training.h"

namespace lms::examples {

struct DeviceOptions {
  std::string device = "cpu";                    // "cpu" (emulated device) or "cuda" (a GPU)
  uint64_t capacity_bytes = uint64_t{1} << 30;   // device memory
  uint64_t host_pool_bytes = uint64_t{8} << 30;  // pinned host pool limit
  int threads = 0;                               // compute threads, 0 = all cores
  int cuda_ordinal = 0;  // the GPU of "cuda"; data-parallel ranks take their local rank
};

// The device named by options.device: "cpu" (lms::make_cpu_device) with the
// capacity, host pool and threads, copies throttled to `link` (the emulated
// PCIe link); "cuda" (lms::make_cuda_device, GPU cuda_ordinal) with the
// capacity and host pool. Errors: InvalidArgument for other names; the device's own
// errors otherwise, after "--device <name>: " for cuda (Unimplemented, with
// the library's reason, when lms has no CUDA backend or there is no GPU).
absl::StatusOr<std::unique_ptr<Device>> make_device(const DeviceOptions& options,
                                                    const LinkConfig& link);

// The LMS config of a run: `file` (TOML; defaults when empty), then each
// "key=value" of `overrides`. Errors of LmsConfig::from_file, and
// InvalidArgument "--lms-set <kv>: <reason>" for a bad override.
absl::StatusOr<LmsConfig> load_lms_config(const std::string& file,
                                          const std::vector<std::string>& overrides);

// Mixed precision for a program's --precision: "bf16" and "fp16" autocast
// the forward graph `forward` (lms/autocast.h), "fp32" leaves it;
// InvalidArgument for anything else.
absl::Status apply_precision(Graph& forward, std::string_view precision);
// The training options of --precision: fp16 trains with dynamic loss
// scaling (lms::LossScaling, PyTorch's GradScaler defaults).
TrainingOptions precision_training_options(std::string_view precision);

// Saves every persistent tensor of `session` (parameters and optimizer
// state) with its shape in `graph`, atomically. Errors of save_checkpoint;
// FailedPrecondition, leaving `path` untouched, when a value is not finite
// or step < 0 (io::validate_checkpoint_values: such a file could not be
// resumed or evaluated).
// Writes `losses` (each a float32 loss widened to double) to `path`, one per
// line with the 9 significant digits that give the float back exactly, as
// the Python examples (examples/python) write theirs; atomically. Errors of
// io::write_file_atomically.
absl::Status write_losses(const std::string& path, const std::vector<double>& losses);

absl::Status save_session(const Session& session, const Graph& graph, const std::string& path,
                          int64_t step, const std::map<std::string, std::string>& meta);

// Writes the checkpoint's values into every persistent tensor of `session`
// whose role is in the selected set: all persistent tensors when
// `parameters_only` is false, only kParameter ones otherwise (eval).
// DataLoss naming the tensor when the checkpoint lacks one or its shape
// differs from the graph's.
absl::Status restore_session(Session& session, const Graph& graph, const io::Checkpoint& ck,
                             bool parameters_only);

// The checkpoint and trace are written after steps that may take hours: an
// unwritable location must fail before the first step. Checks `checkpoint`
// and <trace_dir>/trace.json (either may be empty) with io::check_writable;
// the errno-derived code with "--checkpoint: " or "--trace: " otherwise.
absl::Status check_outputs(const std::string& checkpoint, const std::string& trace_dir);

// --resume reproduces the uninterrupted run only with the same settings:
// FailedPrecondition naming the key and both values when a key of `meta`
// differs in ck.meta (or is missing), or when ck.step >= steps.
absl::Status check_resume(const io::Checkpoint& ck, const std::string& path,
                          const std::map<std::string, std::string>& meta, int64_t steps);

// What a checksum cannot catch in a checkpoint to resume from:
// FailedPrecondition naming a tensor the session does not hold (it would be
// dropped silently by the next save); DataLoss when the optimizer/step
// counter (Adam's t) differs from ck.step.
absl::Status check_resumed_state(const Session& session, const io::Checkpoint& ck,
                                 const std::string& path);

// eval / predict: DataLoss unless ck.meta has model=`model` (written by
// `program` train).
absl::Status check_model_entry(const io::Checkpoint& ck, const std::string& path,
                               const std::string& model, const std::string& program);

// The --data folder as the run meta records it (the absolute path with
// symbolic links resolved), so that --resume with another folder is refused
// and the same folder named another way is not.
std::string data_identity(const std::string& dir);

// --resume: loads the checkpoint at `path` (io::load_usable_checkpoint),
// checks it with check_resume and check_resumed_state, restores every
// persistent tensor of `session` (restore_session) and returns the step it
// was written after. Errors of those four.
absl::StatusOr<int64_t> resume_session(Session& session, const Graph& graph,
                                       const std::string& path,
                                       const std::map<std::string, std::string>& meta,
                                       int64_t steps);

// Writes <dir>/trace.json (Chrome trace), <dir>/memory.svg (device bytes of
// the step `last_step` over time, with the capacity line, labelled
// `series_label`, titled `title`) and prints the profile summary (copy /
// compute overlap, stall) and the file names to `log`. The folder is
// created. InvalidArgument when it cannot be; write errors otherwise.
absl::Status write_trace_files(const Recorder& recorder, uint64_t capacity_bytes,
                               const std::string& dir, const std::string& series_label,
                               int64_t last_step, const std::string& title, std::ostream& log);

// The end-of-run lines every training program prints after its "done:"
// line: the device peak against the capacity, what LMS swapped per step
// (or "LMS off") and the checkpoint written.
struct RunEnd {
  const RewriteReport* lms_report = nullptr;  // enabled == false without LMS
  uint64_t peak_device_bytes = 0;
  uint64_t capacity_bytes = 0;
  uint64_t bytes_d2h_per_step = 0;
  uint64_t bytes_h2d_per_step = 0;
  std::string checkpoint;  // empty: none written
  int64_t last_step = 0;
};
std::string format_run_end(const RunEnd& end);

}  // namespace lms::examples
