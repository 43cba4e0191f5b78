// The PyTorch references of the ONNX tests (tests/onnx/make_*.py): one line
// per tensor, "name count v1 v2 ...", '#' lines are comments; and, for
// models whose references are too large for text, the binary format of
// make_torchvision_reference.py (read_binary_reference).
#pragma once

#include <stdlib.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace lms::onnx_test {

inline std::string data_dir() { return LMS_SOURCE_DIR "/tests/data/onnx"; }

// What run_fixture_script made: the folder it wrote into, or why not.
struct ScriptFixture {
  std::string dir;      // empty when the script could not run
  std::string why;      // then: why
  bool failed = false;  // the script ran and failed (not: torch or onnx missing)
};

// Runs tests/onnx/`script` with Debian's /usr/bin/python3 into a fresh
// folder (a model and its PyTorch reference, written at test time). Exit 77
// (torch or onnx missing) or a missing python3 leaves dir empty, not failed:
// the caller skips, saying why.
inline ScriptFixture run_fixture_script(const std::string& script) {
  ScriptFixture f;
  std::string dir = (std::filesystem::temp_directory_path() / "lms_fixture.XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    f.why = "mkdtemp failed";
    f.failed = true;
    return f;
  }
  const std::string command =
      "/usr/bin/python3 " + std::string(LMS_SOURCE_DIR) + "/tests/onnx/" + script + " " + dir;
  const int status = std::system(command.c_str());
  if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    f.dir = dir;
    return f;
  }
  f.why = "/usr/bin/python3 with torch and onnx is needed to write the model (" + command + ")";
  f.failed = !(WIFEXITED(status) && (WEXITSTATUS(status) == 77 || WEXITSTATUS(status) == 127));
  if (f.failed) f.why = "failed: " + command;
  return f;
}

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

// The binary reference of make_torchvision_reference.py: ASCII header lines
// ("lms-reference 1", '#' comments, "<name> <f32|i64> <count>" per tensor,
// "data"), then each tensor's values, little-endian, in header order.
struct BinaryReference {
  std::map<std::string, std::vector<float>> f32;
  std::map<std::string, std::vector<int64_t>> i64;
  std::string error;  // empty when the file was read whole
};

inline BinaryReference read_binary_reference(const std::string& path) {
  BinaryReference out;
  std::ifstream in(path, std::ios::binary);
  std::string line;
  if (!in || !std::getline(in, line) || line != "lms-reference 1") {
    out.error = path + ": not an lms-reference 1 file";
    return out;
  }
  struct Entry {
    std::string name, kind;
    size_t count = 0;
  };
  std::vector<Entry> entries;
  while (std::getline(in, line) && line != "data") {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    Entry e;
    s >> e.name >> e.kind >> e.count;
    entries.push_back(e);
  }
  // The data are little-endian, as on every machine lms builds for.
  for (const Entry& e : entries) {
    char* data = nullptr;
    size_t bytes = 0;
    if (e.kind == "f32") {
      std::vector<float>& v = out.f32[e.name];
      v.resize(e.count);
      data = reinterpret_cast<char*>(v.data());
      bytes = e.count * sizeof(float);
    } else if (e.kind == "i64") {
      std::vector<int64_t>& v = out.i64[e.name];
      v.resize(e.count);
      data = reinterpret_cast<char*>(v.data());
      bytes = e.count * sizeof(int64_t);
    } else {
      out.error = path + ": tensor " + e.name + " of unknown kind " + e.kind;
      return out;
    }
    if (!in.read(data, static_cast<std::streamsize>(bytes))) {
      out.error = path + ": truncated at tensor " + e.name;
      return out;
    }
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
