// lms::plan_step: the Large Model Support planner as a value. Plans which
// activations of a training graph to keep, swap out to pinned host memory
// and prefetch back, or recompute (policy and auto_actions of LmsConfig),
// and returns a StepPlan: the planned graph, its report and the static
// layout of its step, immutable. Session::create(plan, device)
// (lms/session.h) runs the plan on that very layout. The facts a plan
// depends on (PlanningFacts) come from lms::gather_facts (lms/facts.h) or
// from the caller; the Device overloads of plan_step and lms::rewrite
// (lms/rewrite.h) gather them themselves.
//
//   LMS_ASSIGN_OR_RETURN(lms::StepPlan plan, lms::plan_step(train, cfg, *device));
//   if (!plan.report().fits) { /* plan.report().summary() says why */ }
//   LMS_ASSIGN_OR_RETURN(auto session, lms::Session::create(plan, *device));
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "lms/graph.h"

namespace lms {

// Facts about the device and the run that a plan depends on, as opposed to
// what the user chooses (LmsConfig, RewriteOptions;
// Note [Rewrite in four parts]). The Device overload of lms::rewrite
// gathers them once from the device (its capacity, allocator alignment and
// pinned host pool, every kernel's workspace, and with time_model
// "measured" the node times, the link and a calibrated roofline); a caller
// without a device may state them itself. Vectors by NodeId are of the
// graph as the pass plans it. Every field has a "not known" value, which
// the pass treats as documented here.
struct PlanningFacts {
  // Device bytes available when LmsConfig::device_memory_limit is 0. It is
  // rounded down to whole alignment units, as the device's allocator holds
  // its capacity (Note [Capacity units]). 0: not known.
  uint64_t device_capacity_bytes = 0;
  // The device allocator's alignment, bytes (a power of two). 0: the
  // config's alignment_bytes.
  uint64_t alignment_bytes = 0;
  // The device's pinned host pool, bytes: a plan never holds more swapped
  // tensors than this (nor than LmsConfig::host_memory_limit when that is
  // set). 0: not known, only the config's limit applies.
  uint64_t host_pool_bytes = 0;
  // Kernel workspace bytes by NodeId (entries past the end: 0). Unset: not
  // known, so `fits` cannot be decided.
  std::optional<std::vector<uint64_t>> workspace_bytes;
  // Kernel workspace bytes by NodeId with workspace = "least" (lms/types.h
  // kWorkspaceAttr; entries past the end: no such kernel). Used only with
  // LmsConfig::kernel_choice other than "default": when the plan with
  // workspace_bytes fails at the budget, the rewrite plans once more with
  // the nodes whose entry here is smaller switched to that kernel, then once
  // more with only those of them that need it
  // (RewriteReport::least_workspace_nodes). Unset: no fallback.
  std::optional<std::vector<uint64_t>> least_workspace_bytes;
  // Measured seconds by NodeId (lms::profile_step); entries < 0 or missing
  // fall back to the roofline.
  std::vector<double> node_time_s;
  // Measured seconds by NodeId of the workspace = "least" kernels (entries
  // < 0 or missing: the node's node_time_s entry). With kernel_choice
  // "least_workspace_when_faster", auto with joint actions also plans with
  // those kernels when the fast ones' plan fits, and keeps whichever plan is
  // predicted faster (Note [Least workspace fallback]).
  std::vector<double> least_node_time_s;
  // The host link measured on the device (StepProfile::link). Unset: the
  // config's [link].
  std::optional<LinkConfig> link;
  // A roofline calibrated on the device (lms::calibrate_cost_model) for the
  // nodes without a time. Unset: the config's [cost_model].
  std::optional<CostModelConfig> roofline;
  // Data parallelism (lms/distributed.h): the ranks (Communicator::size())
  // and each rank's all-reduce bandwidth, bytes/s, for the time the
  // simulation gives the all_reduce nodes (a ring: 2 (ranks - 1) / ranks of
  // a bucket's bytes per rank). They change predicted times only, never
  // memory.
  int ranks = 1;
  double allreduce_bytes_per_s = 10e9;
  // Device::kind() of the device the facts came from ("" : none); the plan
  // record keeps it, and Session::create refuses another kind.
  std::string device_kind;
  // Where the times were measured (lms::gather_facts): the device's name, or
  // "rank 0 (<name>), planned alike on all N ranks"; "": not measured. The
  // report's time_model says so.
  std::string measured_on;
};

// What the user chooses for one rewrite, beside LmsConfig.
struct RewriteOptions {
  // Tensors kept until the end of the step (SessionOptions::fetches of the
  // session that will run the graph); empty = the graph's loss.
  std::vector<std::string> fetched;
  // The Device overload on the CPU device: fuse each relu that is a conv
  // output's only reader into the conv (lms/types.h kActivationAttr;
  // Note [Conv + ReLU fusion]). The fused node takes the relu's name and
  // the conv output tensor disappears; results are bit-identical.
  bool fuse_conv_relu = true;
};

// How the plan frees a saved activation between its uses: copy it to
// pinned host memory and back, or run its producers again.
enum class DecisionAction : uint8_t { kSwap, kRecompute };

// "swap" or "recompute", as in RewriteReport::plan_text.
inline const char* decision_action_name(DecisionAction action) {
  return action == DecisionAction::kSwap ? "swap" : "recompute";
}

// What the plan does with one tensor (RewriteReport::decisions).
struct TensorDecision {
  std::string tensor;
  DecisionAction action = DecisionAction::kSwap;
  uint64_t bytes = 0;  // the tensor's bytes
  int restores = 0;    // swap-ins, or recomputations, per step
  // Predicted cost per step, seconds: for kSwap the link time of its copies
  // (swap-out and swap-ins at the planned link bandwidth; hidden behind
  // compute unless the link is busy, see stall_s), for kRecompute the
  // compute time of the nodes run again for it (on the compute stream).
  double seconds = 0;
};

struct RewriteReport {
  bool enabled = false;  // false: the graph was left unchanged
  SwapPolicy policy = SwapPolicy::kAuto;
  // The plan the auto policy chose (LmsConfig::auto_actions): with "joint"
  // the one of joint, swap-only and recompute-only whose predicted step time
  // is least among those that fit.
  AutoActions actions = AutoActions::kSwap;
  std::vector<std::string> swapped;       // tensor names copied to host, in plan order
  std::vector<std::string> recomputed;    // tensor names recomputed (and never copied)
  std::vector<TensorDecision> decisions;  // one per swapped or recomputed tensor
  double recompute_s = 0;                 // predicted compute seconds of recomputation per step
  uint64_t bytes_out_per_step = 0;        // D2H bytes per step
  uint64_t bytes_in_per_step = 0;         // H2D bytes per step
  uint64_t host_bytes = 0;                // pinned host bytes held by swapped tensors
  uint64_t budget_bytes = 0;              // device bytes planned for (0: none known)
  uint64_t usable_budget_bytes = 0;       // what auto planned for: budget less reserve and re-plans
  // The original graph's memory profile peak, bytes (docs/memory_model.md):
  // persistent bytes plus the most bytes live at one position.
  uint64_t peak_bytes_before = 0;
  // The device bytes the session holds for the final graph: the persistent
  // tensors plus the arena (arena_persistent_bytes + arena_bytes). This is
  // the device's measured peak during every step (StepResult::
  // peak_device_bytes), to the byte.
  uint64_t peak_bytes_after = 0;
  // Static placement of the final graph's step (Note [Step layout]): every
  // non-persistent device buffer (activations, gradients, swap-in buffers,
  // graph inputs, one workspace per node) at a fixed offset in one arena.
  // arena_bytes is the arena the placement needs; arena_lower_bound_bytes
  // the most bytes live at one position, which no placement beats; the gap
  // between them is what the placement loses to fragmentation. Persistent
  // tensors (parameters, optimizer state) are allocated before the arena
  // and stay outside it.
  uint64_t arena_bytes = 0;
  uint64_t arena_lower_bound_bytes = 0;
  uint64_t arena_persistent_bytes = 0;
  // By schedule position of the final graph (lms::schedule order): the
  // planned device bytes in use while that node runs, persistent tensors plus
  // the arena buffers live there (its largest entry is arena_persistent_bytes
  // + arena_lower_bound_bytes). The executor counts the same figure as it
  // issues the step (StepResult::device_bytes_by_position), equal entry by
  // entry when the memory contract holds. Plot both with lms::position_series.
  std::vector<uint64_t> device_bytes_by_position;
  // peak_bytes_after <= budget_bytes, with the layout computed from every
  // fact the session will have: the kernel workspaces, the alignment, the
  // persistent tensors and the fetches. False when it does not fit and when
  // the facts to decide are missing (then fit_unknown_reason says which).
  // With LMS disabled it says whether the unchanged graph fits. Always true
  // after a successful auto rewrite with every fact known; tflms / vdnn /
  // manual do not aim for the budget.
  bool fits = false;
  std::string fit_unknown_reason;  // empty when `fits` was decided
  double step_time_before_s = 0;   // simulated, no swaps
  double step_time_after_s = 0;    // simulated with the swaps and the budget
  double stall_s = 0;              // simulated stall, Note [Stall]
  // Where the simulated times came from (lms/config.h TimeModel): the node
  // times given or measured, and the roofline and link used for the rest,
  // e.g. "roofline 1000 GFLOP/s, 100 GB/s; link d2h 12 GB/s, h2d 12 GB/s" or
  // "measured on <device>: 41 of 41 compute node times given, roofline ...".
  std::string time_model;
  uint64_t working_set_limit_bytes = 0;  // no plan gets below this
  std::string working_set_node;          // the node that sets it
  std::string plan_text;                 // one line per swapped or recomputed tensor
  // Convolution nodes the rewrite set to workspace = "least"
  // (LmsConfig::kernel_choice other than "default", which never moves one)
  // because the plan with the fast kernels did not fit, or (auto with joint actions)
  // was predicted slower (PlanningFacts::least_workspace_bytes and
  // least_node_time_s); empty when none. Only the nodes whose fast
  // workspace does not fit where they run in the plan are switched; the
  // others keep their fast kernels (Note [Selective least workspace]).
  // use_least_workspace_kernels applies them to the graph as it was before
  // the rewrite.
  std::vector<std::string> least_workspace_nodes;
  // The fused conv + relu nodes, by name (RewriteOptions::fuse_conv_relu);
  // empty when none.
  std::vector<std::string> fused;
  // Policy auto: the weights-gradient nodes (conv_bwd_weights,
  // deconv_bwd_weights) moved to run before the data gradient of the same
  // output gradient, by name (Note [Weight gradients first], see rewrite()
  // below); empty when none moved. Such a move alone may make a graph fit
  // without any swap or recompute.
  std::vector<std::string> weight_gradients_first;
  std::string summary() const;  // human-readable, multi-line
  // One line per decision, indented by two spaces: action, tensor, bytes,
  // restores per step (xN) and predicted seconds per step.
  std::string decisions_text() const;
};

// The step layout of a plan (an offset for every buffer of the step;
// Note [Step layout]) with the release plan of its fetch set. Opaque
// outside the library.
struct PlannedLayout;

// A planned training step (Note [Rewrite in four parts]): the graph with the
// swap, recompute and fused nodes of the plan (Graph::plan_record says what
// it was planned for), the report, and the layout `fits` was decided on.
// Immutable and cheap to copy (the parts are shared). Made by plan_step;
// run by Session::create(const StepPlan&, Device&), which takes the layout
// as it is when the device and the fetch set are those planned for.
class StepPlan {
 public:
  // The planned graph. Shape, dtypes and names as the user built them, plus
  // the plan's nodes (Node::origin: swap, recompute, fused).
  const Graph& graph() const { return *graph_; }
  // The plan's figures: predicted peak (bytes), step time (seconds),
  // decisions, whether it fits.
  const RewriteReport& report() const { return report_; }
  // What the plan was made for: device kind, capacity, budget, alignment,
  // fetch set, workspaces (bytes). Session::create refuses another.
  const PlanRecord& record() const { return graph_->plan_record(); }

