// lms-bench onnx (bench/lms_bench/onnx_model.h) on a model a user brings: the
// small PyTorch classifier of tests/onnx/make_classifier_fixture.py (grouped
// and depthwise convolutions, batch norm, ReLU6, pooling, linear layers),
// exported with scripts/export_onnx.py; and host memory running out during
// a run (Note [Host memory at import]): a message and exit status 1.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../common/capped_child.h"
#include "bench.h"
#include "cli.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "onnx_model.h"

namespace lms::bench {
namespace {

const std::string kModel = std::string(LMS_SOURCE_DIR) + "/tests/data/onnx/classifier_small.onnx";

// ones_like.onnx (tests/onnx/make_error_fixtures.py) folds ones of its
// input's shape: 4 GiB at batch 32768, in a child whose address space may
// grow by 1 GiB (no cap under sanitizers: skipped there).
TEST(OnnxBench, HostMemoryRunningOutIsAMessageAndExitStatus1) {
  if (!testing_support::kCapAddressSpace) {
    GTEST_SKIP() << "a sanitizer runtime reserves terabytes of address space: no cap applies";
  }
  const std::string model = std::string(LMS_SOURCE_DIR) + "/tests/data/onnx/errors/ones_like.onnx";
  const testing_support::ChildResult r = testing_support::run_capped(
      [&] {
        std::ostringstream out, err;
        const int rc = run_main({"onnx", "--model", model, "--input", "x:B,32768", "--loss", "mse",
                                 "--batch", "32768", "--steps", "1"},
                                out, err);
        return std::to_string(rc) + " " + err.str();
      },
      rlim_t{1} << 30, /*above_current=*/true);
  std::printf("child: %s\n", r.text.c_str());
  ASSERT_TRUE(r.exited) << "lms-bench died instead of saying host memory ran out: " << r.text;
  EXPECT_EQ(r.text.substr(0, 2), "1 ") << r.text;
  EXPECT_NE(r.text.find("host memory ran out while visiting the nodes, at node 'ones'"),
            std::string::npos)
      << r.text;
}

TEST(OnnxBench, InputAndLossFlagsParse) {
  auto in = parse_onnx_input("input:B,3,224,224");
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->name, "input");
  EXPECT_EQ(in->shape, (Shape{1, 3, 224, 224}));
  EXPECT_EQ(in->batch_axis, 0);
  auto tokens = parse_onnx_input("ids:16,B");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->batch_axis, 1);
  EXPECT_FALSE(tokens->context);
  // T: the context the sweep sets, at a fixed batch.
  auto context = parse_onnx_input("ids:4,T");
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ(context->shape, (Shape{4, 1}));
  EXPECT_EQ(context->batch_axis, 1);
  EXPECT_TRUE(context->context);
  auto ce = parse_onnx_loss("cross-entropy:1000");
  ASSERT_TRUE(ce.ok()) << ce.status();
  EXPECT_EQ(ce->classes, 1000);
  ASSERT_TRUE(parse_onnx_loss("mse").ok());
  struct Bad {
    std::string text;
    std::string says;
  };
  for (const Bad& b : std::vector<Bad>{{"input", "no NAME:"},
                                       {"input:3,224,224", "0 dimensions are B"},
                                       {"input:B,B,3", "2 dimensions are B"},
                                       {"ids:B,T", "2 dimensions are B or T"},
                                       {"input:B,0,3", "dimension '0'"},
                                       {"input:B,x", "dimension 'x'"}}) {
    auto s = parse_onnx_input(b.text);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << b.text;
    EXPECT_NE(s.status().message().find(b.says), std::string::npos) << s.status();
  }
  for (const char* bad : {"cross-entropy", "cross-entropy:1", "cross-entropy:x", "l1"}) {
    auto s = parse_onnx_loss(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.status().message().find("cross-entropy:C"), std::string::npos) << s.status();
  }
}

TEST(OnnxBench, BadModelsAndFlagsAreClearErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"onnx", "--input", "input:B,3,8,8", "--loss", "mse"}, "needs --model"},
      {{"onnx", "--model", kModel, "--input", "input:3,8,8", "--loss", "mse"}, "dimensions are B"},
      {{"onnx", "--model", kModel, "--input", "input:B,3,8,8", "--loss", "hinge"},
       "cross-entropy:C"},
      {{"onnx", "--model", "/nonexistent/m.onnx", "--input", "input:B,3,8,8", "--loss", "mse"},
       "m.onnx"},
      {{"onnx", "--model", kModel, "--input", "image:B,3,8,8", "--loss", "mse"}, "image"},
      {{"onnx", "--model", kModel, "--input", "input:B,3,8,8", "--loss", "cross-entropy:7"},
       "logits [N, 7]"},
  };
  for (const Case& c : cases) {
    std::ostringstream out, err;
    EXPECT_NE(run_main(c.args, out, err), 0) << c.args.back();
    EXPECT_NE(err.str().find(c.says), std::string::npos) << err.str();
  }
}

