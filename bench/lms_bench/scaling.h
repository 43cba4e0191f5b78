// lms-bench scaling: data-parallel VDSR with LMS over 1, 2, 4 ... ranks of
// one mpirun launch, the table of the distributed case studies (ranks, step
// time, speedup, efficiency). Weak scaling, as on GPUs: each rank trains its
// own batch of `batch` on its own device with `threads` compute threads, so
// the global batch is ranks x batch. Every row runs inside the same launch
// on ranks 0 .. k-1 (make_mpi_subset); the other ranks wait in a barrier
// that sleeps between polls, so they take no core from the measured ranks.
//
//   mpirun -np 4 --oversubscribe build/bench/lms-bench scaling --batch 4 --threads 1
//
// speedup(k) = throughput(k) / throughput(1) with throughput = global batch /
// step time, where a row's step time is the median over its timed steps of
// the slowest rank's step; efficiency = speedup / k.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/config.h"
#include "lms/distributed.h"
#include "model_factory.h"
#include "nlohmann/json.hpp"
#include "run_case.h"

namespace lms::bench {

struct ScalingOptions {
  VdsrBenchModel model;
  int64_t batch = 4;  // per rank
  int steps = 4;      // timed steps per row, after one warm-up step
  LmsConfig config;   // LMS on (auto policy unless the config says otherwise)
  DeviceSetup device;
  // LMS is forced to swap: its budget (device_memory_limit) is this fraction
  // of the predicted no-LMS peak, in (0, 1]; 1 = the device capacity.
  double budget_fraction = 0.6;
};

struct ScalingRow {
  int ranks = 0;
  int64_t global_batch = 0;
  double step_s = 0;           // median over steps of the slowest rank's step, seconds
  double samples_per_s = 0;    // global_batch / step_s
  double speedup = 0;          // samples_per_s / the 1-rank row's
  double efficiency = 0;       // speedup / ranks
  uint64_t budget_bytes = 0;   // LMS budget on rank 0
  uint64_t swapped_bytes = 0;  // D2H bytes per step on rank 0 (LMS)
  uint64_t all_reduce_buckets = 0;
  float loss = 0;  // mean over ranks of the last step's loss
};

struct ScalingResult {
  std::vector<ScalingRow> rows;  // filled on rank 0 only
  int world_ranks = 0;
  int threads_per_rank = 0;
  int cores = 0;  // std::thread::hardware_concurrency of rank 0's machine
};

// 1, 2, 4, ... up to and including `world` (world itself when not a power of 2).
std::vector<int> scaling_rank_counts(int world);

// Collective over every rank of `world`. Errors of the runs (a failing rank
// is reported by the communicator, Note [Failed ranks]); InvalidArgument for
// steps < 1 or batch < 1.
absl::StatusOr<ScalingResult> run_scaling(Communicator& world, const ScalingOptions& options,
                                          std::ostream& err);

std::string format_scaling(const ScalingResult& r);
nlohmann::json to_json(const ScalingResult& r);

}  // namespace lms::bench
