#include "backend/cpu/kernels/cpu_kernels.h"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "lms/status.h"
#include "lms/types.h"

namespace lms::cpu {
namespace {

// Ops whose kernels see their tensors as flat arrays of one shape: any
// layout works when all of them share it (Note [Blocked layouts] in
// src/graph/blocked_layouts.cc).
constexpr std::array<std::string_view, 9> kFlatOps = {
    "relu",        "relu_bwd", "leaky_relu", "leaky_relu_bwd", "sigmoid",
    "sigmoid_bwd", "add",      "mul",        "scale"};

bool is_conv_op(std::string_view op) {
  return op == "conv" || op == "conv_bwd_data" || op == "conv_bwd_weights" || op == "deconv" ||
         op == "deconv_bwd_data" || op == "deconv_bwd_weights";
}

// Blocked tensors reach only kernels that can read them: the convolutions
// (which check their slots) and flat ops whose tensors are all blocked.
absl::Status check_layouts(const KernelSpec& spec) {
  auto it = spec.attrs.find(kLayoutAttr);
  if (it == spec.attrs.end()) return absl::OkStatus();
  const std::string* s = std::get_if<std::string>(&it->second);
  if (s == nullptr || s->find(kLayoutBlocked) == std::string::npos || is_conv_op(spec.op)) {
    return absl::OkStatus();
  }
  const bool flat = std::find(kFlatOps.begin(), kFlatOps.end(), spec.op) != kFlatOps.end();
  if (flat && std::count(s->begin(), s->end(), kLayoutPlain) == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "node '", spec.name, "' (op ", spec.op, "): layout \"", *s,
      "\" is not supported by the CPU backend: blocked tensors are read only by convolutions "
      "(x, y, dx, dy) and by element-wise ops whose tensors are all blocked"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> create_cpu_kernel(const KernelSpec& spec,
                                                          const CpuKernelContext& ctx) {
  LMS_RETURN_IF_ERROR(check_layouts(spec));
  try {
    LMS_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> spatial, create_spatial_kernel(spec, ctx));
    if (spatial) return spatial;
    LMS_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> pointwise, create_pointwise_kernel(spec, ctx));
    if (pointwise) return pointwise;
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN failed to create the kernel of node '",
                                            spec.name, "' (op ", spec.op, "): ", e.what()));
  }
  return absl::UnimplementedError(absl::StrCat("the CPU backend has no kernel for op '", spec.op,
                                               "' (node '", spec.name, "')"));
}

}  // namespace lms::cpu
