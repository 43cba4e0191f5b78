// How far lms::rewrite's plan is from the optimum (bench/exact/exact_plan.h,
// Note [Exact plan]) at a target system's compute-to-link ratio:
//
//   build-release/bench/exact_plan_bench [--model vdsr|unet3d|FILE.onnx] [--size 8]
//       [--input NAME:DIMS --loss cross-entropy:C|mse] [--preset h100-pcie5-tc]
//       [--gpu-efficiency 0.5] [--oversubscription 2] [--time-limit 120]
//
// FILE.onnx: a model of your own as lms-bench onnx builds it (--input and
// --loss as there; --size the value of its B or T).
//
// As lms-bench ratio does, the model's nodes are profiled alone on the
// emulated device (one compute thread), the device's rate calibrated, and
// the link set to the target's bytes per FLOP; the budget is the no-LMS
// peak / oversubscription. Then, for the same facts:
//  - lms::rewrite with auto_actions joint (the greedy and its search), its
//    predicted step (the simulator's);
//  - the exact program's optimum for the same graph and usable budget,
//    its plan inserted and simulated by the rewrite's own pass;
// and the gap between them in both measures: the model of the program
// (compute + stalls + recomputation, no queueing) and the simulator. No
// step is run: these are predictions, the measure the planner optimises.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flags.h"
#include "fmt/format.h"
#include "from_graph.h"
#include "lms/device.h"
#include "lms/facts.h"
#include "lms/rewrite.h"
#include "lms/session.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "model_factory.h"
#include "onnx_model.h"
#include "ratio.h"
#include "swap/pass.h"
#include "swap/reorder.h"

