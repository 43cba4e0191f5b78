// What a `vdsr` user touches, hardened: host buffers too large for the
// machine are refused before anything is allocated, an unwritable checkpoint
// location fails before the first step, a folder without a usable image says
// why for each file, and a checkpoint with non-finite values or a negative
// step is refused by eval and --resume.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../common/capped_child.h"
#include "cli.h"
#include "dataset.h"
#include "evaluate.h"
#include "lms/io/checkpoint.h"
#include "lms/io/image.h"
#include "trainer.h"

namespace lms::vdsr {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMiB = uint64_t{1} << 20;
// The children that must fail cleanly run under an address-space cap
// (capped_child.h) far below what the refused flags ask for, so without the
// checks they die of std::bad_alloc there instead of reaching the kernel's
// OOM killer.
using testing_support::ChildResult;
using testing_support::kCapAddressSpace;
using testing_support::kChildAddressSpace;
using testing_support::run_capped;

std::string astronaut() {
  return std::string(LMS_SOURCE_DIR) + "/tests/data/astronaut_crop128.png";
}

// A fresh folder for this process and test.
fs::path fresh_dir(const std::string& name) {
  fs::path dir =
      fs::path(testing::TempDir()) / ("vdsr_hardening_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// <dir>/train and <dir>/eval holding the astronaut crop (128x128).
std::string data_dir() {
  static const std::string dir = [] {
    fs::path root = fresh_dir("data");
    fs::create_directories(root / "train");
    fs::create_directories(root / "eval");
    fs::copy_file(astronaut(), root / "train/astronaut.png");
    fs::copy_file(astronaut(), root / "eval/astronaut.png");
    return root.string();
  }();
  return dir;
}

// A tiny VDSR that trains in milliseconds per step.
TrainOptions small_options(int64_t steps) {
  TrainOptions o;
  o.run.data_dir = data_dir();
  o.run.capacity_bytes = 64 * kMiB;
  o.run.host_pool_bytes = 256 * kMiB;
  o.run.threads = 1;
  o.batch = 2;
  o.crop = 24;
  o.steps = steps;
  o.lr = 1e-3;
  o.depth = 3;
  o.channels = 8;
  o.seed = 3;
  return o;
}

absl::Status train_status(const TrainOptions& o, std::string* log_text = nullptr) {
  std::ostringstream log;
  absl::Status s = train(o, log).status();
  if (log_text != nullptr) *log_text = log.str();
  return s;
}

void expect_contains(const std::string& text, const std::vector<std::string>& parts) {
  for (const std::string& p : parts) {
    EXPECT_NE(text.find(p), std::string::npos) << "want '" << p << "' in: " << text;
  }
}

std::string describe(const absl::Status& s) {
  return std::string(absl::StatusCodeToString(s.code())) + ": " + std::string(s.message());
}

// ---- 1. Host buffers --------------------------------------------------------

TEST(VdsrHostMemoryTest, HugeBatchOrCropIsRefusedWhenParsing) {
  auto cmd = parse_command_line({"train", "--batch", "1000000000"});
  ASSERT_FALSE(cmd.ok()) << "--batch 1000000000 accepted";
  EXPECT_EQ(cmd.status().code(), absl::StatusCode::kInvalidArgument);
  // The flag, the bytes (2 x 1e9 x 48 x 48 x 4), the limit and what fits.
  expect_contains(std::string(cmd.status().message()),
                  {"--batch 1000000000 with --crop 48", "18432000000000 bytes", "host memory",
                   "physical memory", "the largest --batch is"});

  cmd = parse_command_line({"train", "--crop", "2147483647"});
  ASSERT_FALSE(cmd.ok()) << "--crop 2147483647 accepted";
  EXPECT_EQ(cmd.status().code(), absl::StatusCode::kInvalidArgument);
  expect_contains(std::string(cmd.status().message()),
                  {"--crop 2147483647", "overflows 64-bit", "the largest --crop"});

  cmd = parse_command_line({"train", "--channels", "2000000000"});
  ASSERT_FALSE(cmd.ok()) << "--channels 2000000000 accepted";
  expect_contains(std::string(cmd.status().message()), {"--channels 2000000000", "overflows"});

  EXPECT_TRUE(parse_command_line({"train", "--batch", "64", "--crop", "96"}).ok());
}

// A depth of 100000 took two minutes to fail (building and planning the
// graph); --threads 10000 was accepted. Both are refused when parsing,
// naming the range.
TEST(VdsrFlagRangesTest, DepthAndThreadsAreBoundedWhenParsing) {
  for (const auto& [args, allowed] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"train", "--depth", "100000"}, "an integer from 2 to 1000"},
           {{"train", "--threads", "10000"}, "an integer from 0 to 1024"},
           {{"eval", "--checkpoint", "c", "--threads", "10000"}, "an integer from 0 to 1024"},
           {{"train", "--threads", "99999999999999999999"}, "an integer from 0 to 1024"}}) {
    auto cmd = parse_command_line(args);
    ASSERT_FALSE(cmd.ok()) << args[1] << " " << args.back() << " accepted";
    EXPECT_EQ(cmd.status().code(), absl::StatusCode::kInvalidArgument);
    expect_contains(std::string(cmd.status().message()), {args[args.size() - 2], allowed});
  }
  EXPECT_TRUE(parse_command_line({"train", "--depth", "1000", "--threads", "1024"}).ok());
}

