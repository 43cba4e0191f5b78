// The VDSR example: data pipeline, command line, training with and without
// LMS (bit-identical), resume from a checkpoint, evaluation, and errors.
// Data: tests/data/astronaut_crop128.png (a real photo) plus one synthetic
// image written by the test, so nothing needs the network.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cli.h"
#include "dataset.h"
#include "evaluate.h"
#include "lms/device.h"
#include "lms/io/checkpoint.h"
#include "lms/io/image.h"
#include "program_cli.h"
#include "trainer.h"

namespace lms::vdsr {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A smooth 112x96 RGB image with edges: rings, a diagonal ramp and stripes.
io::Image synthetic_image(uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> noise(-0.03f, 0.03f);
  io::Image img{112, 96, 3, {}};
  img.data.resize(static_cast<size_t>(img.width) * img.height * 3);
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < img.width; ++x) {
      float r = std::hypot(x - 50.0f, y - 40.0f);
      float v[3] = {0.5f + 0.4f * std::sin(r / 3.0f), (x + y) / 208.0f,
                    (x / 6) % 2 == 0 ? 0.8f : 0.2f};
      for (int c = 0; c < 3; ++c) {
        img.data[(static_cast<size_t>(y) * img.width + x) * 3 + c] =
            std::clamp(v[c] + noise(gen), 0.0f, 1.0f);
      }
    }
  }
  return img;
}

// <tmp>/vdsr_test_data/{train,eval}: the astronaut crop and a synthetic image.
std::string data_dir() {
  static const std::string dir = [] {
    fs::path root = fs::path(testing::TempDir()) / ("vdsr_test_data_" + std::to_string(getpid()));
    fs::remove_all(root);
    fs::create_directories(root / "train");
    fs::create_directories(root / "eval");
    fs::path astronaut = fs::path(LMS_SOURCE_DIR) / "tests/data/astronaut_crop128.png";
    fs::copy_file(astronaut, root / "train/astronaut.png");
    fs::copy_file(astronaut, root / "eval/astronaut.png");
    std::printf("synthetic image seed 5\n");
    EXPECT_TRUE(io::write_png(synthetic_image(5), (root / "train/rings.png").string()).ok());
    EXPECT_TRUE(io::write_png(synthetic_image(6), (root / "eval/rings.png").string()).ok());
    return root.string();
  }();
  return dir;
}

std::string temp_path(const std::string& name) {
  // Per process: ctest runs the cases of this binary in parallel processes.
  return (fs::path(testing::TempDir()) / (std::to_string(getpid()) + "_" + name)).string();
}

// A reduced VDSR that trains in milliseconds per step.
TrainOptions small_options(int64_t steps) {
  TrainOptions o;
  o.run.data_dir = data_dir();
  o.run.capacity_bytes = 64 * kMiB;
  o.run.host_pool_bytes = 256 * kMiB;
  o.batch = 4;
  o.crop = 24;
  o.steps = steps;
  o.lr = 1e-3;
  o.depth = 6;
  o.channels = 16;
  o.seed = 3;
  o.run.threads = 1;  // kernels are deterministic for a fixed thread count
  return o;
}

TrainResult train_ok(const TrainOptions& o) {
  std::ostringstream log;
  absl::StatusOr<TrainResult> r = train(o, log);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << log.str();
  std::printf("%s", log.str().c_str());
  return r.ok() ? *std::move(r) : TrainResult{};
}

// Bitwise equality of two float vectors (EXPECT_EQ on floats would also pass
// for -0 vs +0; the contract is bit identity).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return false;
  }
  return true;
}

absl::StatusCode train_error(const TrainOptions& o, std::string* message) {
  std::ostringstream log;
  absl::StatusOr<TrainResult> r = train(o, log);
  *message = std::string(r.status().message());
  return r.status().code();
}

