// lms-bench ratio: the command line (targets, oversubscription, errors that
// name the flag, the value and what is allowed), the link formula, and one
// small run end to end: a 4-layer, 8-channel VDSR on 32x32 random crops,
// batch 16, against a custom target of 1 TFLOP/s and 100 GB/s, so the
// emulated link is 0.1 B per FLOP of the measured device rate (a few GB/s:
// the run takes under a second), at 2x oversubscription (swap and joint fit,
// recompute-only may not; joint is predicted no slower than any that fits)
// and at 1000x (below any working set: no plan fits, a row, not a failure).
#include "ratio.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench.h"
#include "cli.h"
#include "gtest/gtest.h"

namespace lms::bench {
namespace {

absl::StatusOr<BenchCommand> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "ratio");
  return parse_command_line(args);
}

// The error of `args`, which must contain every word of `words`.
void expect_error(const std::vector<std::string>& args, const std::vector<std::string>& words) {
  auto c = parse(args);
  ASSERT_FALSE(c.ok()) << args.back();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& w : words) {
    EXPECT_NE(c.status().message().find(w), std::string::npos)
        << "'" << w << "' not in: " << c.status().message();
  }
}

TEST(RatioCli, DefaultsAreTheTwoGoalTargetsAndThreeFactors) {
  auto c = parse({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mode, Mode::kRatio);
  EXPECT_EQ(c->ratio_models, (std::vector<std::string>{"vdsr", "unet3d"}));
  ASSERT_EQ(c->targets.size(), 2u);
  EXPECT_EQ(c->targets[0].name, "v100-nvlink2");
  EXPECT_EQ(c->targets[1].name, "h100-pcie5-tc");
  EXPECT_DOUBLE_EQ(c->targets[1].efficiency, 0.5);
  EXPECT_DOUBLE_EQ(c->targets[0].efficiency, 1.0);
  EXPECT_EQ(c->oversubscription, (std::vector<double>{1.5, 2, 4}));
  EXPECT_EQ(c->steps, 5);
  EXPECT_EQ(c->ratio_batch, 8);
  EXPECT_EQ(c->threads, 1);  // Note [Ratio threads]
}

TEST(RatioCli, InputsLargerThanTheHostAreRefusedPerModel) {
  BenchCommand c = *parse({});
  c.ratio_batch = 64;
  // 2 x 64 x 48 x 48 x 4 bytes of VDSR input; the U-Net's 8 x 32^3 x 4 fit.
  EXPECT_TRUE(check_host_memory(c, 2 * 64 * 48 * 48 * 4).ok());
  absl::Status s = check_host_memory(c, 2 * 64 * 48 * 48 * 4 - 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--batch 64"), std::string::npos) << s.message();
  c.ratio_models = {"unet3d"};
  c.ratio_size = 64;
  s = check_host_memory(c, 8 * 64 * 64 * 64 * 4 - 1);
  EXPECT_NE(s.message().find("--size 64"), std::string::npos) << s.message();
}

TEST(RatioCli, PresetsCustomTargetsAndSizes) {
  auto all = parse({"--preset", "all"});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->targets.size(), link_presets().size());

  auto c =
      parse({"--preset=gh200-c2c,v100-pcie3", "--gpu-flops", "60TFLOP/s", "--gpu-link", "50GB/s",
             "--model", "unet3d", "--size", "24", "--batch", "4", "--oversubscription", "1.25,3"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->targets.size(), 3u);
  EXPECT_EQ(c->targets[0].name, "gh200-c2c");
  EXPECT_EQ(c->targets[1].name, "v100-pcie3");
  EXPECT_EQ(c->targets[2].name, "custom");
  EXPECT_DOUBLE_EQ(c->targets[2].gpu_flops_per_s, 60e12);
  EXPECT_DOUBLE_EQ(c->targets[2].link_bytes_per_s, 50e9);
  EXPECT_EQ(c->ratio_models, std::vector<std::string>{"unet3d"});
  EXPECT_EQ(c->ratio_size, 24);
  EXPECT_EQ(c->ratio_batch, 4);
  EXPECT_EQ(c->oversubscription, (std::vector<double>{1.25, 3}));

  auto tc = parse({"--preset", "h100-pcie5-tc,gh200-c2c,h200-pcie5-tc,gh200-c2c-tc",
                   "--gpu-efficiency", "0.25"});
  ASSERT_TRUE(tc.ok()) << tc.status();
  ASSERT_EQ(tc->targets.size(), 4u);
  for (const LinkPreset& t : tc->targets) EXPECT_DOUBLE_EQ(t.efficiency, 0.25) << t.name;
  EXPECT_DOUBLE_EQ(tc->targets[0].gpu_flops_per_s, 495e12);
  EXPECT_DOUBLE_EQ(tc->targets[3].link_bytes_per_s, 350e9);

  auto r = parse({"--link-ratio", "7.5e-4"});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->targets.size(), 1u);
  EXPECT_DOUBLE_EQ(throttled_link_bytes_per_s(100e9, r->targets[0]), 100e9 * 7.5e-4);
}

TEST(RatioCli, BadFlagsNameTheFlagTheValueAndWhatIsAllowed) {
  expect_error({"--preset", "h100-pcie5,a100"},
               {"--preset: bad value 'h100-pcie5,a100'", "unknown preset 'a100'", "gh200-c2c"});
  expect_error({"--gpu-flops", "60"}, {"--gpu-flops: bad value '60'", "TFLOP/s"});
  expect_error({"--gpu-flops", "60TFLOP/s"}, {"--gpu-flops", "--gpu-link"});
  expect_error({"--gpu-link", "fast"}, {"--gpu-link", "fast"});
  expect_error({"--gpu-flops", "1TFLOP/s", "--gpu-link", "1GB/s", "--link-ratio", "1e-3"},
               {"--link-ratio", "--gpu-flops"});
  expect_error({"--link-ratio", "0"}, {"--link-ratio: bad value '0'", "bytes per FLOP"});
  expect_error({"--gpu-efficiency", "1.5"}, {"--gpu-efficiency: bad value '1.5'", "(0, 1]"});
  expect_error({"--gpu-efficiency", "0"}, {"--gpu-efficiency: bad value '0'", "(0, 1]"});
  expect_error({"--oversubscription", "1,2"},
               {"--oversubscription: bad value '1,2'", "numbers > 1"});
  expect_error({"--model", "vdsr,resnet"},
               {"--model: bad value 'vdsr,resnet'", "'resnet'", "vdsr, unet3d and one FILE.onnx"});
  expect_error({"--model", "a.onnx,b.onnx"},
               {"--model: bad value 'a.onnx,b.onnx'", "one ONNX model per run"});
  expect_error({"--model", "gpt.onnx"}, {"--input", "--loss", "ids:4,T"});
  expect_error({"--batch", "4,8"}, {"--batch: bad value '4,8'", "an integer from 1 to"});
  // The link and the capacity are ratio's own (--preset, --oversubscription).
  expect_error({"--link", "1GB/s"}, {"not expected", "--link"});
  expect_error({"--capacity", "1GiB"}, {"not expected", "--capacity"});
}

TEST(Ratio, FlopRatesAndTheLinkFormula) {
  EXPECT_DOUBLE_EQ(*parse_flop_rate("60TFLOP/s"), 60e12);
  EXPECT_DOUBLE_EQ(*parse_flop_rate("105GFLOP/s"), 105e9);
  EXPECT_DOUBLE_EQ(*parse_flop_rate("1.5PFLOP/s"), 1.5e15);
  EXPECT_FALSE(parse_flop_rate("-1TFLOP/s").ok());
  EXPECT_FALSE(parse_flop_rate("1TB/s").ok());
  // 105 GFLOP/s (a full CPU of this kind) on the H100 + PCIe Gen5 ratio.
  const LinkPreset h100 = *std::find_if(link_presets().begin(), link_presets().end(),
                                        [](const LinkPreset& p) { return p.name == "h100-pcie5"; });
  EXPECT_NEAR(throttled_link_bytes_per_s(105e9, h100), 105e9 * 50e9 / 67e12, 1);
  // Tensor cores at half their dense TF32 peak: 247.5 TFLOP/s achieved.
  const LinkPreset h100_tc =
      *std::find_if(link_presets().begin(), link_presets().end(),
                    [](const LinkPreset& p) { return p.name == "h100-pcie5-tc"; });
  EXPECT_NEAR(throttled_link_bytes_per_s(105e9, h100_tc), 105e9 * 50e9 / (495e12 * 0.5), 1);
}

TEST(Ratio, TinyRunThrottlesToTheMeasuredRateAndPrintsEveryPlan) {
  const std::string json_path =
      (std::filesystem::temp_directory_path() / "lms_ratio_test.json").string();
  std::ostringstream out, err;
  const int rc = run_main({"ratio",    "--model",    "vdsr",    "--depth",
                           "4",        "--channels", "8",       "--crop",
                           "32",       "--batch",    "16",      "--gpu-flops",
                           "1TFLOP/s", "--gpu-link", "100GB/s", "--oversubscription",
                           "2,1000",   "--steps",    "5",       "--json",
                           json_path},
                          out, err);
  std::printf("%s", out.str().c_str());
  ASSERT_EQ(rc, 0) << err.str();
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::filesystem::remove(json_path);
  ASSERT_EQ(j["models"].size(), 1u);
  const nlohmann::json& m = j["models"][0];
  const double flops = m["device_flops_per_s"];
  const uint64_t peak = m["no_lms_peak_bytes"];
  EXPECT_GT(flops, 1e8);  // any CPU core convolves faster than 0.1 GFLOP/s
  ASSERT_EQ(m["targets"].size(), 1u);
  const nlohmann::json& t = m["targets"][0];
  EXPECT_DOUBLE_EQ(t["throttle_bytes_per_s"].get<double>(), flops * 100e9 / 1e12);
  EXPECT_GT(t["ideal_step_s"].get<double>(), 0);
  ASSERT_EQ(t["budgets"].size(), 2u);

  const nlohmann::json& two = t["budgets"][0];
  const uint64_t cap = two["capacity_bytes"];
  EXPECT_LE(cap, peak / 2);
  EXPECT_GT(cap + (64 << 10), peak / 2);
  EXPECT_EQ(cap % (64 << 10), 0u);
  ASSERT_EQ(two["runs"].size(), 3u);
  // Swapping fits at 2x; recompute-only may not (a row saying so).
  ASSERT_TRUE(two["runs"][0]["fits"].get<bool>()) << two["runs"][0]["status"];
  ASSERT_TRUE(two["runs"][2]["fits"].get<bool>()) << two["runs"][2]["status"];
  for (const nlohmann::json& run : two["runs"]) {
    if (!run["fits"].get<bool>()) {
      EXPECT_EQ(run["status"].get<std::string>().rfind("does not fit: ", 0), 0u);
      continue;
    }
    const double rel = run["relative"];
    EXPECT_GT(rel, 0) << run["plan"];
    EXPECT_LE(rel, 1.5) << run["plan"];
    EXPECT_NEAR(rel, t["ideal_step_s"].get<double>() / run["step_s"].get<double>(), 1e-9);
    EXPECT_GT(run["predicted_step_s"].get<double>(), 0);
    EXPECT_NEAR(run["predicted_relative"].get<double>(),
                t["ideal_predicted_step_s"].get<double>() / run["predicted_step_s"].get<double>(),
                1e-9);
    // Half the peak must be swapped or recomputed, by the plan's own means.
    const uint64_t swapped = run["swapped_tensors"], recomputed = run["recomputed_tensors"];
    EXPECT_GT(swapped + recomputed, 0u) << run["plan"];
    if (run["plan"] == "swap") {
      EXPECT_EQ(recomputed, 0u);
    }
    if (run["plan"] == "recompute") {
      EXPECT_EQ(swapped, 0u);
    }
    EXPECT_EQ(run["bytes_d2h_per_step"].get<uint64_t>() > 0, swapped > 0) << run["plan"];
  }
  // Joint keeps the fastest predicted plan of the three kinds that fits.
  const nlohmann::json& joint = two["runs"][2];
  EXPECT_EQ(joint["plan"], "joint");
  // Where it ran the very plan of a single-kind row, it reports that row's
  // measurement (Note [Same plan, one measurement]).
  const std::string same_as = joint["same_as"];
  std::printf("joint same_as '%s'\n", same_as.c_str());
  for (const nlohmann::json& run : two["runs"]) {
    if (run["plan"] != same_as) continue;
    EXPECT_EQ(joint["step_s"].get<double>(), run["step_s"].get<double>());
    EXPECT_EQ(joint["bytes_d2h_per_step"], run["bytes_d2h_per_step"]);
    EXPECT_EQ(joint["swapped_tensors"], run["swapped_tensors"]);
    EXPECT_EQ(joint["recomputed_tensors"], run["recomputed_tensors"]);
    EXPECT_DOUBLE_EQ(joint["predicted_step_s"].get<double>(),
                     run["predicted_step_s"].get<double>());
  }
  for (const nlohmann::json& run : two["runs"]) {
    if (run["fits"].get<bool>()) {
      EXPECT_LE(joint["predicted_step_s"].get<double>(),
                run["predicted_step_s"].get<double>() + 1e-12)
          << run["plan"];
    }
  }

  for (const nlohmann::json& run : t["budgets"][1]["runs"]) {
    EXPECT_FALSE(run["fits"].get<bool>());
    EXPECT_EQ(run["status"].get<std::string>().rfind("does not fit: ", 0), 0u) << run["status"];
  }
  const std::string text = out.str();
  EXPECT_NE(text.find("does not fit: "), std::string::npos) << text;
  EXPECT_NE(text.find("link throttled to"), std::string::npos) << text;
  ASSERT_EQ(j["goals"].size(), 4u);
  // Neither goal target was run; the joint goal and the prediction goal
  // were, and are PASS or FAIL.
  EXPECT_FALSE(j["goals"][0]["evaluated"].get<bool>());
  EXPECT_FALSE(j["goals"][1]["evaluated"].get<bool>());
  EXPECT_TRUE(j["goals"][2]["evaluated"].get<bool>());
  EXPECT_TRUE(j["goals"][3]["evaluated"].get<bool>());
  for (const nlohmann::json& g : j["goals"]) {
    EXPECT_NE(text.find(g["text"].get<std::string>()), std::string::npos) << g["text"];
  }
}

TEST(Ratio, OptionsOutsideTheirRangesAreRefused) {
  auto f = vdsr_factory({.depth = 2, .channels = 4, .crop = 8, .seed = 1}, nullptr);
  ASSERT_TRUE(f.ok()) << f.status();
  std::ostringstream log;
  EXPECT_EQ(run_ratio(*f, {.steps = 1}, log).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run_ratio(*f, {.oversubscription = {0.5}}, log).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run_ratio(*f, {.targets = {}}, log).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lms::bench
