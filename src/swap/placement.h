// Static memory placement: one offset per device buffer of a training step in
// a single arena, decided before the step runs, so that executing the step
// needs no allocator search and no fragmentation arises inside it (the BFC
// replay of replay.h shows what fragmentation costs otherwise).
//
//   LMS_ASSIGN_OR_RETURN(swap::StepBuffers step, swap::step_buffers(graph, live, workspaces));
//   LMS_ASSIGN_OR_RETURN(swap::Placement p,
//                        swap::place_buffers(step.buffers, {.alignment_bytes = 256}));
//   LMS_RETURN_IF_ERROR(swap::check_placement(step.buffers, p, p.arena_bytes));
//   // buffer i occupies [p.offset[i], p.offset[i] + placed_size(step.buffers[i], 256))
//   // of the arena during positions [first, last]; p.arena_bytes - p.lower_bound_bytes
//   // is what the placement loses to fragmentation.
//
// Note [Static placement]: placing buffers with known live ranges in one
// arena of least size is the offline Dynamic Storage Allocation problem,
// NP-hard in general (Garey & Johnson, "Computers and Intractability", 1979,
// problem SR2). Its lower bound is the largest number of bytes live at one
// position. Two greedy heuristics from the literature are run:
//
//  - Greedy by size (Pisarchyk & Lee, "Efficient Memory Management for Deep
//    Neural Net Inference", arXiv 2001.03288, 2020, "Greedy by Size for
//    Offset Calculation"; TensorFlow Lite's ArenaPlanner; XLA's
//    GlobalDecreasingSizeBestFitHeap with its default spatial order):
//    buffers in decreasing size (ties: longer live range, then earlier
//    start, then lower index), each put into the smallest gap that holds it
//    (best fit; ties: the lowest) between the already placed buffers whose
//    live ranges intersect its own, or on top of them when none does.
//  - Greedy by breadth (same paper, "Greedy by Breadth"): the same gap
//    choice, buffers ordered by the largest breadth of any position they are
//    live at, decreasing (ties as above after size), so the buffers of the
//    most crowded position, where the arena is decided, go first. The paper
//    takes an operator's breadth as the bytes of its own inputs and outputs;
//    here it is every byte live at the position, what the lower bound
//    maximises.
//
//  - Greedy by area: the same gap choice, buffers ordered by size times
//    live-range length (positions), decreasing (ties: lower index). Large
//    long-lived buffers (a U-Net's concat skips) are placed before the short
//    peaks that would otherwise split the address space under them; on a
//    3-D U-Net whose greedy-by-size arena was 7% over the lower bound it
//    reaches the bound.
//
// The smallest arena wins (the earlier heuristic on a tie). Greedy by
// breadth and then greedy by area run only while the best arena so far is
// more than 0.1% over the lower bound (PlacementOptions::breadth_if_gap_above),
// each abandoned as soon as its arena grows past the best one's. All are
// deterministic: the same buffers and options give the same offsets.
//
// Note [Random tie orders]: equal keys are common in a training step (a
// network of equal layers has dozens of activations of one size and live
// ranges of one length), and which of them goes first decides where the
// holes fall. When PlacementOptions::arena_target_bytes is set and the
// heuristics' arena exceeds it, they run again with the last tie broken by
// a random permutation (seeds 1, 2, ..., random_orders; splitmix64, the
// same on every platform) until an arena fits the target or meets the lower
// bound. On 42 layouts of VDSR's joint plans at 2x oversubscription the gap
// over the lower bound fell from 11.1% to 6.3% on average with 32 orders
// (27 of 42 smaller; 5.9% with 200). The search only runs where the arena
// would otherwise miss the budget, so a plan that fits costs nothing more;
// the rewrite and Session::create pass the same target (the plan's budget
// less the persistent bytes), so both still compute the same offsets.
//
// Note [Squeaky wheel]: where a target is set and the heuristics miss it,
// before the random tie orders, each heuristic's order is repaired by
// squeaky wheel optimisation (Joslin & Clements, "Squeaky Wheel"
// Optimization, JAIR 10, 1999): the order is placed, the buffers that end
// above the target (the "squeaky" ones) move to the front, keeping their
// relative order and that of the rest, and the new order is placed again,
// up to squeaky_rounds times per heuristic, until an arena fits the target.
// The buffers that ended high are then placed while the address space is
// still open, and the rest fill in around them. On VDSR's layouts the high
// ones are the convolutions' 9 MiB workspaces, each live at one position,
// which need two adjacent free activation slots there. On 1,134 layouts of
// the plans VDSR and the 3-D U-Net try at 2x oversubscription (lms-bench
// ratio), the mean gap over the lower bound fell from 5.2% to 3.0%, and of
// the 1,055 whose lower bound meets the target, 999 fit instead of 639
// (with the random tie orders after it in both).
//
// Speed: the paper's loop compares each buffer with every placed buffer
// whose range intersects its own, O(n^2) on training graphs, where forward
// activations live until their backward use and all overlap. Here positions
// are compressed to the distinct range ends and placed buffers are kept in a
// segment tree over them whose nodes hold coalesced address-interval sets:
// full(v), the buffers whose range decomposes onto node v, and sub(v), the
// union of full() over v's subtree. The addresses taken over a live range
// are the union of sub() of its O(log n) canonical nodes and full() of their
// ancestors; a gap search merges these sets in address order, and
// coalescing keeps them short (a stack of nested activations is a few
// intervals). An insertion climbs sub() only until an ancestor already
// covers the interval. One case stays expensive: thousands of small
// long-lived buffers (weight gradients kept until the optimizer) scattered
// into the holes of one window leave as many intervals there; so a best-fit
// search visits at most PlacementOptions::max_scan intervals, then takes the
// best gap seen or, if none fits yet, the first gap that fits (first fit),
// and after 16 times as many the top of the window. Where the sets of one
// search hold at most max_scan intervals in all (the common case), they are
// swept in address order without the merge's heap, with the same answer
// (Note [Short scans]); one index serves every placement of a place_buffers
// call, and an order placed before in that call is not placed again
// (Note [Repeated orders]).
// Figures (2-core machine): bench/placement_bench.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/graph.h"
#include "swap/liveness.h"
#include "swap/release_plan.h"

