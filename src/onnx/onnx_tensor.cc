#include "onnx/onnx_tensor.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lms/status.h"

namespace lms::onnx_import {
namespace {

using TP = ::onnx::TensorProto;

bool is_float_type(int type) { return type == TP::FLOAT || type == TP::DOUBLE; }

bool is_int_type(int type) {
  return type == TP::INT64 || type == TP::INT32 || type == TP::INT16 || type == TP::INT8 ||
         type == TP::UINT8 || type == TP::UINT16 || type == TP::UINT32 || type == TP::BOOL;
}

int64_t element_bytes(int type) {
  switch (type) {
    case TP::DOUBLE:
    case TP::INT64:
      return 8;
    case TP::FLOAT:
    case TP::INT32:
    case TP::UINT32:
      return 4;
    case TP::INT16:
    case TP::UINT16:
      return 2;
    default:
      return 1;
  }
}

// Little-endian raw bytes (ONNX's raw_data) to values.
template <typename T>
T load_raw(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

double raw_value(int type, const char* p) {
  switch (type) {
    case TP::FLOAT:
      return load_raw<float>(p);
    case TP::DOUBLE:
      return load_raw<double>(p);
    case TP::INT64:
      return double(load_raw<int64_t>(p));
    case TP::INT32:
      return load_raw<int32_t>(p);
    case TP::UINT32:
      return load_raw<uint32_t>(p);
    case TP::INT16:
      return load_raw<int16_t>(p);
    case TP::UINT16:
      return load_raw<uint16_t>(p);
    case TP::INT8:
      return load_raw<int8_t>(p);
    default:
      return load_raw<uint8_t>(p);
  }
}

void fill_from_raw(int type, const std::string& raw, int64_t n, Const& c) {
  const int64_t b = element_bytes(type);
  if (c.dtype == DType::kFloat32) {
    auto v = std::make_shared<std::vector<float>>(n);
    for (int64_t k = 0; k < n; ++k) (*v)[k] = float(raw_value(type, raw.data() + k * b));
    c.f = std::move(v);
  } else {
    c.i.resize(n);
    for (int64_t k = 0; k < n; ++k) {
      c.i[k] = type == TP::INT64 ? load_raw<int64_t>(raw.data() + k * b)
                                 : int64_t(raw_value(type, raw.data() + k * b));
    }
  }
}

absl::StatusOr<std::string> read_external(const TP& t, const std::string& model_dir,
                                          int64_t bytes) {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;
  for (const auto& e : t.external_data()) {
    if (e.key() == "location") location = e.value();
    if (e.key() == "offset") offset = std::stoll(e.value());
    if (e.key() == "length") length = std::stoll(e.value());
  }
  const std::string where = absl::StrCat("initializer '", t.name(), "': external data file '");
  if (location.empty() || location.find("..") != std::string::npos || location[0] == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(where, location, "' is not a file name relative to the model"));
  }
  const std::string file = (std::filesystem::path(model_dir) / location).string();
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(where, file, "' not found"));
  if (length >= 0 && length != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, file, "': length ", length, " but the tensor needs ", bytes, " bytes"));
  }
  std::string raw(bytes, '\0');
  in.seekg(offset);
  in.read(raw.data(), bytes);
  if (in.gcount() != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, file, "' ends before offset ", offset, " + ", bytes, " bytes"));
  }
  return raw;
}

// The typed repeated fields of TensorProto.
void fill_from_fields(const TP& t, Const& c) {
  auto put = [&](auto field) {
    if (c.dtype == DType::kFloat32) {
      c.f = std::make_shared<std::vector<float>>(field.begin(), field.end());
    } else {
      c.i.assign(field.begin(), field.end());
    }
  };
  switch (t.data_type()) {
    case TP::FLOAT:
      return put(t.float_data());
    case TP::DOUBLE:
      return put(t.double_data());
    case TP::INT64:
      return put(t.int64_data());
    case TP::UINT32:
      return put(t.uint64_data());
    default:
      return put(t.int32_data());  // int32, int16, int8, uint16, uint8, bool
  }
}

}  // namespace

int64_t Const::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

Const make_int_const(std::vector<int64_t> dims, std::vector<int64_t> values) {
  Const c;
  c.dtype = DType::kInt64;
  c.dims = std::move(dims);
  c.i = std::move(values);
  return c;
}

Const make_float_const(std::vector<int64_t> dims, std::vector<float> values) {
  Const c;
  c.dims = std::move(dims);
  c.f = std::make_shared<std::vector<float>>(std::move(values));
  return c;
}

absl::StatusOr<Const> decode_tensor(const TP& t, const std::string& model_dir) {
  const int type = t.data_type();
  if (!is_float_type(type) && !is_int_type(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name(), "': element type ", TP::DataType_Name(t.data_type()),
                     " not supported (float, double, integer and bool types are)"));
  }
  Const c;
  c.dtype = is_float_type(type) ? DType::kFloat32 : DType::kInt64;
  c.dims.assign(t.dims().begin(), t.dims().end());
  int64_t count = 1;
  for (int64_t d : c.dims) {
    // 2^40 elements at most, so counts and byte sizes cannot overflow.
    if (d < 0 || d > (int64_t{1} << 40) || (d > 0 && count > (int64_t{1} << 40) / d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name(), "': dimension ", d, " negative or too large"));
    }
    count *= d;
  }
  const int64_t n = c.numel();
  const int64_t bytes = n * element_bytes(type);
  if (t.data_location() == TP::EXTERNAL) {
    LMS_ASSIGN_OR_RETURN(std::string raw, read_external(t, model_dir, bytes));
    fill_from_raw(type, raw, n, c);
  } else if (t.has_raw_data()) {
    if (int64_t(t.raw_data().size()) != bytes) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name(), "': raw_data holds ",
                                                     t.raw_data().size(), " bytes, its dims ",
                                                     bytes));
    }
    fill_from_raw(type, t.raw_data(), n, c);
  } else {
    fill_from_fields(t, c);
    const int64_t got = c.dtype == DType::kFloat32 ? int64_t(c.f->size()) : int64_t(c.i.size());
    if (got != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name(), "': holds ", got, " values, its dims ", n));
    }
  }
  return c;
}

absl::Status load_model(const std::string& path, ::onnx::ModelProto* model) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("ONNX model '", path, "' not found"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  // ParseFromString fails on a cut inside a field; a cut between fields
  // parses, but then the graph is missing or its references dangle, which
  // the importer reports where it finds them.
  if (!model->ParseFromString(bytes) || !model->has_graph() || model->ir_version() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ONNX model '", path, "' (", bytes.size(),
                     " bytes) is not a complete ModelProto: truncated or corrupt"));
  }
  return absl::OkStatus();
}

}  // namespace lms::onnx_import
