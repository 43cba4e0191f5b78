// Basic value types shared by the graph IR and the backends: tensor shapes,
// element types and node attributes. Layouts are NCHW (2-D) and NCDHW (3-D).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "lms/checked.h"
#include "lms/status.h"

namespace lms {

// Dimensions of a tensor, outermost first: {N, C, H, W} or {N, C, D, H, W}.
// A scalar has an empty shape.
using Shape = std::vector<int64_t>;

// Element types.
// - kFloat32: what every op computes in, and the dtype of every parameter
//   (the master weights) and optimizer state.
// - kInt64: indices (the token ids `embedding` reads, the class labels of
//   `softmax_cross_entropy`, docs/ops.md), fed with Int64Feeds
//   (lms/session.h).
// - kBFloat16 (bfloat16: 8 exponent bits, 7 mantissa bits) and kFloat16
//   (IEEE 754 binary16: 5 exponent bits, 10 mantissa bits): 2-byte floats
//   for activations in mixed precision. Today only `cast` (docs/ops.md)
//   reads and writes them; a swap moves their bytes as they are. They are
//   fed and fetched as float32 values (lms/session.h), rounded to nearest
//   even on the way in.
enum class DType : uint8_t { kFloat32, kInt64, kBFloat16, kFloat16 };

// Bytes per element: 4, 8, 2, 2.
inline uint64_t dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::kInt64:
      return 8;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
    case DType::kFloat32:
      break;
  }
  return 4;
}

// "f32", "i64", "bf16", "f16": the spelling of the graph's text form, of the
// `cast` op's `to` attribute and of messages.
inline const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kInt64:
      return "i64";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat16:
      return "f16";
    case DType::kFloat32:
      break;
  }
  return "f32";
}

// The dtype dtype_name() spells `name`; nullopt for any other text.
inline std::optional<DType> parse_dtype(std::string_view name) {
  for (DType d : {DType::kFloat32, DType::kInt64, DType::kBFloat16, DType::kFloat16}) {
    if (name == dtype_name(d)) return d;
  }
  return std::nullopt;
}

// Whether `dtype` holds real numbers (f32, bf16, f16), fed as float32.
inline bool is_float_dtype(DType dtype) { return dtype != DType::kInt64; }

// Which rule lms::rewrite plans with (LmsConfig::policy, lms/config.h).
enum class SwapPolicy : uint8_t { kAuto, kTflms, kVdnn, kManual };

// "auto", "tflms", "vdnn", "manual": the config's and the reports' spelling.
inline const char* policy_name(SwapPolicy policy) {
  switch (policy) {
    case SwapPolicy::kTflms:
      return "tflms";
    case SwapPolicy::kVdnn:
      return "vdnn";
    case SwapPolicy::kManual:
      return "manual";
    case SwapPolicy::kAuto:
      break;
  }
  return "auto";
}

// The dimension `axis` names in a shape of `rank` dims: 0..rank-1, or
// negative counting from the end (-1 = the last); nullopt out of range.
inline std::optional<size_t> normalize_axis(int64_t axis, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) return std::nullopt;
  return static_cast<size_t>(axis < 0 ? axis + r : axis);
}

// A plain row-major tensor seen as [outer, axis, inner] around dimension
// `axis` (already normalised): how concat, slice, softmax and reduce_mean
// along an axis walk memory.
struct AxisView {
  int64_t outer = 1;
  int64_t axis = 1;
  int64_t inner = 1;
};
inline AxisView axis_view(const Shape& shape, size_t axis) {
  AxisView v;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < axis) v.outer *= shape[i];
    if (i > axis) v.inner *= shape[i];
  }
  v.axis = shape[axis];
  return v;
}

// The number of elements of `shape`; nullopt if a dim is negative or the
// product overflows int64.
inline std::optional<int64_t> checked_num_elements(const Shape& shape) {
  Checked<int64_t> n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    n = n * d;
  }
  return n.get();
}

