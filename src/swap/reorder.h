#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
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
// hoist_weight_gradients moves each such weights node (and the same pair of
// deconv_bwd_weights / deconv_bwd_data) to just before its data node in
// the graph's preferred order when
//  - the two read the same dy and the data node comes first in schedule();
//  - the weights node is the last reader of x in that order and x is not in
//    `fetched` (a fetched x lives to the end of the step anyway);
//  - every producer of the weights node's inputs and every control input
//    come before the data node.
// The two nodes are independent, so every value computed stays the same
// bits; only the order changes, and no tensor lives longer except the small
// weight gradients, by one node. Returns the number of nodes moved;
// the error of schedule() for a cyclic graph.
absl::StatusOr<int> hoist_weight_gradients(Graph& graph, const std::vector<std::string>& fetched);

}  // namespace lms::swap
