#include "op_schema/spec_checks.h"

#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lms/status.h"
#include "lms/strings.h"

namespace lms {
namespace {

// The attribute `key` of type T ("int", "real", "str", "ints" in messages).
template <typename T>
absl::StatusOr<T> attr_as(const OpInstance& spec, absl::string_view key, absl::string_view type) {
  auto it = spec.attrs.find(key);
  if (it == spec.attrs.end()) {
    return invalid(spec, absl::StrCat("missing attribute '", key, "' (expected ", type, ")"));
  }
  const T* value = std::get_if<T>(&it->second);
  if (value == nullptr) {
    return invalid(spec, absl::StrCat("attribute '", key, "' must be of type ", type));
  }
  return *value;
}

}  // namespace

absl::Status invalid(const OpInstance& spec, absl::string_view msg) {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", spec.name, "' (op ", op_name(spec.op), "): ", msg));
}

std::string shape_str(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::Status check_tensor_shape(std::string_view what, const Shape& shape, DType dtype) {
  for (int64_t d : shape) {
    if (d <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          to_absl(what), ": every dimension must be positive, got ", shape_str(shape)));
    }
  }
  if (!checked_shape_bytes(shape, dtype).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(to_absl(what), ": ", shape_str(shape),
                     " is too large: a tensor may have at most 2^63 - 1 bytes (the product of "
                     "the dims overflows)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> real_attr(const OpInstance& spec, absl::string_view key) {
  LMS_ASSIGN_OR_RETURN(double value, attr_as<double>(spec, key, "real"));
  if (!std::isfinite(value)) {
    return invalid(spec, absl::StrCat(key, " must be finite, got ", value));
  }
  return value;
}

absl::StatusOr<double> real_attr_in(const OpInstance& spec, absl::string_view key, double lo,
                                    double hi, bool open_lo, bool open_hi) {
  LMS_ASSIGN_OR_RETURN(double v, real_attr(spec, key));
  const bool below = open_lo ? !(v > lo) : !(v >= lo);
  const bool above = open_hi ? !(v < hi) : !(v <= hi);
  if (below || above) {
    return invalid(spec, absl::StrCat(key, " must be in ", open_lo ? "(" : "[", lo, ", ", hi,
                                      open_hi ? ")" : "]", ", got ", v));
  }
  return v;
}

absl::StatusOr<int64_t> int_attr(const OpInstance& spec, absl::string_view key) {
  return attr_as<int64_t>(spec, key, "int");
}

absl::StatusOr<bool> flag_attr(const OpInstance& spec, absl::string_view key) {
  LMS_ASSIGN_OR_RETURN(int64_t v, int_attr(spec, key));
  if (v != 0 && v != 1) return invalid(spec, absl::StrCat(key, " must be 0 or 1, got ", v));
  return v == 1;
}

absl::StatusOr<std::string> str_attr(const OpInstance& spec, absl::string_view key) {
  return attr_as<std::string>(spec, key, "str");
}

absl::StatusOr<std::vector<int64_t>> ints_attr(const OpInstance& spec, absl::string_view key) {
  return attr_as<std::vector<int64_t>>(spec, key, "ints");
}

absl::StatusOr<Shape> shape_attr(const OpInstance& spec, absl::string_view key) {
  LMS_ASSIGN_OR_RETURN(Shape shape, ints_attr(spec, key));
  absl::Status s = check_tensor_shape(to_std(key), shape, DType::kFloat32);
  if (!s.ok()) return invalid(spec, s.message());
  return shape;
}

absl::Status check_arity(const OpInstance& spec, size_t min_in, size_t max_in) {
  const size_t n_in = spec.input_shapes.size();
  if (n_in >= min_in && n_in <= max_in) return absl::OkStatus();
  const std::string allowed = max_in == static_cast<size_t>(-1) ? absl::StrCat("at least ", min_in)
                              : min_in == max_in                ? absl::StrCat(min_in)
                                                 : absl::StrCat(min_in, " to ", max_in);
  return invalid(spec, absl::StrCat("takes ", allowed, " inputs, got ", n_in));
}

absl::Status check_same_shape(const OpInstance& spec, const Shape& got, const Shape& want,
                              absl::string_view what) {
  if (got == want) return absl::OkStatus();
  return invalid(
      spec, absl::StrCat(what, " must have shape ", shape_str(want), ", got ", shape_str(got)));
}

absl::Status check_same_shapes(const OpInstance& spec, const std::vector<Shape>& shapes,
                               const std::vector<std::string_view>& names) {
  for (size_t i = 1; i < shapes.size(); ++i) {
    if (shapes[i] == shapes[0]) continue;
    return invalid(
        spec, absl::StrCat(to_absl(names[i]), " ", shape_str(shapes[i]), " must have the shape of ",
                           to_absl(names[0]), " ", shape_str(shapes[0])));
  }
  return absl::OkStatus();
}

absl::Status check_scalar(const OpInstance& spec, const Shape& shape, absl::string_view what) {
  if (shape.empty()) return absl::OkStatus();
  return invalid(spec, absl::StrCat(what, " must be a scalar (shape []), got ", shape_str(shape)));
}

absl::Status check_rank(const OpInstance& spec, const Shape& shape, size_t min_rank,
                        size_t max_rank, absl::string_view what) {
  if (shape.size() >= min_rank && shape.size() <= max_rank) return absl::OkStatus();
  return invalid(spec, absl::StrCat(what, " has shape ", shape_str(shape), " (rank ", shape.size(),
                                    "); allowed ranks: ", min_rank, " to ", max_rank));
}

absl::StatusOr<size_t> axis_attr(const OpInstance& spec, const Shape& shape,
                                 absl::string_view what) {
  int64_t axis = kDefaultAxis;
  if (has_axis_attr(spec)) {
    LMS_ASSIGN_OR_RETURN(axis, int_attr(spec, to_absl(kAxisAttr)));
  }
  if (std::optional<size_t> dim = normalize_axis(axis, shape.size())) return *dim;
  const auto rank = static_cast<int64_t>(shape.size());
  if (rank == 0) {
    return invalid(spec, absl::StrCat("axis ", axis, " is out of range: ", what,
                                      " is a scalar (shape []), which has no axis"));
  }
  return invalid(spec, absl::StrCat("axis ", axis, " is out of range [", -rank, ", ", rank - 1,
                                    "] for ", what, " ", shape_str(shape), " of rank ", rank));
}

bool has_axis_attr(const OpInstance& spec) { return spec.attrs.contains(kAxisAttr); }

absl::Status bad_embedding_id(const OpInstance& spec, int64_t position, int64_t id, int64_t rows) {
  return invalid(spec, absl::StrCat("id ", id, " at position ", position, " is out of range [0, ",
                                    rows, ") of the table"));
}

}  // namespace lms