// The bytes of a tensor of `shape`; nullopt unless checked_num_elements is
// and the byte count fits in int64 (so it is representable both as int64_t
// and as uint64_t, and int64 arithmetic on element counts cannot overflow).
inline std::optional<uint64_t> checked_shape_bytes(const Shape& shape,
                                                   DType dtype = DType::kFloat32) {
  const std::optional<int64_t> n = checked_num_elements(shape);
  if (!n) return std::nullopt;
  const std::optional<int64_t> bytes = checked_mul(*n, static_cast<int64_t>(dtype_bytes(dtype)));
  if (!bytes) return std::nullopt;
  return static_cast<uint64_t>(*bytes);
}

// num_elements and shape_bytes are for shapes known to be valid: every tensor
// of a Graph is (Graph::input, parameter and shape inference reject shapes
// whose bytes overflow, see check_shape in lms/graph.h). Calling them on an
// unchecked absurd shape is a programming error and aborts instead of
// returning a wrapped-around count.
inline int64_t num_elements(const Shape& shape) {
  const std::optional<int64_t> n = checked_num_elements(shape);
  LMS_CHECK(n.has_value());
  return *n;
}

inline uint64_t shape_bytes(const Shape& shape, DType dtype = DType::kFloat32) {
  const std::optional<uint64_t> bytes = checked_shape_bytes(shape, dtype);
  LMS_CHECK(bytes.has_value());
  return *bytes;
}

// An attribute value: integer, real, string or integer list.
using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>>;

// Node attributes, ordered by name so that printing is deterministic.
using Attrs = std::map<std::string, AttrValue, std::less<>>;

// The optional attribute "workspace" of the six convolution ops (conv,
// deconv and their backward ops): which kernel a device compiles for the
// node. "fast" (the default when absent): the fastest deterministic
// algorithm the device offers. "least": the one needing the least workspace
// memory, usually slower (vDNN_dyn, Rhu et al. 2016; SuperNeurons, Wang et
// al. 2018). lms::rewrite sets it on nodes when the budget is too tight for
// the fast kernels' workspaces (RewriteReport::least_workspace_nodes); the
// results then differ from the fast kernels' in the last bits, and equal
// those of the same graph run without swapping.
inline constexpr std::string_view kWorkspaceAttr = "workspace";
inline constexpr std::string_view kWorkspaceFast = "fast";
inline constexpr std::string_view kWorkspaceLeast = "least";

// The optional attribute "activation" of conv: "relu" makes the node output
// relu(conv(x, w) + b) in one kernel (oneDNN's eltwise post-op on the CPU
// device), so the pre-activation tensor never exists. Its gradient applies
// relu_bwd to the node's output first, which is exact: relu(v) > 0 exactly
// where v > 0. lms::rewrite with the CPU device sets it where a relu is a
// conv output's only reader (Note [Conv + ReLU fusion]); model code may set
// it too.
inline constexpr std::string_view kActivationAttr = "activation";
inline constexpr std::string_view kActivationRelu = "relu";

// The optional attribute "layout" of any node: the storage layout of each
// input and output tensor, one character each, inputs then ':' then outputs
// ("bp:b": input 0 blocked, input 1 plain, output 0 blocked). 'p' is the
// plain NCHW / NCDHW layout of docs/ops.md; 'b' the device's blocked
// activation layout (on the CPU device oneDNN's nChw16c / nCdhw16c with
// AVX-512, nChw8c / nCdhw8c otherwise), same byte size, the channels split
// into blocks. Absent: every tensor plain. Set by lms::rewrite with the CPU
// device, LMS on or off (Note [Blocked layouts]), never by model code; a
// graph run without that rewrite keeps every tensor plain.
inline constexpr std::string_view kLayoutAttr = "layout";

// The optional attribute "axis" of concat, slice, softmax, softmax_bwd,
// reduce_mean and reduce_mean_bwd (docs/ops.md): the dimension they work
// along, negative counting from the end (-1 = the last). Absent means
// kDefaultAxis (the channels of NCHW / NCDHW) on all but reduce_mean, whose
// absent axis means every element.
inline constexpr std::string_view kAxisAttr = "axis";
inline constexpr int64_t kDefaultAxis = 1;
inline constexpr char kLayoutPlain = 'p';
inline constexpr char kLayoutBlocked = 'b';

}  // namespace lms
