// The primitives the op rules (op_schema.h) are written with: reading the
// attributes of an OpInstance and checking its arity and shapes. Every error
// is InvalidArgument "node '<name>' (op <op>): <msg>", the msg naming what
// was wrong and what is allowed.
//
//   LMS_RETURN_IF_ERROR(check_arity(spec, 3, 3));  // 3 inputs
//   LMS_ASSIGN_OR_RETURN(double eps, real_attr_in(spec, "eps", 0, 1, /*open_lo=*/true));
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "op_schema/op_instance.h"

namespace lms {

// InvalidArgument "node '<name>' (op <op>): <msg>".
absl::Status invalid(const OpInstance& spec, absl::string_view msg);
// "[2,3,4]"
std::string shape_str(const Shape& shape);

// OK when every dimension of `shape` is >= 1 and its bytes fit in int64;
// else InvalidArgument "<what>: every dimension must be positive, got [..]"
// or "<what>: [..] is too large: ...". The graph's check_shape (lms/graph.h).
absl::Status check_tensor_shape(std::string_view what, const Shape& shape, DType dtype);

// Attributes of the type docs/ops.md gives them ("attribute 'alpha' must be
// of type real", "missing attribute 'factor' (expected real)"). A `real`
// must also be finite.
absl::StatusOr<double> real_attr(const OpInstance& spec, absl::string_view key);
// real_attr that must also lie in [lo, hi] (open_lo: lo excluded, open_hi:
// hi excluded): "<key> must be in (lo, hi], got v".
absl::StatusOr<double> real_attr_in(const OpInstance& spec, absl::string_view key, double lo,
                                    double hi, bool open_lo = false, bool open_hi = false);
absl::StatusOr<int64_t> int_attr(const OpInstance& spec, absl::string_view key);
// int_attr of a 0 / 1 flag: "<key> must be 0 or 1, got v".
absl::StatusOr<bool> flag_attr(const OpInstance& spec, absl::string_view key);
absl::StatusOr<std::string> str_attr(const OpInstance& spec, absl::string_view key);
absl::StatusOr<std::vector<int64_t>> ints_attr(const OpInstance& spec, absl::string_view key);
// An ints attribute holding a full tensor shape (reshape's, fill's and
// sum_to's shape, input_shape, weight_shape): check_tensor_shape must accept it.
absl::StatusOr<Shape> shape_attr(const OpInstance& spec, absl::string_view key);

// Input count in [min_in, max_in] ("takes 1 to 2 inputs, got 3").
absl::Status check_arity(const OpInstance& spec, size_t min_in, size_t max_in);
absl::Status check_same_shape(const OpInstance& spec, const Shape& got, const Shape& want,
                              absl::string_view what);
// Every shape equals shapes[0]: "<names[i]> [..] must have the shape of <names[0]> [..]".
absl::Status check_same_shapes(const OpInstance& spec, const std::vector<Shape>& shapes,
                               const std::vector<std::string_view>& names);
// A scalar has shape [] ("<what> must be a scalar (shape []), got [..]").
absl::Status check_scalar(const OpInstance& spec, const Shape& shape, absl::string_view what);
absl::Status check_rank(const OpInstance& spec, const Shape& shape, size_t min_rank,
                        size_t max_rank, absl::string_view what);
// The dimension of `shape` the optional "axis" attribute names (kAxisAttr
// in lms/types.h; kDefaultAxis when absent), 0..rank-1. `what` names the
// input in the message, which gives the axis and the allowed range.
absl::StatusOr<size_t> axis_attr(const OpInstance& spec, const Shape& shape,
                                 absl::string_view what);
// Whether the node has an "axis" attribute (reduce_mean: absent = all).
bool has_axis_attr(const OpInstance& spec);

// The run-time error of embedding / embedding_bwd for an id outside
// [0, rows) of the table: names the id, its position among the node's ids
// and the allowed range, the same on both backends.
absl::Status bad_embedding_id(const OpInstance& spec, int64_t position, int64_t id, int64_t rows);

}  // namespace lms
