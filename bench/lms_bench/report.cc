#include "report.h"

#include <algorithm>
#include <vector>

#include "fmt/format.h"
#include "lms/profiler/atomic_file.h"
#include "lms/units.h"

namespace lms::bench {
namespace {

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::string limit_text(int64_t value, bool capped, bool confirmed, bool want_confirm) {
  std::string s = fmt::format("{}{}", capped ? ">= " : "", value);
  if (want_confirm) s += confirmed ? " (confirmed by a real step)" : " (not confirmed)";
  return s;
}

// Where the LMS rows' predicted times came from (CaseResult::time_model):
// one line when every plan says the same, else one per size.
std::string format_time_models(const SweepResult& r) {
  std::vector<const CaseResult*> planned;
  for (const CaseResult& row : r.rows) {
    if (row.lms && !row.time_model.empty()) planned.push_back(&row);
  }
  if (planned.empty()) return "";
  const std::string head = fmt::format("LMS plans, time model {}:", time_model_name(r.time_model));
  const bool same = std::all_of(planned.begin(), planned.end(), [&](const CaseResult* row) {
    return row->time_model == planned.front()->time_model;
  });
  if (same) return head + " " + planned.front()->time_model + "\n";
  std::string out = head + "\n";
  for (const CaseResult* row : planned) {
    out += fmt::format("  {} {}: {}\n", r.size_label, row->size, row->time_model);
  }
  return out;
}

}  // namespace

double lms_ratio(const Limits& l) {
  return l.no_lms_max > 0 ? static_cast<double>(l.lms_max) / l.no_lms_max : 0;
}

double voxel_ratio(const Limits& l) {
  const double r = lms_ratio(l);
  return r * r * r;
}

double area_ratio(const Limits& l) { return lms_ratio(l) * lms_ratio(l); }

double working_set_pct(const Limits& l) {
  return l.working_set_max > 0 ? 100.0 * l.lms_max / l.working_set_max : 0;
}

std::string format_table(const SweepResult& r) {
  std::string out = fmt::format("{:>6} | {:<3} | {:>13} | {:>15} | {:>11} | {:>15} | {:>16} | {}\n",
                                r.size_label, "LMS", "time/step (s)", "peak device MiB",
                                "planned MiB", "pinned host MiB", "swapped MiB/step", "status");
  out +=
      fmt::format("{:-<6}-+-{:-<3}-+-{:-<13}-+-{:-<15}-+-{:-<11}-+-{:-<15}-+-{:-<16}-+-{:-<20}\n",
                  "", "", "", "", "", "", "", "");
  int ran = 0, equal = 0;
  for (const CaseResult& row : r.rows) {
    if (!row.ok) {
      out += fmt::format("{:>6} | {:<3} | {:>13} | {:>15} | {:>11} | {:>15} | {:>16} | {}\n",
                         row.size, row.lms ? "on" : "off", "-", "-", "-", "-", "-", row.status);
      continue;
    }
    ++ran;
    equal += row.predicted_peak_after_bytes == row.peak_device_bytes;
    out += fmt::format(
        "{:>6} | {:<3} | {:>13.3f} | {:>15.1f} | {:>11.1f} | {:>15.1f} | {:>16.1f} | {}\n",
        row.size, row.lms ? "on" : "off", row.mean_step_s, mib(row.peak_device_bytes),
        mib(row.predicted_peak_after_bytes), mib(row.peak_pinned_host_bytes),
        mib(row.bytes_d2h_per_step), row.status);
  }
  out += fmt::format(
      "goal: the planner's predicted peak equals the measured peak at every size: {} of {} runs "
      "equal to the byte ({})\n",
      equal, ran, equal == ran ? "met" : "not met");
  return out + format_time_models(r);
}

std::string format_limits(const SweepResult& r) {
  if (!r.searched) return "";
  const Limits& l = r.limits;
  std::string out =
      fmt::format("largest {} without LMS: {}\n", r.size_label,
                  limit_text(l.no_lms_max, l.no_lms_capped, l.no_lms_confirmed, l.no_lms_max > 0));
  out += fmt::format("largest {} with LMS:    {}\n", r.size_label,
                     limit_text(l.lms_max, l.lms_capped, l.lms_confirmed, l.lms_max > 0));
  if (r.size_label == "size") {  // volume side: voxels grow with its cube (pixels: square)
    const bool flat = r.model == "unet2d";
    out +=
        fmt::format("LMS / no LMS:             {:.2f}x in side, {} ratio {:.2f}x\n", lms_ratio(l),
                    flat ? "pixel" : "voxel", flat ? area_ratio(l) : voxel_ratio(l));
  } else if (r.size_label == "context") {
    // A transformer's context: the goal of this sweep, 4x the tokens per
    // sequence at the same batch and capacity.
    out +=
        fmt::format("LMS / no LMS:             {:.2f}x in context (target >= 4x)\n", lms_ratio(l));
  } else {
    // TFLMS's batch ratios: 4.7x (v1, arXiv 1807.02037) for its own models,
    // 4.9x (v2, ISMM 2019) for ResNet-50, the model the onnx sweep is for.
    out += fmt::format("LMS / no LMS:             {:.2f}x (target >= {})\n", lms_ratio(l),
                       r.model == "onnx" ? "4.9x" : "4x");
  }
  out += fmt::format("working-set limit {}:  {}{} (largest whose busiest node fits {})\n",
                     r.size_label, l.working_set_capped ? ">= " : "", l.working_set_max,
                     format_bytes(r.lms_budget_bytes));
  out += fmt::format("LMS max / working-set limit: {:.1f}% (target >= 99%)\n", working_set_pct(l));
  out += r.kernel_choice == KernelChoice::kDefault
             ? "kernel_choice default: every LMS run on the default kernels, bit-identical to no "
               "LMS\n"
             : fmt::format(
                   "kernel_choice {}: LMS runs may move convolutions to least-workspace kernels "
                   "to reach the working-set limit; those round differently from the default "
                   "kernels (the same bits as no LMS on the same kernels)\n",
                   kernel_choice_name(r.kernel_choice));
  if (r.model == "unet3d") {
    // The goals of the 3-D U-Net: the TFLMS case study's 2.4x the voxels,
    // TFLMS v2's 5.6x, each with LMS at the working-set limit.
    const double voxels = voxel_ratio(l), pct = working_set_pct(l);
    auto verdict = [&](double target) { return voxels >= target && pct >= 99 ? "met" : "not met"; };
    out += fmt::format(
        "goal: voxel ratio LMS/no-LMS >= 2.4x (case study), aiming for >= 5.6x (TFLMS v2), at "
        ">= 99% of the working-set limit\n");
    out += fmt::format("      reached {:.2f}x at {:.1f}%: case study {}, TFLMS v2 {}\n", voxels,
                       pct, verdict(kCaseStudyVoxelRatio), verdict(kTflmsV2VoxelRatio));
  }
  out += fmt::format("search: {} planner probes in {:.1f} s, confirming steps {:.1f} s\n", l.probes,
                     l.search_s, l.confirm_s);
  out += l.notes;
  return out;
}

nlohmann::json to_json(const CaseResult& row) {
  return {{"size", row.size},
          {"lms", row.lms},
          {"ok", row.ok},
          {"status", row.status},
          {"planner_oom", row.planner_oom},
          {"error", row.error},
          {"step_s", row.step_s},
          {"mean_step_s", row.mean_step_s},
          {"mean_stall_s", row.mean_stall_s},
          {"mean_host_wait_s", row.mean_host_wait_s},
          {"losses", row.losses},
          {"peak_device_bytes", row.peak_device_bytes},
          {"peak_pinned_host_bytes", row.peak_pinned_host_bytes},
          {"bytes_d2h_per_step", row.bytes_d2h_per_step},
          {"bytes_h2d_per_step", row.bytes_h2d_per_step},
          {"swapped_tensors", row.swapped_tensors},
          {"recomputed_tensors", row.recomputed_tensors},
          {"budget_bytes", row.budget_bytes},
          {"predicted_peak_before_bytes", row.predicted_peak_before_bytes},
          {"predicted_peak_after_bytes", row.predicted_peak_after_bytes},
          {"working_set_limit_bytes", row.working_set_limit_bytes},
          {"working_set_node", row.working_set_node},
          {"predicted_step_s", row.predicted_step_s},
          {"predicted_stall_s", row.predicted_stall_s},
          {"time_model", row.time_model}};
}

nlohmann::json to_json(const SweepResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const CaseResult& row : r.rows) rows.push_back(to_json(row));
  nlohmann::json j = {{"model", r.model},
                      {"size_label", r.size_label},
                      {"data", r.data_note},
                      {"device", r.device},
                      {"capacity_bytes", r.capacity_bytes},
                      {"lms_budget_bytes", r.lms_budget_bytes},
                      {"link_bytes_per_s", r.link_bytes_per_s},
                      {"time_model", time_model_name(r.time_model)},
                      {"steps", r.steps},
                      {"rows", rows},
                      {"files", r.files}};
  if (r.searched) {
    const Limits& l = r.limits;
    j["search"] = {{"no_lms_max", l.no_lms_max},
                   {"lms_max", l.lms_max},
                   {"working_set_max", l.working_set_max},
                   {"no_lms_capped", l.no_lms_capped},
                   {"lms_capped", l.lms_capped},
                   {"working_set_capped", l.working_set_capped},
                   {"no_lms_confirmed", l.no_lms_confirmed},
                   {"lms_confirmed", l.lms_confirmed},
                   {"lms_over_no_lms", lms_ratio(l)},
                   {"lms_pct_of_working_set", working_set_pct(l)},
                   {"probes", l.probes},
                   {"search_s", l.search_s},
                   {"confirm_s", l.confirm_s},
                   {"notes", l.notes}};
    // Volume sides: the ratio in voxels (pixels in 2-D).
    if (r.size_label == "size") {
      j["search"]["voxel_ratio"] = r.model == "unet2d" ? area_ratio(l) : voxel_ratio(l);
    }
  }
  return j;
}

absl::Status write_json(const nlohmann::json& json, const std::string& path) {
  return write_file_atomically(
      path, json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace lms::bench
