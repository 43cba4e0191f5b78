#include "sweep.h"

#include <filesystem>
#include <utility>

#include "fmt/format.h"
#include "lms/profiler/atomic_file.h"
#include "lms/profiler/chrome_trace.h"
#include "lms/profiler/memory_plot.h"
#include "lms/profiler/summary.h"
#include "lms/status.h"
#include "lms/units.h"

namespace lms::bench {
namespace {

std::string run_stem(const ModelFactory& f, int64_t size) {
  return fmt::format("{}_{}{}", f.model, f.size_label, size);
}

absl::Status check_options(const ModelFactory& f, const SweepOptions& o) {
  if (o.sizes.empty()) return absl::InvalidArgumentError("no sizes to sweep");
  if (o.steps < 1)
    return absl::InvalidArgumentError(fmt::format("--steps {}: must be >= 1", o.steps));
  for (int64_t s : o.sizes) {
    if (s < 1 || s % f.size_step != 0) {
      return absl::InvalidArgumentError(
          fmt::format("{} {}: must be a positive multiple of {}", f.size_label, s, f.size_step));
    }
  }
  return absl::OkStatus();
}

// The device series of the last step a run attempted ("LMS off" / "LMS on").
void add_series(const CaseResult& row, std::vector<MemorySeries>& series) {
  if (!row.recorder || row.steps_attempted == 0) return;
  MemorySeries s =
      device_series(*row.recorder, row.lms ? "LMS on" : "LMS off", row.steps_attempted - 1);
  if (!s.points.empty()) series.push_back(std::move(s));
}

// Planned against measured device bytes by schedule position, one run.
absl::Status write_by_position(const ModelFactory& f, const SweepOptions& o, int64_t size,
                               const CaseResult& row, SweepResult& result) {
  if (row.planned_bytes_by_position.empty() || row.measured_bytes_by_position.empty()) {
    return absl::OkStatus();
  }
  const std::string path =
      (std::filesystem::path(o.trace_dir) /
       fmt::format("{}_lms_{}_by_position.svg", run_stem(f, size), row.lms ? "on" : "off"))
          .string();
  LMS_RETURN_IF_ERROR(
      write_memory_svg({position_series(row.planned_bytes_by_position, "planned"),
                        position_series(row.measured_bytes_by_position, "measured")},
                       row.budget_bytes, path,
                       fmt::format("{} {} {}, LMS {}: device bytes by schedule position", f.model,
                                   f.size_label, size, row.lms ? "on" : "off"),
                       kPositionAxis));
  result.files.push_back(path);
  return absl::OkStatus();
}

absl::Status write_traces(const ModelFactory& f, const SweepOptions& o, int64_t size,
                          const CaseResult& off, const CaseResult& on, SweepResult& result) {
  if (o.trace_dir.empty()) return absl::OkStatus();
  const std::filesystem::path dir(o.trace_dir);
  std::vector<MemorySeries> series;
  for (const CaseResult* row : {&off, &on}) {
    if (!row->recorder || row->steps_attempted == 0) continue;
    std::string path =
        (dir / fmt::format("{}_lms_{}.trace.json", run_stem(f, size), row->lms ? "on" : "off"))
            .string();
    LMS_RETURN_IF_ERROR(write_chrome_trace(*row->recorder,
                                           {.process_name = "lms-bench " + run_stem(f, size),
                                            .device_capacity_bytes = o.device.capacity_bytes},
                                           path));
    result.files.push_back(path);
    // The same run's profile summary (copy/compute overlap, stall, issue
    // lead) beside its trace.
    std::string summary =
        (dir / fmt::format("{}_lms_{}.summary.txt", run_stem(f, size), row->lms ? "on" : "off"))
            .string();
    LMS_RETURN_IF_ERROR(write_file_atomically(summary, format_summary(summarize(*row->recorder))));
    result.files.push_back(summary);
    add_series(*row, series);
    LMS_RETURN_IF_ERROR(write_by_position(f, o, size, *row, result));
  }
  if (series.empty()) return absl::OkStatus();
  std::string svg = (dir / fmt::format("{}_memory.svg", run_stem(f, size))).string();
  LMS_RETURN_IF_ERROR(write_memory_svg(
      series, o.device.capacity_bytes, svg,
      fmt::format("{} {} {}: device memory, last step", f.model, f.size_label, size)));
  result.files.push_back(svg);
  return absl::OkStatus();
}

void log_row(const ModelFactory& f, const CaseResult& r, std::ostream& log) {
  log << fmt::format("  {} {:>4} LMS {:<3}: {}", f.size_label, r.size, r.lms ? "on" : "off",
                     r.status);
  if (r.ok)
    log << fmt::format(", {:.3f} s/step, peak {}", r.mean_step_s,
                       format_bytes(r.peak_device_bytes));
  log << "\n";
  log.flush();
}

absl::Status make_trace_dir(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        fmt::format("--trace: cannot create folder '{}': {}", dir, ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SweepResult> run_sweep(const ModelFactory& f, const SweepOptions& o,
                                      std::ostream& log) {
  LMS_RETURN_IF_ERROR(check_options(f, o));
  LMS_RETURN_IF_ERROR(make_trace_dir(o.trace_dir));
  SweepResult result;
  result.model = f.model;
  result.size_label = f.size_label;
  result.data_note = f.data_note;
  result.capacity_bytes = o.device.capacity_bytes;
  result.device = o.device.cuda ? "cuda" : "cpu-emulated";
  result.kernel_choice = o.config.kernel_choice;
  result.time_model = o.config.time_model;
  result.lms_budget_bytes =
      o.config.device_memory_limit ? o.config.device_memory_limit : o.device.capacity_bytes;
  result.link_bytes_per_s = o.device.h2d_bytes_per_s;
  result.steps = o.steps;
  for (int64_t size : o.sizes) {
    CaseSpec spec;
    spec.size = size;
    spec.steps = o.steps;
    spec.config = o.config;
    spec.device = o.device;
    spec.record = !o.trace_dir.empty();
    LMS_ASSIGN_OR_RETURN(CaseResult off, run_case(f, spec));
    log_row(f, off, log);
    spec.lms = true;
    LMS_ASSIGN_OR_RETURN(CaseResult on, run_case(f, spec));
    log_row(f, on, log);
    LMS_RETURN_IF_ERROR(write_traces(f, o, size, off, on, result));
    off.recorder.reset();  // traces written: free the events
    on.recorder.reset();
    result.rows.push_back(std::move(off));
    result.rows.push_back(std::move(on));
  }
  if (o.search) {
    log << "  searching the largest " << f.size_label << " each way...\n";
    log.flush();
    LMS_ASSIGN_OR_RETURN(
        result.limits,
        search_limits(f, {.config = o.config, .device = o.device, .confirm = o.confirm}));
    result.searched = true;
  }
  return result;
}

}  // namespace lms::bench