TEST(VdsrDatasetTest, BatchesAreDeterministicPerStepAndPairsStayAligned) {
  std::vector<std::string> warnings;
  auto data = Dataset::load(data_dir() + "/train", {}, &warnings);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->pairs().size(), 2u);
  EXPECT_TRUE(warnings.empty());
  BatchOptions bo{.batch = 6, .crop = 16, .seed = 9};
  auto a = data->batch(7, bo), b = data->batch(7, bo), c = data->batch(8, bo);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_TRUE(same_bits(a->hr, b->hr) && same_bits(a->lr, b->lr));
  EXPECT_FALSE(same_bits(a->hr, c->hr));
  ASSERT_EQ(a->hr.size(), 6u * 16 * 16);
  // Every target patch is one of the 8 flips/rotations of a window of some
  // image, and its input is the same transform of the same window of that
  // image's degraded plane.
  for (int n = 0; n < bo.batch; ++n) {
    const float* hr = a->hr.data() + n * 256;
    const float* lr = a->lr.data() + n * 256;
    bool found = false;
    for (const ImagePair& p : data->pairs()) {
      for (int rot = 0; rot < 4 && !found; ++rot) {
        for (int flip = 0; flip < 2 && !found; ++flip) {
          for (int y = 0; y + 16 <= p.hr.height && !found; ++y) {
            for (int x = 0; x + 16 <= p.hr.width && !found; ++x) {
              bool hr_match = true, lr_match = true;
              for (int i = 0; i < 16 && hr_match; ++i) {
                for (int j = 0; j < 16 && hr_match; ++j) {
                  int r = i, col = j;
                  for (int k = 0; k < rot; ++k) std::tie(r, col) = std::pair(col, 15 - r);
                  if (flip) col = 15 - col;
                  size_t src = static_cast<size_t>(y + r) * p.hr.width + x + col;
                  hr_match = hr[i * 16 + j] == p.hr.data[src];
                  lr_match = lr_match && lr[i * 16 + j] == p.lr_up.data[src];
                }
              }
              found = hr_match && lr_match;
            }
          }
        }
      }
    }
    EXPECT_TRUE(found) << "patch " << n << " is not a transformed window of any image";
  }
  BatchOptions too_big{.batch = 1, .crop = 200};
  EXPECT_EQ(data->batch(0, too_big).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(VdsrDatasetTest, DegradedInputIsCloseButNotEqualToTarget) {
  auto img = io::read_image(std::string(LMS_SOURCE_DIR) + "/tests/data/astronaut_crop128.png");
  ASSERT_TRUE(img.ok()) << img.status();
  auto p = make_pair(*img, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  auto db = io::psnr(p->lr_up, p->hr, 2);
  ASSERT_TRUE(db.ok());
  std::printf("bicubic x2 PSNR of the astronaut crop: %.3f dB\n", *db);
  EXPECT_GT(*db, 20.0);
  EXPECT_LT(*db, 45.0);
  EXPECT_EQ(make_pair(*img, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(VdsrCliTest, ParsesEveryTrainFlag) {
  auto cmd = parse_command_line({"train",
                                 "--data",
                                 "d",
                                 "--capacity=256MiB",
                                 "--batch",
                                 "8",
                                 "--crop",
                                 "32",
                                 "--steps",
                                 "7",
                                 "--lr",
                                 "0.001",
                                 "--clip-norm",
                                 "0",
                                 "--depth",
                                 "4",
                                 "--channels",
                                 "8",
                                 "--seed",
                                 "5",
                                 "--lms",
                                 "c.toml",
                                 "--lms-set",
                                 "policy=tflms",
                                 "--lms-set=sync_mode=1",
                                 "--checkpoint",
                                 "x.ckpt",
                                 "--checkpoint-every",
                                 "2",
                                 "--resume",
                                 "--trace",
                                 "t",
                                 "--threads",
                                 "1",
                                 "--log-every",
                                 "3"});
  ASSERT_TRUE(cmd.ok()) << cmd.status();
  const TrainOptions& t = cmd->train;
  EXPECT_EQ(cmd->kind, CommandKind::kTrain);
  EXPECT_EQ(t.run.data_dir, "d");
  EXPECT_EQ(t.run.capacity_bytes, 256 * kMiB);
  EXPECT_EQ(t.batch, 8);
  EXPECT_EQ(t.crop, 32);
  EXPECT_EQ(t.steps, 7);
  EXPECT_DOUBLE_EQ(t.lr, 0.001);
  EXPECT_EQ(t.clip_norm, 0.0);
  EXPECT_EQ(t.depth, 4);
  EXPECT_EQ(t.channels, 8);
  EXPECT_EQ(t.seed, 5u);
  EXPECT_EQ(t.lms_config, "c.toml");
  EXPECT_EQ(t.lms_overrides, (std::vector<std::string>{"policy=tflms", "sync_mode=1"}));
  EXPECT_TRUE(t.resume);
  EXPECT_EQ(t.checkpoint_every, 2);
  EXPECT_EQ(t.trace_dir, "t");
  EXPECT_EQ(t.run.threads, 1);
  EXPECT_EQ(t.log_every, 3);
  auto eval =
      parse_command_line({"eval", "--checkpoint", "x", "--eval-crop", "0", "--out", "o.png"});
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->eval.eval_crop, 0);
  EXPECT_EQ(eval->eval.out, "o.png");
  EXPECT_EQ(parse_command_line({})->kind, CommandKind::kHelp);
}

TEST(VdsrCliTest, BadFlagsNameTheFlagAndWhatIsAllowed) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> expect;  // each in the message
  };
  std::vector<Case> cases = {
      {{"train", "--bogus", "1"}, {"not expected", "--bogus"}},
      {{"train", "--batch"}, {"--batch", "missing"}},
      {{"train", "--batch", "0"}, {"--batch: bad value '0' (an integer >= 1)"}},
      {{"train", "--batch", "4x"}, {"--batch: bad value '4x'"}},
      {{"train", "--capacity", "12XB"}, {"--capacity: bad value '12XB'", "256MiB"}},
      {{"train", "--lr", "-1"}, {"--lr: bad value '-1'"}},
      {{"train", "--lr", "0"}, {"--lr: bad value '0' (a number > 0)"}},
      {{"train", "--device", "gpu"}, {"--device: bad value 'gpu'", "cpu", "cuda"}},
      {{"train", "--resume"}, {"--resume needs --checkpoint"}},
      {{"train", "--checkpoint-every", "5"}, {"--checkpoint-every needs --checkpoint"}},
      {{"train", "--resume=yes", "--checkpoint", "x"}, {"--resume: bad value 'yes'", "no value"}},
      {{"train", "steps"}, {"not expected", "steps"}},
      {{"eval"}, {"--checkpoint is required"}},
      // A typo is named before the missing --checkpoint it hides.
      {{"eval", "--chekpoint", "x"}, {"not expected", "--chekpoint"}},
      {{"fly"}, {"not expected", "fly"}},
      {{"train", "eval"}, {"not expected", "eval"}},  // one command per run
  };
  for (const Case& c : cases) {
    auto cmd = parse_command_line(c.args);
    ASSERT_FALSE(cmd.ok()) << c.args[0] << " " << (c.args.size() > 1 ? c.args[1] : "");
    EXPECT_EQ(cmd.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& part : c.expect) {
      EXPECT_NE(std::string(cmd.status().message()).find(part), std::string::npos)
          << cmd.status().message() << " lacks " << part;
    }
  }
}

// `vdsr`, `vdsr help`, `vdsr --help` and `vdsr train --help` are the help
// (each command's lists its flags with their defaults), not a run.
TEST(VdsrCliTest, HelpListsTheCommandsAndTheirFlags) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{}, {"help"}, {"--help"}, {"-h"}}) {
    auto cmd = parse_command_line(args);
    ASSERT_TRUE(cmd.ok()) << cmd.status();
    EXPECT_EQ(cmd->kind, CommandKind::kHelp);
    EXPECT_NE(cmd->help.find("train"), std::string::npos) << cmd->help;
    EXPECT_NE(cmd->help.find("eval"), std::string::npos) << cmd->help;
  }
  auto train = parse_command_line({"train", "--help"});
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->kind, CommandKind::kHelp);
  for (const char* part : {"--batch N=16", "--capacity BYTES=1GiB", "--lms-set", "--resume",
                           "--distributed", "--comm-timeout"}) {
    EXPECT_NE(train->help.find(part), std::string::npos) << part << " not in:\n" << train->help;
  }
  auto eval = parse_command_line({"eval", "-h"});
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_NE(eval->help.find("--eval-crop"), std::string::npos) << eval->help;
  EXPECT_EQ(eval->help.find("--batch"), std::string::npos) << eval->help;
}

