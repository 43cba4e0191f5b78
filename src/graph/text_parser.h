// Line parser behind parse_graph, and the attribute value printer of
// to_text (text.cc); see the grammar there.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/graph.h"
#include "lms/types.h"

namespace lms {

// The text of one attribute value as to_text writes it (VALUE in {key=VALUE}).
std::string attr_value_text(const AttrValue& value);
// Parses one attribute value that makes up all of `text` (surrounding spaces
// aside); parse_attr_value_text(attr_value_text(v)) gives v back exactly,
// the sign of zero included. InvalidArgument for anything else.
absl::StatusOr<AttrValue> parse_attr_value_text(std::string_view text);

// Parses one non-empty, non-comment line into `graph`. InvalidArgument saying
// what was expected where.
absl::Status parse_graph_line(Graph& graph, std::string_view line);

}  // namespace lms
