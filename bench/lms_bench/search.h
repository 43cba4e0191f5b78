// The largest size (batch or volume side) that trains under one device
// capacity: without LMS, with LMS, and the planner's working-set bound.
//
//   LMS_ASSIGN_OR_RETURN(lms::bench::Limits lim,
//                        lms::bench::search_limits(factory, {.config = cfg, .device = dev}));
//   // lim.lms_max / lim.no_lms_max: how much further LMS goes.
//
// Note [Limit search]: each limit is found by doubling the size from the
// smallest valid one until a probe fails, then bisecting between the last
// size that passed and the first that failed (the three predicates are
// monotone in the size for these models). The probes are exact and run no
// training step; each is the Device overload of lms::rewrite on a probe
// device made as the rows' device (capacity, threads, pinned host pool):
//   - without LMS: lms::rewrite with LMS disabled (the graph stays
//     unchanged) reports fits, which it decides from the step's static
//     layout (persistent tensors plus the arena) with the device's kernel
//     workspaces, as the session holds it;
//   - with LMS: lms::rewrite as the LMS rows plan (auto policy, with the
//     least-workspace fallback for convolutions, within the device's pinned
//     host pool, with the config's time model: "measured" profiles the graph
//     on the probe device at every probe) succeeds and reports fits, decided
//     the same way for the rewritten step;
//   - working-set limit: RewriteReport::working_set_limit_bytes <= budget,
//     the bytes that must be resident at the busiest node (its inputs,
//     outputs, workspace, persistent and fetched tensors), each node with
//     the smaller of its fast and least-workspace kernels' workspaces
//     (plan_figures_without_lms); no swap plan can beat it without
//     splitting operations.
// The two trained limits are then confirmed by running one real step at the
// size found; should a real step fail where the replay said it fits, the
// search bisects again below it with real steps and reports the disagreement.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "model_factory.h"
#include "run_case.h"

namespace lms::bench {

// Largest positive multiple `k * step` (k <= max_size / step) with probe
// true, by doubling k from 1 then bisecting (Note [Limit search]); 0 when
// probe(step) is false. *capped is set when probe(max_size) held. Errors of
// the probe are returned.
absl::StatusOr<int64_t> search_max(const std::function<absl::StatusOr<bool>(int64_t)>& probe,
                                   int64_t step, int64_t max_size, bool* capped = nullptr);

struct SearchSpec {
  LmsConfig config;  // LMS settings of the "with LMS" limit
  DeviceSetup device;
  bool confirm = true;  // run one real step at each trained limit
};

struct Limits {
  int64_t no_lms_max = 0;       // largest size whose step fits without LMS
  int64_t lms_max = 0;          // largest size lms::rewrite fits
  int64_t working_set_max = 0;  // largest size whose working set fits the LMS budget
  bool no_lms_capped = false;   // the search hit factory.max_search_size
  bool lms_capped = false;
  bool working_set_capped = false;
  bool no_lms_confirmed = false;  // a real step ran at no_lms_max
  bool lms_confirmed = false;
  std::string notes;  // disagreements between the replay and a real step
  int probes = 0;     // planner probes made
  double search_s = 0;
  double confirm_s = 0;
};

absl::StatusOr<Limits> search_limits(const ModelFactory& factory, const SearchSpec& spec);

}  // namespace lms::bench
