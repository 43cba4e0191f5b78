#include "runtime/lowering.h"

#include <memory>
#include <utility>

#include "graph/fuse_head_loss.h"
#include "graph/fusion.h"
#include "graph/low_precision.h"
#include "lms/status.h"
#include "runtime/blocked_layouts.h"

namespace lms {

// Note [Device lowering]
// A device kind may need its graph changed before planning, so that the plan
// counts the kernels its session will run: the CPU device runs each conv
// with its relu as one oneDNN kernel where the relu is the conv output's only
// reader (Note [Conv + ReLU fusion]), computes a language model's head and
// loss a chunk of rows at a time (Note [Chunked language-model head]), and
// stores activations in oneDNN's
// blocked layout between ops where every reader can (Note [Blocked
// layouts]). These run before the kernels are compiled for their
// workspaces and before the swap pass, whose swap copies and rewired
// consumers keep each tensor's layout. The CUDA device needs only the pass
// both devices run first: neither has low-precision kernels yet, so each
// bf16 / f16 op runs in float32 between casts (Note [Low-precision
// lowering]). A new device kind, or a new pass for one, is a case below and
// nothing else.
PassPipeline lowering_pipeline(DeviceKind kind, const RewriteOptions& options,
                               const LmsConfig& config) {
  PassPipeline pipeline;
  pipeline.add(std::make_unique<WidenLowPrecisionPass>());
  switch (kind) {
    case DeviceKind::kCpu:
      if (options.fuse_conv_relu) {
        pipeline.add(std::make_unique<FuseConvReluPass>(options.fetched));
      }
      if (config.chunked_head) {
        pipeline.add(std::make_unique<FuseHeadLossPass>(options.fetched));
      }
      pipeline.add(std::make_unique<BlockedLayoutPass>(options.fetched));
      break;
    case DeviceKind::kCuda:
      break;
  }
  return pipeline;
}

absl::StatusOr<Lowering> lower_for(DeviceKind kind, Graph& graph, const RewriteOptions& options,
                                   const LmsConfig& config) {
  LMS_ASSIGN_OR_RETURN(PipelineResult r, lowering_pipeline(kind, options, config).run(graph));
  Lowering low{.node_map = std::move(r.node_map)};
  std::vector<int> doing(graph.num_nodes(), 0);
  for (NodeId m : low.node_map) ++doing[m];
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    if (doing[id] > 1) low.fused.push_back(graph.node(id).name);
  }
  return low;
}

}  // namespace lms
