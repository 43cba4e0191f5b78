// The rule table of the op schema (op_schema.cc), filled by the family files
// rules_*.cc. Not for use outside src/op_schema.
#pragma once

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "op_schema/op_instance.h"
#include "op_schema/op_schema.h"

namespace lms::op_rules {

// Validates an instance whose arity and inputs have been checked
// (infer_outputs) and returns its output shapes; never reads output_shapes.
using Rule = absl::StatusOr<std::vector<Shape>> (*)(const OpInstance&);

struct RuleEntry {
  OpArity arity;
  Rule rule = nullptr;
  OpAttrNames attrs;  // required and optional, each sorted by name
};

// The entry of `op` in a family, or nullopt when the op is not the family's.
std::optional<RuleEntry> pointwise_rule(OpKind op);
std::optional<RuleEntry> norm_rule(OpKind op);
std::optional<RuleEntry> optimizer_rule(OpKind op);
std::optional<RuleEntry> linear_rule(OpKind op);
std::optional<RuleEntry> loss_rule(OpKind op);
std::optional<RuleEntry> spatial_rule(OpKind op);

}  // namespace lms::op_rules
