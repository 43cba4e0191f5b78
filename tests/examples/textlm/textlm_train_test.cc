// The textlm example end to end (examples/textlm/textlm_train.h): a small
// GPT-2-style decoder written in PyTorch (scripts/gpt_model.py), exported at
// test time by Debian's /usr/bin/python3, imported and trained on real
// English text (this repository's docs/design.md, so that the test needs no
// download) with LMS under a device smaller than its step needs. The example
// itself trains the same steps without LMS and compares the bits. Skips with
// the reason without torch.
#include "textlm_train.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace lms::examples {
namespace {

constexpr uint64_t kSeed = 3;

std::string export_model(const std::string& name, int64_t context) {
  const std::string model = (std::filesystem::temp_directory_path() / name).string();
  const std::string command =
      "/usr/bin/python3 " + std::string(LMS_SOURCE_DIR) + "/scripts/gpt_model.py " + model +
      " --layers 1 --width 32 --heads 2 --vocab 256 --context " + std::to_string(context) +
      " --seed " + std::to_string(kSeed) + " > /dev/null 2>&1";
  return std::system(command.c_str()) == 0 ? model : "";
}

TEST(TextLmTrain, LmsTrainsTheImportedDecoderBitIdenticallyAndTheHeldOutLossFalls) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  const std::string model = export_model("lms_textlm_tiny.onnx", 32);
  if (model.empty()) {
    GTEST_SKIP() << "/usr/bin/python3 with torch and onnx is needed to export the model";
  }
  TextLmOptions o{.data = std::string(LMS_SOURCE_DIR) + "/docs/design.md",
                  .model = model,
                  .held_out_fraction = 0.1,
                  .batch = 8,
                  .context = 32,
                  .steps = 40,
                  .lr = 3e-3,
                  .eval_every = 20,
                  .eval_windows = 16,
                  .threads = 1,
                  .seed = kSeed,
                  .compare_without_lms = false};
  o.capacity_bytes = uint64_t{1} << 30;
  o.steps = 1;
  std::ostringstream probe_log;
  auto probe = train_text_lm(o, probe_log);
  ASSERT_TRUE(probe.ok()) << probe.status() << "\n" << probe_log.str();
  // A device between the step's working set and its peak: LMS is needed.
  o.capacity_bytes = probe->no_lms_peak_bytes * 3 / 4;
  o.steps = 40;
  o.compare_without_lms = true;
  std::ostringstream log;
  auto r = train_text_lm(o, log);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << log.str();
  std::printf("%s", log.str().c_str());
  EXPECT_GT(r->no_lms_peak_bytes, o.capacity_bytes);
  EXPECT_LE(r->lms_peak_bytes, o.capacity_bytes);
  EXPECT_GT(r->swapped + r->recomputed, 0);
  ASSERT_EQ(r->losses.size(), 40u);
  ASSERT_EQ(r->held_out_bits.size(), 3u);  // before, after 20 and after 40 steps
  EXPECT_TRUE(r->compared);
  EXPECT_TRUE(r->bit_identical);
  // It learns: from about 8 bits (a uniform guess over 256 bytes) to well
  // under it.
  EXPECT_GT(r->held_out_bits.front().second, 7.0);
  EXPECT_LT(r->held_out_bits.back().second, r->held_out_bits.front().second - 1.0);
  std::filesystem::remove(model);
}

TEST(TextLmTrain, ErrorsNameTheFileOrTheShape) {
  TextLmOptions o{.data = "/nonexistent/kjv.txt", .model = "/nonexistent/m.onnx"};
  std::ostringstream log;
  auto missing = train_text_lm(o, log);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("kjv.txt"), std::string::npos) << missing.status();

  // A context beyond the exported position table (16): the import fails
  // naming a node or the shape, before any step.
  const std::string model = export_model("lms_textlm_short.onnx", 16);
  if (model.empty()) GTEST_SKIP() << "/usr/bin/python3 with torch and onnx is needed";
  o.data = std::string(LMS_SOURCE_DIR) + "/docs/design.md";
  o.model = model;
  o.context = 32;
  o.batch = 2;
  auto too_long = train_text_lm(o, log);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument) << too_long.status();
  const std::string message(too_long.status().message());
  std::printf("context 32 on a 16-position model: %s\n", message.c_str());
  // The error names the position table, what was asked of it and what it
  // holds.
  EXPECT_NE(message.find("a Slice of 'pos' [16,32] to 32 along axis 0, which has only 16"),
            std::string::npos);
  EXPECT_NE(message.find("position table"), std::string::npos);
  std::filesystem::remove(model);
}

}  // namespace
}  // namespace lms::examples
