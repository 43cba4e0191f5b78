// Numerical references from PyTorch for the op tests: the inputs are written
// to a file, torch/reference.py (run by /usr/bin/python3) computes the op's
// output, the mse loss against a target and the gradients of the loss, and
// the results are read back. Unavailable when python3 or torch is missing
// (the caller skips with that reason).
//
//   TorchTensors in = {{"x", {{2, 3}, xs}}, {"w", {{4, 3}, ws}}, {"target", ...}};
//   absl::StatusOr<TorchTensors> ref = torch_reference("linear", {{"trans_b", {1}}}, in);
//   ref->at("x/grad").values ...
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lms/types.h"

namespace lms::torch_ref {

struct TorchTensor {
  Shape shape;
  std::vector<float> values;
};
using TorchTensors = std::map<std::string, TorchTensor>;

// From the source tree's root (LMS_SOURCE_DIR, set by tests/public's CMake),
// not from __FILE__, which a compiler cache may have made relative.
inline std::filesystem::path script_path() {
  return std::filesystem::path(LMS_SOURCE_DIR) / "tests" / "public" / "torch" / "reference.py";
}

inline void write_tensors(std::ostream& out, const TorchTensors& tensors) {
  char buf[32];
  for (const auto& [name, t] : tensors) {
    out << "tensor " << name << " " << t.shape.size();
    for (int64_t d : t.shape) out << " " << d;
    for (float v : t.values) {
      std::snprintf(buf, sizeof(buf), " %.9g", static_cast<double>(v));
      out << buf;
    }
    out << "\n";
  }
}

inline absl::StatusOr<TorchTensors> read_tensors(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return absl::InternalError("cannot read " + path.string());
  TorchTensors result;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string tag, name;
    size_t rank = 0;
    words >> tag >> name >> rank;
    if (tag != "tensor") return absl::InternalError("bad line in " + path.string());
    TorchTensor t;
    t.shape.resize(rank);
    for (int64_t& d : t.shape) words >> d;
    t.values.reserve(static_cast<size_t>(num_elements(t.shape)));
    // strtof, not >>: ">>" refuses "inf", "nan" and subnormals.
    std::string v;
    while (words >> v) t.values.push_back(std::strtof(v.c_str(), nullptr));
    result[name] = std::move(t);
  }
  return result;
}

using TorchAttrs = std::map<std::string, std::vector<double>>;

// Runs `op` of torch/reference.py on `inputs` with attributes (lists of
// numbers; integer ones are read back as int).
inline absl::StatusOr<TorchTensors> torch_reference(const std::string& op, const TorchAttrs& attrs,
                                                    const TorchTensors& inputs) {
  std::string dir_template =
      (std::filesystem::temp_directory_path() / "lms_torch_ref.XXXXXX").string();
  if (mkdtemp(dir_template.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::filesystem::path dir(dir_template);
  {
    std::ofstream in(dir / "in.txt");
    in << "op " << op << "\n";
    for (const auto& [key, values] : attrs) {
      in << "attr " << key;
      char buf[32];
      for (double v : values) {
        std::snprintf(buf, sizeof(buf), " %.17g", v);
        in << buf;
      }
      in << "\n";
    }
    write_tensors(in, inputs);
  }
  const std::string command = "/usr/bin/python3 " + script_path().string() + " " +
                              (dir / "in.txt").string() + " " + (dir / "out.txt").string();
  const int status = std::system(command.c_str());
  absl::StatusOr<TorchTensors> result = absl::UnavailableError(
      "/usr/bin/python3 with torch is needed for the PyTorch reference (" + command + ")");
  if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    result = read_tensors(dir / "out.txt");
  } else if (!(WIFEXITED(status) && (WEXITSTATUS(status) == 77 || WEXITSTATUS(status) == 127))) {
    result = absl::InternalError("failed: " + command);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return result;
}

// "[2,3,4]"
inline std::string shape_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

// ||got - want||_2 / ||want||_2 (0 when both are zero).
inline double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  if (got.size() != want.size()) return 1e300;
  return norm == 0 ? (diff == 0 ? 0 : 1e300) : std::sqrt(diff / norm);
}

// n values uniform in [-scale, scale) from `gen` (seeded and printed by the
// test).
inline std::vector<float> random_values(int64_t n, std::mt19937_64& gen, float scale = 1.0f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(gen);
  return v;
}

}  // namespace lms::torch_ref
