// The exact reference for the auto planner: keep / swap / recompute of
// every idle interval under the device budget as a mixed-integer program,
// solved with COIN-OR CBC. It lives in bench/ and tests only: it tells how
// far the greedy of src/swap/planner_auto.cc is from the optimum of the same
// model, on graphs small enough to solve (a few hundred nodes).
//
// Note [Exact plan]
// The model is the planner's own (Note [Auto planner], Note [Joint
// planner]): schedule positions p with predicted seconds c_p, the device
// bytes during each position without a plan, and for every idle interval j
// of a tensor (after_j < before_j, its bytes b_j) three ways to free it:
//  - keep it;
//  - swap it with trigger g (after_j < g < before_j): freed at positions
//    after_j+1..g, its swap-in stalls max(0, in_s - compute(g+1..before_j-1))
//    (in_s = latency + bytes / H2D bandwidth); the tensor's swap-out, issued
//    after its producer, stalls the release in its first swapped interval by
//    max(0, out_s - compute(first+1..after_j)) (the executor's wait at the
//    release, Note [Swap-out release]);
//  - recompute it with trigger g: freed at after_j+1..g, its producer runs
//    again right after g, and so, at g, does the producer of every input
//    that is not present there (released, or freed by its own recompute),
//    recursively; an input freed by a swap at g is not allowed (the
//    insertion cannot build such a chain). A node run again at one position
//    for several chains counts once there. Recomputing at g < before_j - 1
//    and holding the tensor from there is a checkpointed segment (Chen et
//    al. 2016): the triggers offered are before_j - 1 and the restores of
//    the tensors computed from it within kSegmentDepth producers.
// Subject to: device bytes <= the limit at every position (the profile of
// Note [Memory accounting]; a chain's transient intermediates are not
// counted, as in the planner), the swap-ins' and swap-outs' seconds each
// within link_share of the step's compute time, and the swapped tensors'
// bytes within the host limit. Objective: the inputs' upload + compute +
// stalls + recomputation, the planner's predicted step in this model.
//
// As in Checkmate (Jain et al., MLSys 2020), whose R/S matrices this
// specialises to the planner's fixed schedule, the program is exact for its
// model; what it leaves out (queueing on the copy streams, the placement's
// fragmentation) the simulator of the rewrite then predicts for both plans,
// so the benchmark prints the optimum in both measures. The variables:
// a freed-prefix indicator per swapped position (ys_{j,p} >= ys_{j,p+1}, so
// its stall adds up from per-position increments), one indicator per
// recompute trigger, and need_{n,q} for node n run again at q.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/graph.h"

namespace lms::exact {

// Producers looked through for a recompute's segment triggers.
inline constexpr int kSegmentDepth = 8;

struct Problem {
  struct Node {
    double seconds = 0;           // predicted seconds of the node at this position
    bool recomputable = false;    // may run again (swap/plan.h recomputable)
    std::vector<int32_t> inputs;  // tensor indices of Problem::tensors it reads
  };
  struct Tensor {
    uint64_t bytes = 0;
    int32_t producer = -1;        // position of its producer; -1: a graph input
    std::vector<int32_t> uses;    // positions of its readers, ascending
    bool always_present = false;  // persistent or fetched: never freed
    double in_s = 0;              // seconds of its swap-in (H2D)
    double out_s = 0;             // seconds of its swap-out (D2H)
  };
  struct Gap {
    int32_t tensor = 0;
    int32_t after = 0;   // use before the interval
    int32_t before = 0;  // use after it; after + 1 < before
  };
  std::vector<Node> nodes;  // by schedule position
  std::vector<Tensor> tensors;
  std::vector<Gap> gaps;
  std::vector<int64_t> base_bytes;  // device bytes during each position, no plan
  int64_t limit_bytes = 0;          // usable device bytes
  double link_share = 1.0;          // each direction's copies within this x compute
  // Seconds before the first node: the upload of the step's inputs
  // (swap/simulator.h SimOptions::input_upload_s), part of every plan's step.
  double upload_s = 0;
  uint64_t host_limit_bytes = 0;  // 0: unlimited
};

// What a plan does with each gap.
struct Choice {
  enum Kind : uint8_t { kKeep, kSwap, kRecompute } kind = kKeep;
  int32_t trigger = -1;  // after < trigger < before for kSwap, kRecompute
};

struct Evaluation {
  bool feasible = false;
  std::string reason;  // why not, when !feasible
  int64_t peak_bytes = 0;
  double compute_s = 0;    // the inputs' upload and the nodes' seconds, once each
  double stall_s = 0;      // swap-ins and swap-out releases
  double recompute_s = 0;  // nodes run again
  double step_s() const { return compute_s + stall_s + recompute_s; }
};

// The recompute triggers Note [Exact plan] offers gap `j`, ascending.
std::vector<int32_t> recompute_triggers(const Problem& problem, int32_t j);

// The model's step for `choices` (one per gap), computed directly from the
// definitions of Note [Exact plan]; the reference the program is tested
// against, and the measure of a heuristic plan in the same model. Any
// recompute trigger inside the gap is evaluated; the program offers only
// recompute_triggers, so its optimum is exact over those.
Evaluation evaluate(const Problem& problem, const std::vector<Choice>& choices);

struct Solution {
  std::vector<Choice> choices;  // by gap
  Evaluation evaluation;        // evaluate() of choices
  double objective_s = 0;       // the solver's objective: compute + stalls + recomputation
  double bound_s = 0;           // the solver's lower bound on it
  bool optimal = false;         // proven optimal (else: the time limit ended the search)
  double solve_s = 0;           // wall seconds
  int columns = 0;
  int rows = 0;
};

struct SolveOptions {
  double time_limit_s = 60;
  double relative_gap = 1e-6;
};

// The optimum of `problem`. NotFound when no plan fits (proven infeasible),
// DeadlineExceeded when the time limit ends the search without a plan,
// InvalidArgument for a malformed problem (naming what).
absl::StatusOr<Solution> solve(const Problem& problem, const SolveOptions& options = {});

}  // namespace lms::exact