// The same run with LMS (manual policy swapping three activations) and
// without gives bit-identical losses and weights.
TEST(VdsrTrainTest, LmsManualGivesBitIdenticalLossesAndWeights) {
  TrainResult plain = train_ok(small_options(4));
  TrainOptions o = small_options(4);
  o.lms_overrides = {"policy=manual", "tensors=relu1,relu2,relu4"};
  TrainResult lms = train_ok(o);
  ASSERT_EQ(plain.losses.size(), 4u);
  EXPECT_FALSE(plain.lms_report.enabled);
  EXPECT_TRUE(lms.lms_report.enabled);
  EXPECT_EQ(lms.lms_report.swapped.size(), 3u);
  EXPECT_GT(lms.bytes_d2h_per_step, 0u);
  EXPECT_GT(lms.bytes_h2d_per_step, 0u);
  EXPECT_EQ(plain.bytes_d2h_per_step, 0u);
  EXPECT_TRUE(same_bits(plain.losses, lms.losses));
  ASSERT_EQ(plain.persistent.size(), lms.persistent.size());
  for (const auto& [name, values] : plain.persistent) {
    EXPECT_TRUE(same_bits(values, lms.persistent.at(name))) << name;
  }
  for (float l : plain.losses) EXPECT_TRUE(std::isfinite(l));
}

