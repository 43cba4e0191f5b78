// The PyTorch references of the ONNX tests (tests/onnx/make_*.py): one line
// per tensor, "name count v1 v2 ...", '#' lines are comments.
#pragma once

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace lms::onnx_test {

inline std::string data_dir() { return std::string(LMS_SOURCE_DIR) + "/tests/data/onnx"; }

inline std::map<std::string, std::vector<float>> read_reference(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string name;
    size_t n = 0;
    s >> name >> n;
    std::vector<float>& v = out[name];
    v.resize(n);
    for (float& x : v) s >> x;
  }
  return out;
}

// ||a - b|| / ||b||, in double; infinity for a size mismatch.
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    num += (double(a[k]) - b[k]) * (double(a[k]) - b[k]);
    den += double(b[k]) * b[k];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace lms::onnx_test
