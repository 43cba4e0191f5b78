// Pieces shared by `vdsr train` and `vdsr eval`: the device of the run
// options; the checkpoint bridge and the other run set-up come from the
// examples' common library (run_setup.h).
//
//   LMS_ASSIGN_OR_RETURN(auto device, vdsr::make_device(opts.run, lms_config.link));
//   ...
//   LMS_RETURN_IF_ERROR(examples::save_session(*session, train, "vdsr.ckpt", step, meta));
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "cli.h"
#include "lms/config.h"
#include "lms/device.h"
#include "run_setup.h"

namespace lms::vdsr {

// examples::make_device with run's device, capacity, host pool and threads
// (and `cuda_ordinal`, the GPU of --device cuda).
absl::StatusOr<std::unique_ptr<Device>> make_device(const RunOptions& run, const LinkConfig& link,
                                                    int cuda_ordinal = 0);

using examples::restore_session;
using examples::save_session;

}  // namespace lms::vdsr
