// Pieces shared by `vdsr train` and `vdsr eval`: the device factory and the
// bridge between a Session's persistent tensors and a checkpoint file.
//
//   LMS_ASSIGN_OR_RETURN(auto device, vdsr::make_device(opts.run, lms_config.link));
//   ...
//   LMS_RETURN_IF_ERROR(vdsr::save_session(*session, train, "vdsr.ckpt", step, meta));
//   LMS_ASSIGN_OR_RETURN(io::Checkpoint ck, io::load_checkpoint("vdsr.ckpt"));
//   LMS_RETURN_IF_ERROR(vdsr::restore_session(*session, train, ck));
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli.h"
#include "lms/config.h"
#include "lms/device.h"
#include "lms/graph.h"
#include "lms/io/checkpoint.h"
#include "lms/session.h"

namespace lms::vdsr {

// The device named by run.device: "cpu" (lms::make_cpu_device) with run's
// capacity, host pool and threads, copies throttled to `link` (the emulated
// PCIe link); "cuda" (lms::make_cuda_device, GPU 0) with run's capacity and
// host pool. Errors: InvalidArgument for other names; the device's own
// errors otherwise, after "--device <name>: " for cuda (Unimplemented, with
// the library's reason, when lms has no CUDA backend or there is no GPU).
absl::StatusOr<std::unique_ptr<Device>> make_device(const RunOptions& run, const LinkConfig& link);

// Saves every persistent tensor of `session` (parameters and optimizer
// state) with its shape in `graph`, atomically. Errors of save_checkpoint;
// FailedPrecondition, leaving `path` untouched, when a value is not finite
// or step < 0 (io::validate_checkpoint_values: such a file could not be
// resumed or evaluated).
absl::Status save_session(const Session& session, const Graph& graph, const std::string& path,
                          int64_t step, const std::map<std::string, std::string>& meta);

// Writes the checkpoint's values into every persistent tensor of `session`
// whose role is in the selected set: all persistent tensors when
// `parameters_only` is false, only kParameter ones otherwise (eval).
// DataLoss naming the tensor when the checkpoint lacks one or its shape
// differs from the graph's.
absl::Status restore_session(Session& session, const Graph& graph, const io::Checkpoint& ck,
                             bool parameters_only);

}  // namespace lms::vdsr
