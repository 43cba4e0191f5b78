#include "backend/cpu/blocked_layout.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "op_schema/spec_checks.h"

namespace lms::cpu {

bool tensor_may_be_blocked(const Shape& shape, DType dtype) {
  return (shape.size() == 4 || shape.size() == 5) && dtype == DType::kFloat32 &&
         shape[1] % kBlockChannels == 0;
}

bool slot_may_be_blocked(OpKind op, bool input, size_t i) {
  if (is_flat_elementwise(op)) return true;
  if (op == OpKind::kConv) return i == 0;                    // x -> y
  if (op == OpKind::kConvBwdData) return i == 0;             // dy -> dx
  if (op == OpKind::kConvBwdWeights) return input && i < 2;  // x, dy -> dw, db
  return false;
}

bool all_or_none_blocked(OpKind op) { return is_flat_elementwise(op); }

absl::Status check_blocked_layout(const KernelSpec& spec) {
  auto it = spec.attrs.find(kLayoutAttr);
  const std::string* s = it == spec.attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
  if (s == nullptr || s->find(kLayoutBlocked) == std::string::npos) return absl::OkStatus();
  // The convolution kernels check their own slots (conv_tensor_layouts):
  // they can also take a deconvolution's activations blocked, which the
  // lowering does not ask of them.
  if (is_conv_family(spec.op)) return absl::OkStatus();
  const size_t n_in = spec.input_shapes.size();
  auto refuse = [&](absl::string_view why) {
    return invalid(spec,
                   absl::StrCat("layout \"", *s, "\" is not supported by the CPU backend: ", why));
  };
  bool any_plain = false;
  for (size_t k = 0; k < s->size(); ++k) {
    if (k == n_in) continue;  // the ':'
    const bool input = k < n_in;
    const size_t i = input ? k : k - n_in - 1;
    if ((*s)[k] != kLayoutBlocked) {
      any_plain = true;
      continue;
    }
    if (!slot_may_be_blocked(spec.op, input, i)) {
      return refuse(
          "blocked tensors are read only by convolutions (x, y, dx, dy) and by "
          "element-wise ops whose tensors are all blocked");
    }
    const Shape& shape = input ? spec.input_shapes[i] : spec.output_shapes[i];
    const DType dtype =
        input && i < spec.input_dtypes.size() ? spec.input_dtypes[i] : DType::kFloat32;
    if (!tensor_may_be_blocked(shape, dtype)) {
      return refuse(
          absl::StrCat("a blocked tensor is NCHW or NCDHW with channels that fill whole "
                       "blocks (",
                       kBlockChannels, "), got ", shape_str(shape)));
    }
  }
  if (all_or_none_blocked(spec.op) && any_plain) {
    return refuse("an element-wise op's tensors are all blocked or all plain");
  }
  if (all_or_none_blocked(spec.op) && n_in == 2 && spec.input_shapes[0] != spec.input_shapes[1]) {
    return refuse("a broadcasting add / mul reads and writes plain tensors only");
  }
  return absl::OkStatus();
}

}  // namespace lms::cpu
