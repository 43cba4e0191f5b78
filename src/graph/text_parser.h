// Line parser behind parse_graph (text.cc); see the grammar there.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "lms/graph.h"

namespace lms {

// Parses one non-empty, non-comment line into `graph`. InvalidArgument saying
// what was expected where.
absl::Status parse_graph_line(Graph& graph, std::string_view line);

}  // namespace lms