TEST(VdsrHostMemoryTest, LimitIsExplicitAndNamesTheModelFlags) {
  TrainOptions t = small_options(1);
  EXPECT_TRUE(check_host_memory(t, 64 * kMiB).ok());
  t.channels = 1024;
  t.depth = 20;  // 3 x 20 x 9 x 1025^2 x 4 bytes = 2.1 GiB of weights and moments
  absl::Status s = check_host_memory(t, 64 * kMiB);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  expect_contains(std::string(s.message()),
                  {"--depth 20 with --channels 1024", "Adam moments", "64.00 MiB",
                   "the largest --channels (at --depth 20) is"});
  t = small_options(1);
  t.batch = 100000;
  s = check_host_memory(t, 64 * kMiB);
  expect_contains(std::string(s.message()), {"--batch 100000", "at --crop 24 the largest --batch"});
}

// Options built in code (not parsed) are checked too, before the batch is
// allocated: in a child capped at 8 GiB of address space, a 4.6 TB batch
// must come back as an error, not kill the child.
TEST(VdsrHostMemoryTest, TrainRefusesAHugeBatchWithoutAllocating) {
  ChildResult r = run_capped([] {
    TrainOptions o = small_options(1);
    o.batch = 1000000000;
    return describe(train_status(o));
  });
  ASSERT_TRUE(r.exited) << "train() died instead of refusing the batch: " << r.text;
  expect_contains(r.text, {"INVALID_ARGUMENT", "--batch 1000000000 with --crop 24"});
}

#ifdef VDSR_BINARY
TEST(VdsrHostMemoryTest, ProgramExitsWithTheMessage) {
  fs::path dir = fresh_dir("program");
  std::string err = (dir / "stderr.txt").string();
  std::string cap =
      kCapAddressSpace ? "ulimit -v " + std::to_string(kChildAddressSpace / 1024) + "; " : "";
  std::string cmd = cap + std::string(VDSR_BINARY) + " train --data " + data_dir() +
                    " --steps 1 --batch 1000000000 > /dev/null 2> " + err;
  int status = std::system(cmd.c_str());
  std::ifstream in(err);
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_TRUE(WIFEXITED(status)) << text.str();
  EXPECT_EQ(WEXITSTATUS(status), 1) << text.str();
  expect_contains(text.str(), {"vdsr: error: --batch 1000000000", "bytes", "host memory"});
}
#endif

// ---- 2. Checkpoint location ---------------------------------------------------