// The sweep trains the imported classifier with LMS where the device runs
// out without it: at batch 512 under a capacity between its working-set
// limit (about 6 MiB) and its no-LMS peak (about 15 MiB) the LMS row runs and
// its peak is the planned one; at batch 4 the LMS row's losses are the
// no-LMS row's, bit for bit.
TEST(OnnxBench, LmsTrainsAnImportedClassifierWhereTheDeviceRunsOutWithoutIt) {
  const std::string dir = (std::filesystem::temp_directory_path() / "lms_onnx_bench").string();
  std::filesystem::create_directories(dir);
  const std::string json = dir + "/onnx.json";
  std::printf("seed 3\n");
  std::ostringstream out, err;
  const int rc = run_main({"onnx", "--model", kModel, "--input", "input:B,3,8,8", "--loss",
                           "cross-entropy:10", "--batch", "4,512", "--capacity", "10MiB",
                           "--threads", "1", "--steps", "2", "--seed", "3", "--json", json},
                          out, err);
  ASSERT_EQ(rc, 0) << err.str();
  std::printf("%s", out.str().c_str());
  std::ifstream in(json);
  auto j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["model"], "onnx");
  ASSERT_EQ(j["rows"].size(), 4u);
  const auto& small_off = j["rows"][0];
  const auto& small_on = j["rows"][1];
  const auto& big_off = j["rows"][2];
  const auto& big_on = j["rows"][3];
  EXPECT_EQ(small_off["size"], 4);
  ASSERT_EQ(small_off["ok"], true) << small_off.dump();
  ASSERT_EQ(small_on["ok"], true) << small_on.dump();
  EXPECT_EQ(small_off["losses"], small_on["losses"]);
  EXPECT_EQ(big_off["size"], 512);
  EXPECT_EQ(big_off["ok"], false) << big_off.dump();
  ASSERT_EQ(big_on["ok"], true) << big_on.dump();
  EXPECT_GT(big_on["swapped_tensors"].get<int64_t>() + big_on["recomputed_tensors"].get<int64_t>(),
            0);
  EXPECT_EQ(big_on["peak_device_bytes"], big_on["predicted_peak_after_bytes"]);
  // The searched limits: LMS trains a larger batch than the device holds
  // without it, confirmed by real steps.
  EXPECT_GT(j["search"]["lms_max"].get<int64_t>(), j["search"]["no_lms_max"].get<int64_t>());
  EXPECT_GE(j["search"]["no_lms_max"].get<int64_t>(), 4);
  std::filesystem::remove_all(dir);
}

// A context-length sweep of a GPT-2-style decoder (scripts/gpt_model.py,
// exported at test time by Debian's /usr/bin/python3, 4 layers, width 32)
// fed token ids: --input ids:2,T sweeps T at batch 2. At the longest
// context the LMS row trains where the row without LMS runs out, at the
// planned peak, and the search finds a longer context with LMS than
// without. Skips without torch.
TEST(OnnxBench, ContextSweepOfAnImportedDecoder) {
  const std::string dir = (std::filesystem::temp_directory_path() / "lms_onnx_ctx").string();
  std::filesystem::create_directories(dir);
  const std::string model = dir + "/gpt.onnx";
  const std::string command = "/usr/bin/python3 " + std::string(LMS_SOURCE_DIR) +
                              "/scripts/gpt_model.py " + model +
                              " --layers 4 --width 32 --heads 2 --vocab 64 --context 512 "
                              "--seed 6 > /dev/null 2>&1";
  if (std::system(command.c_str()) != 0) {
    GTEST_SKIP() << "/usr/bin/python3 with torch and onnx is needed to export the model";
  }
  const std::string json = dir + "/ctx.json";
  std::printf("seed 6\n");
  std::ostringstream out, err;
  const int rc = run_main({"onnx", "--model", model, "--input", "ids:2,T", "--loss",
                           "cross-entropy:64", "--batch", "16,512", "--capacity", "6MiB",
                           "--threads", "1", "--steps", "2", "--seed", "6", "--json", json},
                          out, err);
  ASSERT_EQ(rc, 0) << err.str();
  std::printf("%s", out.str().c_str());
  EXPECT_NE(out.str().find("largest context with LMS"), std::string::npos);
  std::ifstream in(json);
  auto j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["size_label"], "context");
  ASSERT_EQ(j["rows"].size(), 4u);
  const auto& short_off = j["rows"][0];
  const auto& short_on = j["rows"][1];
  const auto& long_off = j["rows"][2];
  const auto& long_on = j["rows"][3];
  ASSERT_EQ(short_off["ok"], true) << short_off.dump();
  ASSERT_EQ(short_on["ok"], true) << short_on.dump();
  EXPECT_EQ(short_off["losses"], short_on["losses"]);
  EXPECT_EQ(long_off["size"], 512);
  EXPECT_EQ(long_off["ok"], false) << long_off.dump();
  ASSERT_EQ(long_on["ok"], true) << long_on.dump();
  EXPECT_EQ(long_on["peak_device_bytes"], long_on["predicted_peak_after_bytes"]);
  EXPECT_GT(j["search"]["lms_max"].get<int64_t>(), j["search"]["no_lms_max"].get<int64_t>());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lms::bench