// The auto policy under a device budget below the run's peak swaps
// activations and matches the run without LMS bit for bit. The budget is
// derived from the measured peak (kernel workspaces depend on the CPU), trying
// a few fractions above the planner's working-set limit. The capacity stays
// large: with one compute thread oneDNN's convolutions take a 9x-activation
// im2col workspace, so this small model is workspace-bound and fragmentation,
// not the plan, would decide whether a capacity equal to the budget fits.
TEST(VdsrTrainTest, AutoPolicyUnderBudgetSwapsAndMatchesBitForBit) {
  TrainOptions base = small_options(3);
  base.batch = 16;
  base.crop = 32;
  base.run.capacity_bytes = 256 * kMiB;
  TrainResult reference = train_ok(base);
  ASSERT_EQ(reference.losses.size(), 3u);
  std::printf("peak without LMS: %llu bytes\n",
              static_cast<unsigned long long>(reference.peak_device_bytes));
  bool ran = false;
  for (int percent : {85, 90, 95}) {
    TrainOptions o = base;
    uint64_t budget = reference.peak_device_bytes * percent / 100;
    o.lms_overrides = {"policy=auto", "auto_actions=swap",
                       "device_memory_limit=" + std::to_string(budget)};
    std::ostringstream log;
    absl::StatusOr<TrainResult> lms = train(o, log);
    std::printf("budget %d%% of the peak: %s\n%s", percent, lms.status().ToString().c_str(),
                log.str().c_str());
    if (!lms.ok()) {
      // Only the planner may refuse (budget below its working-set limit).
      ASSERT_EQ(lms.status().code(), absl::StatusCode::kResourceExhausted);
      ASSERT_NE(std::string(lms.status().message()).find("lms auto"), std::string::npos);
      continue;
    }
    ran = true;
    EXPECT_FALSE(lms->lms_report.swapped.empty());
    // In whole allocator units (Note [Capacity units]).
    EXPECT_EQ(lms->lms_report.budget_bytes, budget / 256 * 256);
    EXPECT_GT(lms->bytes_d2h_per_step, 0u);
    EXPECT_LE(lms->lms_report.peak_bytes_after, budget);
    EXPECT_LT(lms->lms_report.peak_bytes_after, lms->lms_report.peak_bytes_before);
    EXPECT_TRUE(same_bits(reference.losses, lms->losses));
    ASSERT_EQ(reference.persistent.size(), lms->persistent.size());
    for (const auto& [name, values] : reference.persistent) {
      EXPECT_TRUE(same_bits(values, lms->persistent.at(name))) << name;
    }
    break;
  }
  EXPECT_TRUE(ran) << "no budget between 85% and 95% of the peak could be planned";
}