namespace lms::swap {

// A buffer that occupies the arena during every position in [first, last]
// (inclusive; 0 <= first <= last). Two buffers conflict when their ranges
// share a position: a buffer released after position p and one allocated at
// p are both resident during p (docs/memory_model.md, Note [Memory
// accounting], point 3).
struct PlacementBuffer {
  int32_t first = 0;
  int32_t last = 0;
  uint64_t bytes = 0;  // rounded by placed_size(); 0 still takes one alignment unit
};

enum class PlacementMethod { kGreedyBySize, kGreedyByBreadth, kGreedyByArea };
const char* placement_method_name(PlacementMethod method);

struct PlacementOptions {
  uint64_t alignment_bytes = 256;  // every offset and placed size is a multiple
  // The heuristics to run (at least one); the smaller arena wins (Note
  // [Static placement]).
  bool greedy_by_size = true;
  bool greedy_by_breadth = true;
  bool greedy_by_area = true;
  // Greedy by breadth, then greedy by area, run only while the best arena
  // so far exceeds the lower bound by more than this fraction (0: whenever
  // it misses the bound).
  double breadth_if_gap_above = 0.001;
  // Gap choice: the smallest gap that holds the buffer (best fit), or the
  // lowest one (first fit).
  bool best_fit = true;
  // Address intervals a best-fit search visits before it settles for the
  // best gap seen so far or, when none fits yet, for the first gap that fits
  // from there on; after 16 times as many, for the top of the window (0: no
  // limit, exact best fit). Bounds the cost where many small long-lived
  // buffers are scattered over one window (Note [Static placement]).
  size_t max_scan = 256;
  // While the arena exceeds this many bytes (0: no target) and the lower
  // bound by breadth_if_gap_above, the placement searches: first
  // squeaky_rounds reorders per heuristic (Note [Squeaky wheel]), then the
  // heuristics again with ties broken at random, at most random_orders
  // times (Note [Random tie orders]).
  uint64_t arena_target_bytes = 0;
  int32_t squeaky_rounds = 32;
  int32_t random_orders = 32;
  // The search places at most this many buffers in all (a random order
  // counts three placements): about 25 ms on the 2-core machine however
  // large the step, so VDSR's 237 buffers get 69 placements and the 3-D
  // U-Net's 390 get 42. The search runs only where the lower bound is within
  // the target. On the layouts the main job's 3-D U-Net tries, every search
  // that fitted did so within 37 placements; the half that never fit spent
  // four times as much as that on 168 before this limit was lowered from
  // 2^16.
  int64_t search_placed_buffers = int64_t{1} << 14;
};

struct Placement {
  std::vector<uint64_t> offset;    // by buffer, a multiple of alignment_bytes
  uint64_t arena_bytes = 0;        // max over buffers of offset + placed size (0: none)
  uint64_t lower_bound_bytes = 0;  // max over positions of the live placed sizes
  uint64_t alignment_bytes = 256;  // the alignment placed with
  PlacementMethod method = PlacementMethod::kGreedyBySize;  // the heuristic that won
  // 0: the heuristic's own order won; k > 0: its k-th reorder of Note
  // [Squeaky wheel].
  int32_t squeaky_round = 0;
};

// The bytes a buffer takes in the arena: rounded_size(bytes, alignment), as
// the allocator would (docs/memory_model.md).
uint64_t placed_size(const PlacementBuffer& buffer, uint64_t alignment);

// Max over positions of the sum of placed sizes live there: no placement of
// `buffers` has a smaller arena. Assumes valid ranges (place_buffers checks).
uint64_t placement_lower_bound(const std::vector<PlacementBuffer>& buffers, uint64_t alignment);

// Offsets for `buffers` by the heuristics of Note [Static placement].
// InvalidArgument for alignment 0, a range with first < 0 or first > last,
// or sizes whose sum exceeds 2^63 - 1 bytes.
absl::StatusOr<Placement> place_buffers(const std::vector<PlacementBuffer>& buffers,
                                        const PlacementOptions& options);

// OK when every buffer lies inside [0, min(placement.arena_bytes,
// arena_limit)), at an offset that is a multiple of placement.alignment_bytes,
// and no two buffers with intersecting live ranges share an address.
// InvalidArgument naming the first problem: two overlapping buffers (their
// indices, ranges and address ranges), a buffer outside the arena, a
// misaligned offset, or a placement of another length.
absl::Status check_placement(const std::vector<PlacementBuffer>& buffers,
                             const Placement& placement, uint64_t arena_limit);

// Note [Step buffers]: the device buffers of one step of `graph` (analysed
// as `live`) for the arena, with the live ranges of the executor
// (release_plan.h, docs/memory_model.md):
//  - every non-persistent device tensor over [first, last] of its TensorLife:
//    activations and gradients from their producer, swap-in outputs from
//    their swap_in, graph inputs from 0 (uploaded before the first node),
//    fetched tensors to the end of the step; a tensor last read by a
//    swap_out whose `release_after` names a later node stays to that node
//    (Note [Swap-out release]);
//  - one workspace buffer per node with a workspace, at that node's position
//    only: the larger of live.workspace[position] and the rounded
//    workspace_bytes[node] (by NodeId; missing entries are 0). Kernels get
//    no session-wide workspace block: a node's workspace is live while the
//    node runs, like any other buffer of the step.
// Persistent tensors (parameters, optimizer state) keep their place for the
// session and are not in the arena: their bytes are reported apart.
// With no workspaces and no `release_after`, the lower bound of these
// buffers plus live.persistent_bytes is memory_profile(live).peak.
struct StepBuffers {
  std::vector<PlacementBuffer> buffers;
  std::vector<TensorId> tensor;      // by buffer: the tensor, or kNoTensor for a workspace
  std::vector<NodeId> workspace_of;  // by buffer: the node of a workspace, or kNoNode
  uint64_t persistent_bytes = 0;     // rounded sizes of the persistent tensors
};

// InvalidArgument when `live` was not computed for `graph` (other tensor or
// node counts).
absl::StatusOr<StepBuffers> step_buffers(const Graph& graph, const Liveness& live,
                                         const std::vector<uint64_t>& workspace_bytes);

// Note [Step layout]: the one placement a graph's step gets, computed the
// same way by the planner (lms::rewrite, for `fits` and the report) and by
// Session::create (for the executor's offsets): analyze() with the options,
// step_buffers() with options.workspace_bytes, place_buffers() at the
// alignment. Deterministic, so both see the same offsets. The device holds
// the persistent tensors (allocated one after another at Session::create)
// and then the arena, one block: device_bytes() is the whole device
// footprint of the session, the peak it measures during every step.
inline constexpr uint64_t kNoOffset = ~uint64_t{0};

struct StepLayout {
  Liveness live;
  StepBuffers step;
  Placement placement;
  std::vector<uint64_t> tensor_offset;     // by TensorId: arena offset, or kNoOffset
  std::vector<uint64_t> workspace_offset;  // by NodeId: arena offset, or kNoOffset
  std::vector<uint64_t> placed_bytes;      // by TensorId: the placed size (0: not in the arena)
  std::vector<uint64_t> workspace_placed;  // by NodeId: the placed size (0: none)
  // By position: bytes of the arena's buffers live there (persistent excluded).
  std::vector<uint64_t> arena_in_use;
  uint64_t device_bytes() const { return step.persistent_bytes + placement.arena_bytes; }
};

// `budget_bytes` (0: none), the device bytes the step is planned for: the
// placement aims for an arena of at most budget_bytes less the persistent
// bytes (PlacementOptions::arena_target_bytes, Note [Random tie orders]),
// searching at most `search_placed_buffers` placed buffers for it
// (PlacementOptions::search_placed_buffers). InvalidArgument as analyze()
// and place_buffers().
absl::StatusOr<StepLayout> layout_step(
    const Graph& graph, const LivenessOptions& options, uint64_t budget_bytes = 0,
    int64_t search_placed_buffers = PlacementOptions{}.search_placed_buffers);

// A fingerprint of what a step layout depends on in `graph`: every node's
// name, op, inputs, outputs, control inputs and attributes, and every
// tensor's name, shape, dtype and role. Equal graphs have equal
// fingerprints; a changed one almost surely another.
uint64_t layout_fingerprint(const Graph& graph);

}  // namespace lms::swap

namespace lms {

// The step layout of a plan (Note [Rewrite in four parts]) that
// Session::create takes as it is from a StepPlan (lms/plan.h): the layout,
// the placement search bound it was found with
// (PlanRecord::placement_search_buffers), the release plan of the fetch set
// planned for (PlanRecord::fetched; set for the plan the search keeps, not
// for its candidates) and the fingerprint of the graph it was computed for
// (the search's memo compares it).
struct PlannedLayout {
  swap::StepLayout layout;
  int64_t search_placed_buffers = 0;
  std::optional<swap::ReleasePlan> release;
  uint64_t graph_fingerprint = 0;
};

}  // namespace lms