  // For the library: the layout (null when the plan was made without the
  // kernel workspaces, so no layout could be decided) and the shared graph.
  const std::shared_ptr<const PlannedLayout>& layout() const { return layout_; }
  const std::shared_ptr<const Graph>& shared_graph() const { return graph_; }
  StepPlan(std::shared_ptr<const Graph> graph, RewriteReport report,
           std::shared_ptr<const PlannedLayout> layout)
      : graph_(std::move(graph)), report_(std::move(report)), layout_(std::move(layout)) {}

 private:
  std::shared_ptr<const Graph> graph_;
  RewriteReport report_;
  std::shared_ptr<const PlannedLayout> layout_;
};

// Plans `graph` with `config` and the facts given, running no device pass
// (the graph is planned exactly as given; for a device's fusions use the
// Device overload in lms/rewrite.h). With policy auto the plan also runs
// each convolution's weights gradient before its data gradient where that
// frees the convolution's input sooner (Note [Weight gradients first]); the
// values are the same bits, only the order of two independent nodes
// changes. Errors: InvalidArgument for an invalid graph or config (manual:
// unknown tensor name; auto: no budget known); ResourceExhausted when the
// budget cannot be met (names the node and the bytes it needs) or the host
// limit is exceeded.
absl::StatusOr<StepPlan> plan_step(const Graph& graph, const LmsConfig& config,
                                   const PlanningFacts& facts, const RewriteOptions& options = {});

// lms::rewrite from the facts given (the Device overloads are in
// lms/rewrite.h): plan_step, whose graph replaces `graph` (verified before
// and after) on success only. With policy auto the rewritten graph also runs each
// convolution's weights gradient before its data gradient where that frees
// the convolution's input sooner (Note [Weight gradients first]); the
// values are the same bits, only the order of two independent nodes
// changes. Errors: InvalidArgument for an invalid graph or config (manual:
// unknown tensor name; auto: no budget known); ResourceExhausted when the
// budget cannot be met (names the node and the bytes it needs) or the host
// limit is exceeded.
absl::StatusOr<RewriteReport> rewrite(Graph& graph, const LmsConfig& config,
                                      const PlanningFacts& facts,
                                      const RewriteOptions& options = {});
// The same with no fact known: the budget only from device_memory_limit,
// and `fits` undecided (no kernel workspaces).
absl::StatusOr<RewriteReport> rewrite(Graph& graph, const LmsConfig& config);

// Sets workspace = "least" (lms/types.h kWorkspaceAttr) on the convolutions
// of `graph` named in `nodes`, typically RewriteReport::least_workspace_nodes
// applied to the graph as it was before the rewrite, so that it runs the same
// kernels without LMS (and gives the same bits). A fused node's name
// (RewriteReport::fused) is its relu's: the conv that relu reads gets the
// attribute. InvalidArgument naming the first name that is neither a
// convolution node nor a relu reading one; the graph is then unchanged.
absl::Status use_least_workspace_kernels(Graph& graph, const std::vector<std::string>& nodes);

}  // namespace lms
