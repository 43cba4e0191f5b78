// Host-side ONNX values: initializers, Constant nodes and folded shape
// arithmetic, decoded from TensorProto (inline or external data).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/types.h"

namespace onnx {
class ModelProto;
class TensorProto;
}  // namespace onnx

namespace lms::onnx_import {

// A constant. Float types (float, double, float16 unsupported) are held as
// float in `f`; integer and bool types as int64 in `i`. dims may hold 0
// (empty tensors, e.g. an absent Resize roi).
struct Const {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  std::shared_ptr<const std::vector<float>> f;  // kFloat32
  std::vector<int64_t> i;                       // kInt64
  int64_t numel() const;
  double at(int64_t k) const { return dtype == DType::kInt64 ? double(i[k]) : (*f)[k]; }
};

Const make_int_const(std::vector<int64_t> dims, std::vector<int64_t> values);
Const make_float_const(std::vector<int64_t> dims, std::vector<float> values);

// Decodes `t`. External data is read from `model_dir`/location at the
// given offset and length. NotFound for a missing external file;
// InvalidArgument for an unsupported element type, a size that does not
// match the dims, or data out of the file's bounds.
absl::StatusOr<Const> decode_tensor(const onnx::TensorProto& t, const std::string& model_dir);

// Parses the model file. NotFound if absent; InvalidArgument if it is not a
// complete ModelProto (truncated or corrupt).
absl::Status load_model(const std::string& path, onnx::ModelProto* model);

}  // namespace lms::onnx_import
