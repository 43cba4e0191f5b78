#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/graph.h"

namespace lms::swap {

// Note [Weight gradients first]
// Autodiff emits a convolution's backward as conv_bwd_data (dy, w -> dx)
// and then conv_bwd_weights (x, dy -> dw, db), as frameworks do. When the
// weights node is the last reader of x, that order keeps x alive while dx
// is written, and during the weights node dx waits, live, for its readers:
// both tensors are held at once for nothing. Running the weights node first
// frees x before dx exists. On the 3-D U-Net's last decoder level, whose
// input is the 3 MiB concat of the skip, the data-first order puts the skip,
// dx and the faster kernel's 6 MiB workspace in one working set; weights
// first, the two never meet.
//
// weight_gradients_first_order returns schedule(graph) with each such
// weights node (and the same pair of deconv_bwd_weights / deconv_bwd_data)
// moved to just before its data node, for Graph::set_order, where
//  - the two read the same dy and the data node comes first;
//  - the weights node is the last reader of x and x is not in `fetched` (a
//    fetched x lives to the end of the step anyway);
//  - every producer of the weights node's inputs and every control input
//    come before the data node.
// The two nodes are independent, so every value computed stays the same
// bits; only the order changes, and no tensor lives longer except the small
// weight gradients, by one node. Empty when no node moves; the error of
// schedule() for a cyclic graph. lms::rewrite keeps the new order only when
// the unswapped step's layout is not larger with it (a moved weights
// kernel's workspace, or the packing, can make it so on some CPUs' kernels).
absl::StatusOr<std::vector<NodeId>> weight_gradients_first_order(
    const Graph& graph, const std::vector<std::string>& fetched);

}  // namespace lms::swap
