// Importing a GPT-2-style decoder (scripts/gpt_model.py, exported at test
// time by Debian's /usr/bin/python3; skipped, saying why, without torch) at
// T = 16,384 tokens, the length of its position table: each block's causal
// mask, computed from the positions, is recognised without being folded
// (Note [Causal mask from positions]), so the import makes one causal
// attention op per block and no [T,T] value. A [T,T] float constant would
// be 1 GiB here (the folded comparison, int64, 2 GiB), so the import's peak
// resident memory, which must stay under kMaxImportBytes, tells the two
// apart by a wide margin (a folded mask per block made 9 GiB here).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <variant>

#include "lms/onnx.h"

namespace lms {
namespace {

constexpr int64_t kLayers = 2;
constexpr int64_t kContext = 16384;
// Parameters (about 2.5 MB), the file and the graph: well under this; one
// [T,T] float constant is four times as much. Under a sanitizer, whose
// redzones and quarantine (freed blocks not reused) add to the resident
// size, the bound is 768 MiB, still below one folded mask.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(LMS_SANITIZER_RUNTIME)
constexpr int64_t kMaxImportBytes = int64_t{768} << 20;
#else
constexpr int64_t kMaxImportBytes = int64_t{256} << 20;
#endif

// Exports the model into a fresh folder and returns the file; empty when
// /usr/bin/python3 cannot.
std::string export_gpt(std::filesystem::path* dir) {
  std::string d = (std::filesystem::temp_directory_path() / "lms_long_gpt.XXXXXX").string();
  if (mkdtemp(d.data()) == nullptr) return "";
  *dir = d;
  const std::string model = d + "/gpt.onnx";
  const std::string command =
      "/usr/bin/python3 " + std::string(LMS_SOURCE_DIR) + "/scripts/gpt_model.py " + model +
      " --layers " + std::to_string(kLayers) + " --width 32 --heads 2 --vocab 64 --context " +
      std::to_string(kContext) + " --seed 3 > /dev/null 2>&1";
  return std::system(command.c_str()) == 0 ? model : "";
}

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"); nullopt when
// unreadable.
std::optional<int64_t> status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string key;
  int64_t kib = 0;
  while (in >> key) {
    if (key == field + ":" && in >> kib) return kib * 1024;
    std::getline(in, key);
  }
  return std::nullopt;
}

// Resets the peak resident size VmHWM to the current one (Linux 4.0 on);
// false when the kernel does not allow it.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good();
}

int64_t max_rss_bytes() {
  struct rusage u = {};
  getrusage(RUSAGE_SELF, &u);
  return int64_t{u.ru_maxrss} * 1024;
}

TEST(LongContextImport, CausalMasksFromPositionsMakeNoTxTValue) {
  std::filesystem::path dir;
  const std::string model = export_gpt(&dir);
  if (model.empty()) {
    if (!dir.empty()) std::filesystem::remove_all(dir);
    GTEST_SKIP() << "/usr/bin/python3 with torch and onnx is needed to export the model";
  }
  // The import's own peak: from VmHWM reset now, else (clear_refs not
  // writable) from getrusage's lifetime peak, which can only under-count
  // if an earlier peak in this process was higher.
  const bool reset = reset_peak_rss();
  const int64_t before = reset ? status_bytes("VmRSS").value_or(0) : max_rss_bytes();
  const auto start = std::chrono::steady_clock::now();
  auto m = import_onnx(model, {.input_shapes = {{"ids", {1, kContext}}}});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t peak = reset ? status_bytes("VmHWM").value_or(0) : max_rss_bytes();
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  std::printf("import at T = %lld: %.3f s, peak resident +%.1f MiB (%s)\n",
              static_cast<long long>(kContext), seconds, double(peak - before) / (1 << 20),
              reset ? "VmHWM after clear_refs" : "getrusage max RSS");
  EXPECT_LT(peak - before, kMaxImportBytes);

  const Graph& g = m->graph;
  int attention = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.op != OpKind::kAttention) continue;
    ++attention;
    EXPECT_EQ(std::get<int64_t>(n.attrs.at("causal")), 1) << n.name;
    EXPECT_EQ(g.tensor(n.inputs[0]).shape[2], kContext) << n.name;
  }
  EXPECT_EQ(attention, kLayers);
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    int64_t numel = 1;
    for (int64_t d : g.tensor(t).shape) numel *= d;
    EXPECT_LT(numel, kContext * kContext) << g.tensor(t).name;
  }
}

}  // namespace
}  // namespace lms
