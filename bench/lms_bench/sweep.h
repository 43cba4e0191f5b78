// The lms-bench sweep: every size trained with LMS off and on under one
// device capacity (the TFLMS case-study table, arXiv 1807.02037 Sec. 5),
// then the largest size each way (search.h).
//
//   lms::bench::SweepOptions o{.sizes = {4, 8, 16, 32, 64}, .steps = 2};
//   o.device.capacity_bytes = 256 << 20;
//   LMS_ASSIGN_OR_RETURN(lms::bench::SweepResult r, lms::bench::run_sweep(factory, o, std::cerr));
//   std::cout << lms::bench::format_table(r) << lms::bench::format_limits(r);
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "model_factory.h"
#include "run_case.h"
#include "search.h"

namespace lms::bench {

struct SweepOptions {
  std::vector<int64_t> sizes;  // each a positive multiple of factory.size_step
  int steps = 2;               // per run; time/step is the mean after the first
  LmsConfig config;            // LMS settings of the "on" runs
  DeviceSetup device;
  // Per run a Chrome trace <model>_<label><size>_lms_<off|on>.trace.json and
  // per size <model>_<label><size>_memory.svg; empty = none.
  std::string trace_dir;
  bool search = true;   // search_limits after the table
  bool confirm = true;  // ...with a real step at each limit
};

struct SweepResult {
  std::string model;
  std::string size_label;
  std::string data_note;
  std::string device = "cpu-emulated";  // or "cuda"
  uint64_t capacity_bytes = 0;
  uint64_t lms_budget_bytes = 0;                        // what the auto policy plans for
  double link_bytes_per_s = 0;                          // device copy throttle (0 = unthrottled)
  KernelChoice kernel_choice = KernelChoice::kDefault;  // of the LMS runs
  TimeModel time_model = TimeModel::kMeasured;          // of the LMS runs' plans
  int steps = 0;
  std::vector<CaseResult> rows;  // per size: LMS off, then LMS on
  bool searched = false;
  Limits limits;
  std::vector<std::string> files;  // traces and plots written
};

// Progress lines go to `log`. Errors: InvalidArgument for no sizes, a size
// the factory rejects or steps < 1; errors of the runs (not OOM, which is a
// row status) and of writing the traces.
absl::StatusOr<SweepResult> run_sweep(const ModelFactory& factory, const SweepOptions& options,
                                      std::ostream& log);

}  // namespace lms::bench