namespace lms::bench {
namespace {

struct Args {
  std::string model = "vdsr";
  int64_t size = 8;   // VDSR batch, U-Net volume side, an ONNX model's B or T
  std::string input;  // ONNX: --input NAME:DIMS
  std::string loss;   // ONNX: --loss
  std::string preset = "h100-pcie5-tc";
  double efficiency = 0;  // 0: the preset's
  double oversubscription = 2;
  double time_limit_s = 120;
  int refine_plans = -1;  // -1: LmsConfig's default
  int search_plans = -1;
};

void add_flags(CLI::App& app, Args& a) {
  flags::add_value(
      app, "--model vdsr|unet3d|FILE.onnx",
      "the model; FILE.onnx as lms-bench onnx builds it (with --input and --loss)",
      [&a](const std::string& v) -> absl::Status {
        if (v != "vdsr" && v != "unet3d" && !v.ends_with(".onnx")) {
          return absl::InvalidArgumentError(flags::bad_value(v, "vdsr, unet3d or a FILE.onnx"));
        }
        a.model = v;
        return absl::OkStatus();
      })
      ->default_str(a.model);
  flags::add_int(app, "--size", &a.size, "VDSR's batch, the U-Net's volume side, or B or T",
                 {.min = 1});
  flags::add_string(app, "--input NAME:DIMS", &a.input,
                    "an ONNX model's input and its shape, B or T the dimension --size sets");
  flags::add_string(app, "--loss cross-entropy:C|mse", &a.loss, "an ONNX model's loss");
  flags::add_value(
      app, "--preset NAME", "the target system (lms-bench ratio's presets)",
      [&a](const std::string& v) -> absl::Status {
        absl::StatusOr<std::vector<LinkPreset>> p = parse_presets(v);
        if (!p.ok()) {
          return absl::InvalidArgumentError(flags::bad_value(v, to_std(p.status().message())));
        }
        a.preset = v;
        return absl::OkStatus();
      })
      ->default_str(a.preset);
  flags::add_real(app, "--gpu-efficiency", &a.efficiency,
                  "the fraction of the GPU's peak a step reaches (default: the preset's)",
                  {.min = 0, .max = 1, .min_open = true})
      ->default_str("");
  flags::add_real(app, "--oversubscription", &a.oversubscription,
                  "the budget is the no-LMS peak / this", {.min = 1, .min_open = true});
  flags::add_real(app, "--time-limit SECONDS", &a.time_limit_s,
                  "the solver's time limit (0: the rewrite alone)");
  flags::add_int(app, "--refine-plans", &a.refine_plans,
                 "LmsConfig's refine_plans (default: the config's)")
      ->default_str("");
  flags::add_int(app, "--search-plans", &a.search_plans,
                 "LmsConfig's search_plans (default: the config's)")
      ->default_str("");
}

absl::Status check(const Args& a) {
  if (a.model.ends_with(".onnx") && (a.input.empty() || a.loss.empty())) {
    return absl::InvalidArgumentError(fmt::format(
        "--model {} needs --input NAME:DIMS (B or T the dimension --size sets) and --loss "
        "cross-entropy:C|mse, as lms-bench onnx",
        a.model));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelFactory> factory_of(const Args& a) {
  if (a.model == "vdsr") return vdsr_factory({}, nullptr);
  if (a.model == "unet3d") return unet_factory({});
  LMS_ASSIGN_OR_RETURN(OnnxInput in, parse_onnx_input(a.input));
  LMS_ASSIGN_OR_RETURN(OnnxLoss loss, parse_onnx_loss(a.loss));
  return onnx_factory({.path = a.model, .input = in, .loss = loss});
}

absl::Status run(const Args& a) {
  LMS_ASSIGN_OR_RETURN(std::vector<LinkPreset> presets, parse_presets(a.preset));
  LinkPreset target = presets.at(0);
  if (a.efficiency > 0) target.efficiency = a.efficiency;
  LMS_ASSIGN_OR_RETURN(ModelFactory factory, factory_of(a));
  LMS_ASSIGN_OR_RETURN(Graph graph, factory.build(a.size));
  LMS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                       make_cpu_device({.capacity_bytes = uint64_t{8} << 30,
                                        .host_pool_bytes = uint64_t{16} << 30,
                                        .compute_threads = 1}));
  // LMS off: the graph fused as the Device overload fuses it, and its peak.
  LmsConfig off;
  off.enabled = false;
  LMS_ASSIGN_OR_RETURN(RewriteReport none, rewrite(graph, off, *device));
  // The graph is the fused one now; its facts as it is, the link throttled.
  LmsConfig measured;
  LMS_ASSIGN_OR_RETURN(PlanningFacts facts, gather_facts(graph, measured, *device, nullptr,
                                                         {.lower = false, .measure_link = false}));
  const CostModelConfig roofline = *facts.roofline;
  const double link = throttled_link_bytes_per_s(roofline.compute_flops_per_s, target);
  facts.device_capacity_bytes =
      static_cast<uint64_t>(static_cast<double>(none.peak_bytes_after) / a.oversubscription) &
      ~((uint64_t{64} << 10) - 1);
  facts.host_pool_bytes = uint64_t{16} << 30;
  facts.link = LinkConfig{.d2h_bytes_per_s = link, .h2d_bytes_per_s = link};
  LmsConfig config;
  config.auto_actions = AutoActions::kJoint;
  if (a.refine_plans >= 0) config.auto_refine_plans = a.refine_plans;
  if (a.search_plans >= 0) config.auto_search_plans = a.search_plans;
  std::printf(
      "%s %s %lld: %d nodes, no-LMS peak %.1f MiB, budget %.1f MiB (%gx); device %.1f GFLOP/s, "
      "%s (%.0f TFLOP/s x %g) -> link %.1f MB/s\n",
      a.model.c_str(), factory.size_label.c_str(), static_cast<long long>(a.size),
      graph.num_nodes(), static_cast<double>(none.peak_bytes_after) / (1 << 20),
      static_cast<double>(facts.device_capacity_bytes) / (1 << 20), a.oversubscription,
      roofline.compute_flops_per_s / 1e9, target.name.c_str(), target.gpu_flops_per_s / 1e12,
      target.efficiency, link / 1e6);

  // The heuristic: the rewrite as a user calls it.
  Graph planned = graph;
  const auto t0 = std::chrono::steady_clock::now();
  LMS_ASSIGN_OR_RETURN(RewriteReport rep, rewrite(planned, config, facts));
  const double plan_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (a.time_limit_s == 0) {
    std::printf(
        "lms::rewrite (joint, searched), simulated: %.4f s (%.1f%% of ideal %.4f s), %zu "
        "swapped + %zu recomputed, planned in %.2f s, fits %s\n",
        rep.step_time_after_s, 100 * rep.step_time_before_s / rep.step_time_after_s,
        rep.step_time_before_s, rep.swapped.size(), rep.recomputed.size(), plan_s,
        rep.fits ? "yes" : "no");
    return absl::OkStatus();
  }

  // The exact program for the same graph, facts and usable budget, in the
  // schedule the rewrite planned (Note [Weight gradients first]).
  swap::PassInputs in{swap::effective_config(config, facts), facts, {}};
  if (!rep.weight_gradients_first.empty()) {
    LMS_ASSIGN_OR_RETURN(std::vector<NodeId> order, swap::weight_gradients_first_order(graph, {}));
    LMS_RETURN_IF_ERROR(graph.set_order(order));
  }
  LMS_ASSIGN_OR_RETURN(swap::Analysis analysis, swap::analyse(graph, in));
  const RewriteReport before = swap::report_before(graph, in, analysis);
  swap::AutoOptions ao;
  ao.budget_bytes = before.usable_budget_bytes;
  ao.host_limit_bytes = in.config.host_memory_limit;
  ao.min_tensor_bytes = in.config.min_tensor_bytes;
  ao.h2d_bytes_per_s = in.config.link.h2d_bytes_per_s;
  ao.d2h_bytes_per_s = in.config.link.d2h_bytes_per_s;
  ao.copy_latency_s = in.config.link.copy_latency_s;
  LMS_ASSIGN_OR_RETURN(exact::Problem problem,
                       exact::problem_from(graph, analysis.live, analysis.times, ao));
  LMS_ASSIGN_OR_RETURN(exact::Solution sol,
                       exact::solve(problem, {.time_limit_s = a.time_limit_s}));
  swap::SwapPlan plan = exact::to_swap_plan(problem, analysis.live, sol.choices);
  LMS_ASSIGN_OR_RETURN(swap::Candidate cand,
                       swap::insert(graph, in, analysis, std::move(plan), before));
  LMS_ASSIGN_OR_RETURN(swap::SimResult sim, swap::simulate_step(cand));
  // The greedy's own plan (the joint variant, before the search's
  // variants) in the program's model.
  LMS_ASSIGN_OR_RETURN(swap::SwapPlan greedy_plan,
                       swap::make_plan(graph, in, analysis, before.usable_budget_bytes, {}));
  LMS_ASSIGN_OR_RETURN(std::vector<exact::Choice> greedy,
                       exact::choices_from(problem, analysis.live, greedy_plan));
  const exact::Evaluation greedy_model = exact::evaluate(problem, greedy);
  int swaps = 0, recomputes = 0, segments = 0;
  for (size_t j = 0; j < sol.choices.size(); ++j) {
    swaps += sol.choices[j].kind == exact::Choice::kSwap;
    recomputes += sol.choices[j].kind == exact::Choice::kRecompute;
    segments += sol.choices[j].kind == exact::Choice::kRecompute &&
                sol.choices[j].trigger < problem.gaps[j].before - 1;
  }
  const double ideal = before.step_time_after_s;
  std::printf(
      "program: %zu gaps, %d columns, %d rows; %s in %.1f s (bound %.4f s)\n"
      "  ideal (no LMS, unlimited memory), simulated:    %.4f s\n"
      "  exact optimum, model:                           %.4f s (%.1f%% of ideal): %d swaps, %d "
      "recomputes (%d held from an earlier restore)\n"
      "  exact optimum, simulated:                       %.4f s (%.1f%% of ideal), peak %.1f MiB "
      "(budget %.1f; the program does not count recompute chains' transients)\n"
      "  greedy (joint variant), model:                  %s\n"
      "  lms::rewrite (joint, searched), simulated:      %.4f s (%.1f%% of ideal), %zu "
      "decisions, planned in %.2f s, fits %s\n"
      "gap to the optimum: simulated %+.1f%%, greedy in the model %s\n",
      problem.gaps.size(), sol.columns, sol.rows, sol.optimal ? "optimal" : "time limit",
      sol.solve_s, sol.bound_s, ideal, sol.objective_s, 100 * ideal / sol.objective_s, swaps,
      recomputes, segments, sim.step_time_s, 100 * ideal / sim.step_time_s,
      static_cast<double>(sim.peak_device_bytes) / (1 << 20),
      static_cast<double>(facts.device_capacity_bytes) / (1 << 20),
      greedy_model.feasible ? fmt::format("{:.4f} s ({:.1f}% of ideal)", greedy_model.step_s(),
                                          100 * ideal / greedy_model.step_s())
                                  .c_str()
                            : ("not in the model: " + greedy_model.reason).c_str(),
      rep.step_time_after_s, 100 * ideal / rep.step_time_after_s, rep.decisions.size(), plan_s,
      rep.fits ? "yes" : "no", 100 * (rep.step_time_after_s / sim.step_time_s - 1),
      greedy_model.feasible
          ? fmt::format("{:+.1f}%", 100 * (greedy_model.step_s() / sol.objective_s - 1)).c_str()
          : "n/a");
  return absl::OkStatus();
}

}  // namespace
}  // namespace lms::bench

int main(int argc, char** argv) {
  lms::bench::Args args;
  CLI::App app(
      "exact_plan_bench: how far lms::rewrite's plan is from the optimum of the exact program\n"
      "(COIN-OR CBC) at a target system's compute-to-link ratio.",
      "exact_plan_bench");
  lms::bench::add_flags(app, args);
  if (std::optional<int> exit = lms::flags::parse_main(app, argc, argv, 1)) return *exit;
  absl::Status s = lms::bench::check(args);
  if (s.ok()) s = lms::bench::run(args);
  if (!s.ok()) {
    std::fprintf(stderr, "exact_plan_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