TEST(VdsrTrainTest, ResumeContinuesBitExactly) {
  std::string ck = temp_path("vdsr_resume.ckpt");
  fs::remove(ck);
  TrainResult full = train_ok(small_options(6));
  TrainOptions first = small_options(3);
  first.checkpoint = ck;
  first.checkpoint_every = 2;
  TrainResult head = train_ok(first);
  TrainOptions second = small_options(6);
  second.checkpoint = ck;
  second.resume = true;
  TrainResult tail = train_ok(second);
  EXPECT_EQ(tail.first_step, 4);
  ASSERT_EQ(full.losses.size(), 6u);
  ASSERT_EQ(tail.losses.size(), 3u);
  EXPECT_TRUE(
      same_bits(std::vector<float>(full.losses.begin(), full.losses.begin() + 3), head.losses));
  EXPECT_TRUE(
      same_bits(std::vector<float>(full.losses.begin() + 3, full.losses.end()), tail.losses));
  for (const auto& [name, values] : full.persistent) {
    EXPECT_TRUE(same_bits(values, tail.persistent.at(name))) << name;
  }
  auto saved = io::load_checkpoint(ck);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->step, 6);
  ASSERT_NE(saved->find("optimizer/step"), nullptr);
  EXPECT_EQ(saved->find("optimizer/step")->data.at(0), 6.0f);

  // Different settings or nothing left to do: FailedPrecondition naming why.
  std::string message;
  TrainOptions other = second;
  other.steps = 9;
  other.batch = 2;
  EXPECT_EQ(train_error(other, &message), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(message.find("batch=4"), std::string::npos) << message;
  EXPECT_EQ(train_error(second, &message), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(message.find("at step 6"), std::string::npos) << message;
}

TEST(VdsrEvalTest, ReportsFinitePsnrAndWritesSideBySide) {
  std::string ck = temp_path("vdsr_eval.ckpt");
  TrainOptions o = small_options(5);
  o.checkpoint = ck;
  train_ok(o);
  EvalOptions e;
  e.run.data_dir = data_dir();
  e.run.capacity_bytes = 64 * kMiB;
  e.checkpoint = ck;
  e.eval_crop = 64;
  e.out = temp_path("vdsr_side_by_side.png");
  std::ostringstream log;
  auto r = evaluate(e, log);
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf("%s", log.str().c_str());
  ASSERT_EQ(r->rows.size(), 2u);
  for (const EvalRow& row : r->rows) {
    EXPECT_EQ(row.width, 64);
    EXPECT_EQ(row.height, 64);
    EXPECT_TRUE(std::isfinite(row.psnr_bicubic_db) && row.psnr_bicubic_db > 15) << row.name;
    EXPECT_TRUE(std::isfinite(row.psnr_vdsr_db) && row.psnr_vdsr_db > 0) << row.name;
  }
  EXPECT_NEAR(r->mean_bicubic_db, (r->rows[0].psnr_bicubic_db + r->rows[1].psnr_bicubic_db) / 2,
              1e-9);
  auto png = io::read_image(e.out);
  ASSERT_TRUE(png.ok()) << png.status();
  EXPECT_EQ(png->width, 3 * 64 + 8);
  EXPECT_EQ(png->height, 64);
  std::remove(e.out.c_str());
  // Whole images (eval-crop 0): 128x128 and 112x96.
  e.eval_crop = 0;
  e.out.clear();
  auto whole = evaluate(e, log);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->rows[0].width, 128);
  EXPECT_EQ(whole->rows[1].width, 112);
  EXPECT_EQ(whole->rows[1].height, 96);
}

