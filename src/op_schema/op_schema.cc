#include "op_schema/op_schema.h"

#include "absl/strings/str_cat.h"
#include "lms/status.h"
#include "op_schema/op_rules.h"
#include "op_schema/spec_checks.h"

namespace lms {
namespace {

std::optional<op_rules::RuleEntry> rule_entry(OpKind op) {
  for (auto family : {&op_rules::pointwise_rule, &op_rules::norm_rule, &op_rules::optimizer_rule,
                      &op_rules::linear_rule, &op_rules::loss_rule}) {
    if (std::optional<op_rules::RuleEntry> e = family(op)) return e;
  }
  return std::nullopt;
}

absl::Status check_dtype(const OpInstance& inst, size_t i) {
  const std::optional<DType> want = op_input_dtype(inst.op, i);
  const DType got = inst.input_dtypes[i];
  if (!want || got == *want) return absl::OkStatus();
  const std::string name =
      i < inst.input_names.size() ? absl::StrCat(" '", inst.input_names[i], "'") : "";
  return invalid(inst, absl::StrCat("input ", i, name, " has dtype ", dtype_name(got),
                                    ", the op takes ", dtype_name(*want), " there"));
}

}  // namespace

bool has_schema_rule(OpKind op) { return rule_entry(op).has_value(); }

OpArity op_arity(OpKind op) {
  std::optional<op_rules::RuleEntry> e = rule_entry(op);
  LMS_CHECK(e.has_value());  // an op without a rule has the graph's arity
  return e->arity;
}

std::optional<DType> op_input_dtype(OpKind op, size_t i) {
  switch (op) {
    case OpKind::kSwapOut:
    case OpKind::kSwapIn:
      return std::nullopt;
    case OpKind::kEmbedding:
    case OpKind::kEmbeddingBwd:
      return i == 0 ? DType::kInt64 : DType::kFloat32;
    case OpKind::kSoftmaxCrossEntropy:
    case OpKind::kSoftmaxCrossEntropyBwd:
      return i == 1 ? DType::kInt64 : DType::kFloat32;
    default:
      return DType::kFloat32;
  }
}

absl::Status check_inputs(const OpInstance& inst) {
  if (!inst.input_dtypes.empty() && inst.input_dtypes.size() != inst.input_shapes.size()) {
    return invalid(inst, absl::StrCat("has ", inst.input_dtypes.size(), " input dtypes for ",
                                      inst.input_shapes.size(), " inputs"));
  }
  for (size_t i = 0; i < inst.input_shapes.size(); ++i) {
    const DType dtype = inst.input_dtypes.empty() ? op_input_dtype(inst.op, i).value_or(DType::kFloat32)
                                                  : inst.input_dtypes[i];
    absl::Status s = check_tensor_shape(absl::StrCat("input ", i), inst.input_shapes[i], dtype);
    if (!s.ok()) return invalid(inst, s.message());
    if (!inst.input_dtypes.empty()) LMS_RETURN_IF_ERROR(check_dtype(inst, i));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Shape>> infer_outputs(const OpInstance& inst) {
  std::optional<op_rules::RuleEntry> e = rule_entry(inst.op);
  if (!e) {
    return absl::FailedPreconditionError(
        absl::StrCat("op ", op_name(inst.op), " has no rule in the op schema"));
  }
  const auto max_in = e->arity.max_inputs < 0 ? static_cast<size_t>(-1)
                                              : static_cast<size_t>(e->arity.max_inputs);
  LMS_RETURN_IF_ERROR(check_arity(inst, static_cast<size_t>(e->arity.min_inputs), max_in));
  LMS_RETURN_IF_ERROR(check_inputs(inst));
  return e->rule(inst);
}

absl::Status check_spec(const OpInstance& inst) {
  if (!has_schema_rule(inst.op)) return absl::OkStatus();
  LMS_ASSIGN_OR_RETURN(std::vector<Shape> want, infer_outputs(inst));
  const std::vector<Shape>& got = inst.output_shapes;
  if (got.size() != want.size()) {
    return invalid(inst, absl::StrCat("has ", got.size(), " outputs; the op gives ", want.size()));
  }
  for (size_t j = 0; j < got.size(); ++j) {
    if (got[j] == want[j]) continue;
    return invalid(inst, absl::StrCat("output ", j, " has shape ", shape_str(got[j]),
                                      "; its inputs and attributes give ", shape_str(want[j])));
  }
  return absl::OkStatus();
}

}  // namespace lms