TEST(VdsrOutputsTest, UnwritableCheckpointFailsBeforeTheFirstStep) {
  fs::path dir = fresh_dir("unwritable");
  const std::string file = (dir / "plain_file").string();
  { std::ofstream(file) << "x"; }
  // A folder that is a regular file stops writes even for root (chmod does not).
  for (const std::string& ck : {file + "/vdsr.ckpt", std::string("/proc/lms_vdsr_test.ckpt")}) {
    TrainOptions o = small_options(200);
    o.checkpoint = ck;
    o.checkpoint_every = 100;
    std::string log;
    auto start = std::chrono::steady_clock::now();
    absl::Status s = train_status(o, &log);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_FALSE(s.ok()) << ck;
    expect_contains(std::string(s.message()), {"--checkpoint", ck});
    EXPECT_EQ(log.find("step "), std::string::npos) << "steps ran before the error:\n" << log;
    EXPECT_LT(seconds, 20.0);
  }
  TrainOptions o = small_options(200);
  o.checkpoint = file + "/vdsr.ckpt";
  absl::Status s = train_status(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  expect_contains(std::string(s.message()), {"Not a directory"});

  o.checkpoint.clear();
  o.trace_dir = file + "/trace";
  std::string log;
  s = train_status(o, &log);
  EXPECT_FALSE(s.ok());
  expect_contains(std::string(s.message()), {"--trace", file});
  EXPECT_EQ(log.find("step "), std::string::npos) << log;
}

TEST(VdsrOutputsTest, MissingCheckpointFoldersAreCreatedFirst) {
  fs::path dir = fresh_dir("nested");
  TrainOptions o = small_options(1);
  o.checkpoint = (dir / "runs" / "a" / "vdsr.ckpt").string();
  ASSERT_TRUE(train_status(o).ok());
  auto ck = io::load_usable_checkpoint(o.checkpoint);
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->step, 1);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir / "runs" / "a")) files += e.is_regular_file();
  EXPECT_EQ(files, 1) << "the writability probe was left behind";
}

// ---- 3. Unusable image folders ---------------------------------------------

TEST(VdsrDataTest, EveryUnusableFileIsListedWithItsReason) {
  fs::path dir = fresh_dir("unusable");
  { std::ofstream(dir / "a.png") << "not a png at all"; }
  io::Image tiny{8, 8, 1, std::vector<float>(64, 0.5f)};
  ASSERT_TRUE(io::write_png(tiny, (dir / "b.png").string()).ok());
  { std::ofstream(dir / "c.txt") << "notes"; }
  { std::ofstream(dir / "d.jpg") << "\xFF\xD8\xFF truncated"; }
  fs::create_directories(dir / "e.png");
  auto data = Dataset::load(dir.string(), {.scale = 2, .min_side = 48});
  ASSERT_FALSE(data.ok());
  // b.png decodes, so the crop is what is wrong: InvalidArgument.
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument) << data.status();
  expect_contains(std::string(data.status().message()),
                  {"no usable image in " + dir.string(), "a.png: not a PNG or JPEG file",
                   "b.png: 8x8 is smaller than the crop 48", "c.txt: unsupported extension",
                   "d.jpg: ", "e.png: not a regular file"});

  // Nothing decodes: NotFound, still with every reason; train names them too.
  fs::remove(dir / "b.png");
  TrainOptions o = small_options(1);
  o.run.data_dir = fresh_dir("unusable_root").string();
  fs::create_directory_symlink(dir, fs::path(o.run.data_dir) / "train");
  absl::Status s = train_status(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  expect_contains(std::string(s.message()), {"a.png: not a PNG or JPEG file", "c.txt: unsupported",
                                             "d.jpg: ", "e.png: not a regular file"});

  // An empty folder says so.
  fs::path empty = fresh_dir("empty");
  data = Dataset::load(empty.string(), {});
  expect_contains(std::string(data.status().message()), {"the folder is empty"});
}