TEST(VdsrErrorsTest, BadPathsAndSettingsAreClearErrors) {
  std::string message;
  TrainOptions o = small_options(1);
  o.run.data_dir = temp_path("no_such_vdsr_data");
  EXPECT_EQ(train_error(o, &message), absl::StatusCode::kNotFound);
  EXPECT_NE(message.find("no_such_vdsr_data"), std::string::npos) << message;

  o = small_options(1);
  o.run.device = "cuda";
  if (make_cuda_device({}).ok()) {
    // A GPU and the CUDA backend: the same small run trains there.
    EXPECT_EQ(train_error(o, &message), absl::StatusCode::kOk) << message;
  } else {
    // No CUDA backend, or no GPU here: a clear error either way.
    EXPECT_NE(train_error(o, &message), absl::StatusCode::kOk);
    EXPECT_NE(message.find("--device cpu"), std::string::npos) << message;
  }

  o = small_options(1);
  o.crop = 120;  // the synthetic image is 112x96
  EXPECT_EQ(train_error(o, &message), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message.find("crop 120"), std::string::npos) << message;

  o = small_options(1);
  o.lms_config = temp_path("missing_lms.toml");
  EXPECT_EQ(train_error(o, &message), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message.find("missing_lms.toml"), std::string::npos) << message;

  o = small_options(1);
  o.lms_overrides = {"swapin_ahaed=2"};
  EXPECT_EQ(train_error(o, &message), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message.find("swapin_ahaed"), std::string::npos) << message;

  o = small_options(1);
  o.checkpoint = temp_path("never_written.ckpt");
  o.resume = true;
  fs::remove(o.checkpoint);
  EXPECT_EQ(train_error(o, &message), absl::StatusCode::kNotFound) << message;

  std::string garbage = temp_path("garbage.ckpt");
  { std::ofstream(garbage) << "not a checkpoint"; }
  EvalOptions e;
  e.run.data_dir = data_dir();
  e.checkpoint = garbage;
  std::ostringstream log;
  EXPECT_EQ(evaluate(e, log).status().code(), absl::StatusCode::kDataLoss);
  e.checkpoint = temp_path("never_written.ckpt");
  EXPECT_EQ(evaluate(e, log).status().code(), absl::StatusCode::kNotFound);
}

#ifdef VDSR_BINARY
// The program's exit status: 0 for help (on stdout), 1 with the message on
// stderr for errors.
TEST(VdsrProgramTest, ExitStatusAndMessage) {
  using lms::cli_test::run_program;
  const lms::cli_test::CliProgram vdsr{
      "vdsr", VDSR_BINARY, {"help", "--help", "train --help", "train -h"}, "train", "train", 1};
  lms::cli_test::expect_help_lists_the_flag(vdsr);
  lms::cli_test::expect_help_lists_the_flag(
      {"vdsr", VDSR_BINARY, {"train --help", "eval --help"}, "--threads", "", 0});
  lms::cli_test::expect_unknown_flag_named(vdsr);
  lms::cli_test::ProgramRun r = run_program(VDSR_BINARY, "train --batch 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("vdsr: error: --batch: bad value '0'"), std::string::npos) << r.err;
  r = run_program(VDSR_BINARY, "train --data " + temp_path("no_such_vdsr_data") + " --steps 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no_such_vdsr_data"), std::string::npos) << r.err;
}
#endif

}  // namespace
}  // namespace lms::vdsr
