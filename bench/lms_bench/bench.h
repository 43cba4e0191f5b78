// The lms-bench program as a function, so tests run it in-process.
//
//   int rc = lms::bench::run_main({"vdsr", "--batch", "4,8"}, std::cout, std::cerr);
//
// Exit codes: 0 done; 2 bad command line or config (the message names the
// flag / key, the value and what is allowed); 1 a run failed for another
// reason. Running out of device memory is a table row, not a failure.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli.h"
#include "lms/config.h"
#include "model_factory.h"
#include "run_case.h"

namespace lms::bench {

// The 3-D U-Net of a command: --arch, --filters, --levels; with --data the
// MRI volumes (unet3d_data.h: 1 input channel, kMriClasses classes) when
// loadable (a warning on `err` and random volumes of the same shapes
// otherwise; InvalidArgument for a volume that reads but is unusable),
// without it random volumes (4 channels, 4 classes).
Unet3dBenchModel command_unet_model(const BenchCommand& cmd);
absl::StatusOr<ModelFactory> command_unet_factory(const BenchCommand& cmd, std::ostream& err);

int run_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The LMS config of a command: --lms file (or defaults), --lms-set overrides,
// then --link for both directions. InvalidArgument naming the flag.
absl::StatusOr<LmsConfig> command_config(const BenchCommand& cmd);

// The emulated device of a command: capacity, host pool, threads, and copies
// throttled to the config's link (PCIe-like by default).
DeviceSetup command_device(const BenchCommand& cmd, const LmsConfig& config);

// The VDSR factory of a command: real photo patches from --data when given
// and loadable (a warning on `err` and random data otherwise).
absl::StatusOr<ModelFactory> command_vdsr_factory(const BenchCommand& cmd, std::ostream& err);

}  // namespace lms::bench
