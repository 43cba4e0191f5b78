// Which cuDNN convolution algorithm a CUDA kernel uses, among the
// candidates cudnnGetConvolution*Algorithm_v7 ranks (its perf structs).
//
// Note [Convolution algorithm choice]: a candidate is usable when cuDNN
// reports it supported (CUDNN_STATUS_SUCCESS), deterministic, and for FMA
// or default math (never tensor-op math: the descriptor is CUDNN_FMA_MATH,
// Note [CUDA kernel determinism]). Among the usable ones:
//   1. those within the workspace limit (CudaKernelContext::
//      max_conv_workspace_bytes), FMA-math candidates first: cuDNN's
//      best-ranked one, or with workspace = "least" the smallest workspace;
//   2. where none is within the limit, the one with the smallest workspace,
//      whatever its size. The limit keeps kernels from asking for more
//      scratch than they gain from; it is not a correctness bound: the
//      planner places every kernel's workspace in the step's arena, so a
//      workspace too large for the device makes the plan not fit (an error
//      before the step runs), never an overrun.
// Seen on an H100 (cuDNN 9): the backward filter pass of a 3-D convolution
// on a 128^3 volume has no deterministic algorithm within 256 MiB.
// Only when no candidate is usable at all is the kernel Unimplemented; the
// error lists every candidate and why it was not usable.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace lms::cuda {

// What the error message says of one candidate.
inline std::string describe_candidate(int algo, cudnnStatus_t status,
                                      cudnnDeterminism_t determinism, cudnnMathType_t math,
                                      uint64_t memory) {
  const char* math_name = math == CUDNN_FMA_MATH       ? "fma"
                          : math == CUDNN_DEFAULT_MATH ? "default"
                                                       : "tensor-op";
  return absl::StrCat("algo ", algo, " (",
                      status == CUDNN_STATUS_SUCCESS ? "supported" : "not supported", ", ",
                      determinism == CUDNN_DETERMINISTIC ? "deterministic" : "non-deterministic",
                      ", ", math_name, " math, ", memory, " bytes)");
}

// Perf is one of cuDNN's cudnnConvolution*AlgoPerf_t (fields algo, status,
// determinism, mathType, memory). `what` names the node for errors. Returns
// the chosen algorithm and its workspace (bytes).
template <typename Perf>
absl::StatusOr<std::pair<int, uint64_t>> choose_conv_algorithm(const std::string& what,
                                                               const Perf* perf, int n,
                                                               uint64_t max_workspace,
                                                               bool least_workspace) {
  auto usable = [&](int i, bool fma_only) {
    const bool math_ok =
        perf[i].mathType == CUDNN_FMA_MATH || (!fma_only && perf[i].mathType == CUDNN_DEFAULT_MATH);
    return perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
           math_ok;
  };
  for (bool fma_only : {true, false}) {
    int chosen = -1;
    for (int i = 0; i < n; ++i) {
      if (!usable(i, fma_only) || perf[i].memory > max_workspace) continue;
      if (chosen < 0 || perf[i].memory < perf[chosen].memory) chosen = i;
      if (!least_workspace) break;
    }
    if (chosen >= 0) {
      return std::pair<int, uint64_t>(static_cast<int>(perf[chosen].algo), perf[chosen].memory);
    }
  }
  // None within the limit: the smallest workspace (ties: the better ranked).
  int chosen = -1;
  for (int i = 0; i < n; ++i) {
    if (usable(i, false) && (chosen < 0 || perf[i].memory < perf[chosen].memory)) chosen = i;
  }
  if (chosen >= 0) {
    return std::pair<int, uint64_t>(static_cast<int>(perf[chosen].algo), perf[chosen].memory);
  }
  std::string candidates;
  for (int i = 0; i < n; ++i) {
    absl::StrAppend(&candidates, i == 0 ? "" : "; ",
                    describe_candidate(static_cast<int>(perf[i].algo), perf[i].status,
                                       perf[i].determinism, perf[i].mathType, perf[i].memory));
  }
  return absl::UnimplementedError(absl::StrCat(
      what, ": cuDNN offers no supported, deterministic algorithm with FMA or default math among ",
      n, " candidates: ", n == 0 ? "none" : candidates));
}

}  // namespace lms::cuda
