#include "op_schema/op_schema.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "op_schema/op_rules.h"
#include "op_schema/spec_checks.h"

namespace lms {
namespace {

std::optional<op_rules::RuleEntry> rule_entry(OpKind op) {
  for (auto family : {&op_rules::pointwise_rule, &op_rules::norm_rule, &op_rules::optimizer_rule,
                      &op_rules::linear_rule, &op_rules::loss_rule, &op_rules::spatial_rule}) {
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

// Per Note [Float dtypes of ops], the inputs of an op that follows its
// inputs' dtype are floats of one dtype.
absl::Status check_one_float_dtype(const OpInstance& inst) {
  auto name = [&](size_t i) {
    return i < inst.input_names.size() ? absl::StrCat(" '", inst.input_names[i], "'") : "";
  };
  for (size_t i = 0; i < inst.input_dtypes.size(); ++i) {
    if (is_master_input(inst.op, i)) continue;  // float32: check_dtype
    const DType got = inst.input_dtypes[i];
    if (!is_float_dtype(got)) {
      return invalid(inst, absl::StrCat("input ", i, name(i), " has dtype ", dtype_name(got),
                                        ", the op takes f32, bf16 or f16"));
    }
    if (got != inst.input_dtypes[0]) {
      return invalid(
          inst, absl::StrCat("input ", i, name(i), " has dtype ", dtype_name(got), " and input 0",
                             name(0), " ", dtype_name(inst.input_dtypes[0]),
                             "; the op takes one float dtype (cast one of them)"));
    }
  }
  return absl::OkStatus();
}

// The optional "layout" attribute (kLayoutAttr in lms/types.h): one 'p' or
// 'b' per input, ':', one per output.
absl::Status check_layout_attr(const OpInstance& inst, size_t num_outputs) {
  const size_t num_inputs = inst.input_shapes.size();
  auto it = inst.attrs.find(kLayoutAttr);
  if (it == inst.attrs.end()) return absl::OkStatus();
  const std::string* v = std::get_if<std::string>(&it->second);
  bool ok = v != nullptr && v->size() == num_inputs + 1 + num_outputs && (*v)[num_inputs] == ':';
  for (size_t i = 0; ok && i < v->size(); ++i) {
    ok = i == num_inputs || (*v)[i] == kLayoutPlain || (*v)[i] == kLayoutBlocked;
  }
  if (ok) return absl::OkStatus();
  return invalid(inst, absl::StrCat("attribute '", to_absl(kLayoutAttr), "' must be a string of ",
                                    num_inputs, " characters 'p' or 'b' (one per input), ':', and ",
                                    num_outputs, " more (one per output)"));
}

}  // namespace

bool has_schema_rule(OpKind op) { return rule_entry(op).has_value(); }

OpAttrNames op_attr_names(OpKind op) {
  std::optional<op_rules::RuleEntry> e = rule_entry(op);
  LMS_CHECK(e.has_value());  // an op without a rule has the graph's attributes
  return e->attrs;
}

OpArity op_arity(OpKind op) {
  std::optional<op_rules::RuleEntry> e = rule_entry(op);
  LMS_CHECK(e.has_value());  // an op without a rule has the graph's arity
  return e->arity;
}

bool is_normalisation(OpKind op) {
  return op == OpKind::kInstanceNorm || op == OpKind::kBatchNorm || op == OpKind::kLayerNorm;
}

bool is_normalisation_bwd(OpKind op) {
  return op == OpKind::kInstanceNormBwd || op == OpKind::kBatchNormBwd ||
         op == OpKind::kLayerNormBwd;
}

bool is_master_input(OpKind op, size_t i) {
  // (x, gamma, beta, running_mean?, running_var?) and (x, gamma, dy).
  return (is_normalisation(op) && i >= 1) || (is_normalisation_bwd(op) && i == 1);
}

bool is_master_output(OpKind op, size_t j) {
  // batch_norm's (y, mean?, var?) and the backward ops' (dx, dgamma, dbeta).
  return (is_normalisation(op) || is_normalisation_bwd(op)) && j >= 1;
}

bool op_follows_input_dtype(OpKind op) {
  switch (op) {
    case OpKind::kBnStatsUpdate:
    case OpKind::kMseLoss:
    case OpKind::kMseLossBwd:
    case OpKind::kSoftDiceLoss:
    case OpKind::kSoftDiceLossBwd:
    case OpKind::kSoftmaxCrossEntropy:
    case OpKind::kSoftmaxCrossEntropyBwd:
    case OpKind::kLinearCrossEntropy:
    case OpKind::kLinearCrossEntropyBwd:
    case OpKind::kEmbedding:
    case OpKind::kEmbeddingBwd:
    case OpKind::kAttention:
    case OpKind::kAttentionBwd:
    case OpKind::kGlobalNorm:
    case OpKind::kIncrement:
    case OpKind::kSgdUpdate:
    case OpKind::kAdamUpdate:
    case OpKind::kAmpUpdateScale:
    case OpKind::kFill:
    case OpKind::kCast:
    case OpKind::kSwapOut:
    case OpKind::kSwapIn:
    case OpKind::kAllReduce:
      return false;
    default:
      return true;
  }
}

absl::Status check_float32_kernel(const OpInstance& inst, std::string_view backend) {
  if (inst.op == OpKind::kCast) return absl::OkStatus();
  for (DType d : inst.input_dtypes) {
    if (!is_float_dtype(d) || d == DType::kFloat32) continue;
    return absl::UnimplementedError(
        absl::StrCat("node '", inst.name, "': the ", to_absl(backend), " backend has no ",
                     dtype_name(d), " kernel for op '", op_name(inst.op),
                     "'; a session runs it in f32 between casts (the device's lowering)"));
  }
  return absl::OkStatus();
}

std::optional<DType> op_input_dtype(OpKind op, size_t i) {
  if (op_follows_input_dtype(op)) {
    if (is_master_input(op, i)) return DType::kFloat32;
    return std::nullopt;
  }
  switch (op) {
    case OpKind::kSwapOut:
    case OpKind::kSwapIn:
    case OpKind::kCast:  // any floating dtype, its rule checks
      return std::nullopt;
    case OpKind::kEmbedding:
    case OpKind::kEmbeddingBwd:
      return i == 0 ? DType::kInt64 : DType::kFloat32;
    case OpKind::kSoftmaxCrossEntropy:
    case OpKind::kSoftmaxCrossEntropyBwd:
      return i == 1 ? DType::kInt64 : DType::kFloat32;
    case OpKind::kLinearCrossEntropy:
    case OpKind::kLinearCrossEntropyBwd:
      return i == 2 ? DType::kInt64 : DType::kFloat32;
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
    const DType dtype = inst.input_dtypes.empty()
                            ? op_input_dtype(inst.op, i).value_or(DType::kFloat32)
                            : inst.input_dtypes[i];
    absl::Status s = check_tensor_shape(absl::StrCat("input ", i), inst.input_shapes[i], dtype);
    if (!s.ok()) return invalid(inst, s.message());
    if (!inst.input_dtypes.empty()) LMS_RETURN_IF_ERROR(check_dtype(inst, i));
  }
  if (!inst.input_dtypes.empty() && op_follows_input_dtype(inst.op)) {
    LMS_RETURN_IF_ERROR(check_one_float_dtype(inst));
  }
  return absl::OkStatus();
}

absl::Status check_attr_names(const OpInstance& inst, const OpAttrNames& names) {
  const Attrs& attrs = inst.attrs;
  const std::vector<std::string>& allowed = names.required;
  const std::vector<std::string>& optional = names.optional;
  std::vector<std::string> accepted = allowed;
  accepted.insert(accepted.end(), optional.begin(), optional.end());
  const std::string list = accepted.empty() ? "none" : absl::StrJoin(accepted, ", ");
  for (const auto& [key, value] : attrs) {
    if (key == kWorkspaceAttr &&
        std::find(optional.begin(), optional.end(), key) != optional.end()) {
      const std::string* v = std::get_if<std::string>(&value);
      if (v == nullptr || (*v != kWorkspaceFast && *v != kWorkspaceLeast)) {
        return invalid(inst, absl::StrCat("attribute '", to_absl(kWorkspaceAttr),
                                          "' must be the string \"", to_absl(kWorkspaceFast),
                                          "\" or \"", to_absl(kWorkspaceLeast), "\""));
      }
    }
    if (key == kLayoutAttr) continue;  // every op's; check_layout_attr
    if (std::find(accepted.begin(), accepted.end(), key) == accepted.end()) {
      return invalid(inst, absl::StrCat("unknown attribute '", key, "' (allowed: ", list, ")"));
    }
  }
  for (const std::string& key : allowed) {
    if (!attrs.contains(key)) {
      return invalid(inst, absl::StrCat("missing attribute '", key,
                                        "' (required: ", absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status check_outputs(const OpInstance& inst, const std::vector<Shape>& outputs) {
  // The rules check their own arithmetic; this catches outputs that are
  // well-formed dim by dim but too large as a whole (a product of dims).
  for (size_t j = 0; j < outputs.size(); ++j) {
    absl::Status s = check_tensor_shape(absl::StrCat("output ", j), outputs[j], DType::kFloat32);
    if (!s.ok()) return invalid(inst, s.message());
  }
  return check_layout_attr(inst, outputs.size());
}

absl::StatusOr<std::vector<Shape>> infer_outputs(const OpInstance& inst) {
  std::optional<op_rules::RuleEntry> e = rule_entry(inst.op);
  if (!e) {
    return absl::FailedPreconditionError(
        absl::StrCat("op ", op_name(inst.op), " has no rule in the op schema"));
  }
  const auto max_in =
      e->arity.max_inputs < 0 ? static_cast<size_t>(-1) : static_cast<size_t>(e->arity.max_inputs);
  LMS_RETURN_IF_ERROR(check_arity(inst, static_cast<size_t>(e->arity.min_inputs), max_in));
  LMS_RETURN_IF_ERROR(check_inputs(inst));
  LMS_RETURN_IF_ERROR(check_attr_names(inst, e->attrs));
  LMS_ASSIGN_OR_RETURN(std::vector<Shape> outputs, e->rule(inst));
  LMS_RETURN_IF_ERROR(check_outputs(inst, outputs));
  return outputs;
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
