// Basic value types shared by the graph IR and the backends: tensor shapes,
// element types and node attributes. Layouts are NCHW (2-D) and NCDHW (3-D).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace lms {

// Dimensions of a tensor, outermost first: {N, C, H, W} or {N, C, D, H, W}.
// A scalar has an empty shape.
using Shape = std::vector<int64_t>;

enum class DType : uint8_t { kFloat32 };

inline int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

inline uint64_t dtype_bytes(DType) { return 4; }

inline uint64_t shape_bytes(const Shape& shape, DType dtype = DType::kFloat32) {
  return static_cast<uint64_t>(num_elements(shape)) * dtype_bytes(dtype);
}

// An attribute value: integer, real, string or integer list.
using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>>;

// Node attributes, ordered by name so that printing is deterministic.
using Attrs = std::map<std::string, AttrValue, std::less<>>;

}  // namespace lms
