// The graph passes a device's kernels need before a graph is planned
// (Note [Device lowering]), declared per DeviceKind in one place.
//
//   LMS_ASSIGN_OR_RETURN(Lowering low, lower_for(device.device_kind(), graph, options));
//   // graph now holds the nodes the device's session will compile;
//   // low.node_map[id of the graph before] = the node doing its work.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/pass.h"
#include "lms/device.h"
#include "lms/graph.h"
#include "lms/rewrite.h"

namespace lms {

struct Lowering {
  std::vector<NodeId> node_map;    // by NodeId of the graph before
  std::vector<std::string> fused;  // nodes doing the work of several, in node order
};

// The passes of `kind`, in the order they run (config: chunked_head).
PassPipeline lowering_pipeline(DeviceKind kind, const RewriteOptions& options,
                               const LmsConfig& config);

// Runs lowering_pipeline(kind, options, config) on `graph` (changed only on
// success). Errors of the passes, naming the pass.
absl::StatusOr<Lowering> lower_for(DeviceKind kind, Graph& graph, const RewriteOptions& options,
                                   const LmsConfig& config);

}  // namespace lms
