// Which activation tensors a device with a blocked activation layout (the CPU
// device: oneDNN's nChw16c) stores blocked between ops, recorded in the
// nodes' "layout" attribute (kLayoutAttr in lms/types.h).
//
//   LMS_ASSIGN_OR_RETURN(BlockedLayoutReport r, assign_blocked_layouts(g, {"loss"}));
//   // r.blocked_tensors of g's tensors now pass blocked from producer to consumers.
//
// Per Note [Blocked layouts], the rule is the CPU backend's
// (backend/cpu/blocked_layout.h); this pass applies it to a graph.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/pass.h"
#include "lms/graph.h"

namespace lms {

struct BlockedLayoutReport {
  int blocked_tensors = 0;
  uint64_t blocked_bytes = 0;  // their total size (the same as plain: no padding)
};

// Rewrites every node's "layout" attribute (removing the old ones first, so
// running it twice gives the same graph). `fetched` names tensors read back
// by the host, which stay plain (as do the loss, graph inputs and persistent
// tensors). Tensors are NCHW / NCDHW. InvalidArgument when a fetched name is
// not a tensor of `g`.
absl::StatusOr<BlockedLayoutReport> assign_blocked_layouts(Graph& g,
                                                           const std::vector<std::string>& fetched);

// assign_blocked_layouts as a GraphPass (Note [Graph passes]); changed when
// any node's layout attribute was added or removed.
class BlockedLayoutPass : public GraphPass {
 public:
  explicit BlockedLayoutPass(std::vector<std::string> fetched) : fetched_(std::move(fetched)) {}
  std::string_view name() const override { return "blocked_layouts"; }
  absl::StatusOr<bool> run(Graph& graph) override;

 private:
  std::vector<std::string> fetched_;
};

}  // namespace lms