TEST(VdsrDataTest, SmallImagesAmongLargeOnesStillNameTheCrop) {
  TrainOptions o = small_options(1);
  o.crop = 130;  // the astronaut crop is 128x128
  absl::Status s = train_status(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  expect_contains(std::string(s.message()),
                  {"astronaut.png: 128x128 is smaller than the crop 130"});
}

// ---- 5. Checkpoints with unusable values ------------------------------------

// Rewrites the checkpoint at `from` to `to` with `edit` applied.
void rewrite_checkpoint(const std::string& from, const std::string& to,
                        const std::function<void(io::Checkpoint&)>& edit) {
  auto ck = io::load_checkpoint(from);
  ASSERT_TRUE(ck.ok()) << ck.status();
  edit(*ck);
  ASSERT_TRUE(io::save_checkpoint(to, ck->tensors, ck->step, ck->meta).ok());
}

TEST(VdsrCheckpointValuesTest, NonFiniteWeightsOrNegativeStepAreRefused) {
  fs::path dir = fresh_dir("values");
  const std::string good = (dir / "good.ckpt").string();
  TrainOptions o = small_options(2);
  o.checkpoint = good;
  ASSERT_TRUE(train_status(o).ok());

  const std::string nan = (dir / "nan.ckpt").string();
  rewrite_checkpoint(good, nan, [](io::Checkpoint& ck) {
    for (io::NamedTensor& t : ck.tensors) {
      if (t.name == "conv2/w") t.data[5] = std::numeric_limits<float>::quiet_NaN();
    }
  });
  const std::string inf = (dir / "inf.ckpt").string();
  rewrite_checkpoint(good, inf, [](io::Checkpoint& ck) {
    for (io::NamedTensor& t : ck.tensors) {
      if (t.name == "conv1/b") t.data[0] = -std::numeric_limits<float>::infinity();
    }
  });
  const std::string negative = (dir / "negative.ckpt").string();
  rewrite_checkpoint(good, negative, [](io::Checkpoint& ck) { ck.step = -3; });

  struct Case {
    std::string path;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {nan, {nan, "tensor 'conv2/w'", "NaN at element 5", "must be finite"}},
      {inf, {inf, "tensor 'conv1/b'", "Inf at element 0", "must be finite"}},
      {negative, {negative, "field 'step' is -3", "step >= 0"}},
  };
  for (const Case& c : cases) {
    EvalOptions e;
    e.run.data_dir = data_dir();
    e.run.capacity_bytes = 64 * kMiB;
    e.run.threads = 1;
    e.checkpoint = c.path;
    e.eval_crop = 32;
    std::ostringstream log;
    absl::Status s = evaluate(e, log).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << "eval " << s;
    expect_contains(std::string(s.message()), c.expect);

    TrainOptions r = small_options(4);
    r.checkpoint = c.path;
    r.resume = true;
    std::string train_log;
    s = train_status(r, &train_log);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << "resume " << s;
    expect_contains(std::string(s.message()), c.expect);
    EXPECT_EQ(train_log.find("step "), std::string::npos) << train_log;
  }
  // The good checkpoint still evaluates and resumes.
  EvalOptions e;
  e.run.data_dir = data_dir();
  e.run.capacity_bytes = 64 * kMiB;
  e.checkpoint = good;
  e.eval_crop = 32;
  std::ostringstream log;
  EXPECT_TRUE(evaluate(e, log).ok());
}

// A diverged run must not replace the last good checkpoint with NaN weights.
TEST(VdsrCheckpointValuesTest, DivergedStateIsNotSavedOverAGoodCheckpoint) {
  fs::path dir = fresh_dir("diverged");
  TrainOptions o = small_options(1);
  o.checkpoint = (dir / "vdsr.ckpt").string();
  ASSERT_TRUE(train_status(o).ok());
  // A new run over the same path whose first Adam update (lr beyond float)
  // makes every weight non-finite while step 1's loss is still finite.
  o.steps = 3;
  o.checkpoint_every = 1;
  o.lr = 1e39;
  o.clip_norm = 0;
  absl::Status s = train_status(o);
  ASSERT_FALSE(s.ok());
  std::printf("diverged run: %s\n", describe(s).c_str());
  auto ck = io::load_usable_checkpoint(o.checkpoint);
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->step, 1);
  EXPECT_EQ(ck->meta.at("lr"), "0.001");  // the first run's file, untouched
}

}  // namespace
}  // namespace lms::vdsr
