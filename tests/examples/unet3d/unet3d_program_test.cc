// The unet3d program as a user runs it (unet3d_lib: parse_command_line,
// train, evaluate, predict): on a synthetic folder of NIfTI pairs (always)
// and on a crop of the real MRI (when scripts/fetch_data.sh has fetched it).
// Properties: LMS on and off give bit-identical losses and weights; a resumed
// run equals the uninterrupted one; eval gives one Dice per class; predict
// writes a label map on the input's grid and a PNG of the documented size
// whose overlay colours are those of the label maps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lms/io/checkpoint.h"
#include "lms/io/host_memory.h"
#include "lms/io/image.h"
#include "lms/io/nifti.h"
#include "slices.h"
#include "synthetic_pairs.h"
#include "unet3d_cli.h"
#include "unet3d_evaluate.h"
#include "unet3d_trainer.h"

namespace lms::unet3d {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kSeed = 20261123;
constexpr uint64_t kMiB = uint64_t{1} << 20;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Unet3dProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("unet3d_program_test_" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    ASSERT_TRUE(write_synthetic_pair(dir_ / "train", "a.nii.gz", kSeed).ok());
    ASSERT_TRUE(write_synthetic_pair(dir_ / "train", "b.nii.gz", kSeed + 1).ok());
    ASSERT_TRUE(write_synthetic_pair(dir_ / "eval", "c.nii.gz", kSeed + 2).ok());
    std::printf("seed %llu, data in %s\n", static_cast<unsigned long long>(kSeed),
                dir_.string().c_str());
  }
  void TearDown() override { fs::remove_all(dir_); }

  TrainOptions small(int64_t steps) const {
    TrainOptions o;
    o.run.data_dir = dir_.string();
    o.run.device.capacity_bytes = 256 * kMiB;
    o.run.device.threads = 1;
    o.model.filters = 2;
    o.model.levels = 2;
    o.model.segmentation_levels = 2;
    o.size = 8;
    o.grid = 12;
    o.batch = 2;
    o.steps = steps;
    o.seed = kSeed;
    o.lr = 1e-2;
    return o;
  }

  fs::path dir_;
};

TrainResult train_ok(const TrainOptions& o) {
  std::ostringstream log;
  absl::StatusOr<TrainResult> r = train(o, log);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << log.str();
  return r.ok() ? *std::move(r) : TrainResult{};
}

void expect_same_state(const TrainResult& a, const TrainResult& b) {
  ASSERT_EQ(a.persistent.size(), b.persistent.size());
  for (const auto& [name, values] : a.persistent) {
    EXPECT_TRUE(same_bits(values, b.persistent.at(name))) << name;
  }
}

TEST_F(Unet3dProgram, CommandLineChecksSizesAgainstTheLevels) {
  auto ok = parse_command_line({"train", "--size", "24", "--levels", "4", "--steps", "3"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->train.size, 24);
  EXPECT_EQ(resolved_grid(24, 0, 4), 32);  // 24 + 6 = 30, up to a multiple of 8
  EXPECT_TRUE(parse_command_line({"train", "--levels", "2", "--size", "16"}).ok());
  EXPECT_TRUE(
      parse_command_line({"train", "--levels", "4", "--seg-levels", "3", "--size", "16"}).ok());
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {{"train", "--size", "20", "--levels", "4"}, "a multiple of 8"},
           {{"train", "--size", "16", "--grid", "8", "--levels", "2"}, "at least --size 16"},
           {{"train", "--resume"}, "--resume needs --checkpoint"},
           {{"train", "--max-scaling", "0.7"},
            "--max-scaling: bad value '0.7' (a number in [0, 0.5])"},
           {{"train", "--max-rotation", "181"}, "--max-rotation: bad value '181'"},
           {{"train", "--levels", "9"}, "--levels: bad value '9' (an integer from 1 to 8)"},
           {{"eval"}, "--checkpoint is required"},
           {{"predict"}, "--checkpoint is required"},
           {{"predict", "--checkpoint", "x", "--reference", "r.nii"}, "--reference needs --image"},
           {{"segment"}, "not expected: segment"},
           {{"train", "--bogus"}, "not expected: --bogus"},
           {{"eval", "--checkpoint", "c", "--size", "16"}, "--size"},  // a flag of train only
           // Deep supervision over more decoder levels than the U-Net has.
           {{"train", "--seg-levels", "5", "--levels", "2", "--size", "16"},
            "1..1 (the decoder levels below the top at --levels 2)"},
           {{"train", "--seg-levels=4", "--levels", "4", "--size", "16"}, "1..3"},
           // A jitter that scales intensities by up to 1e38 gave a NaN loss.
           {{"train", "--jitter", "1e38"}, "--jitter: bad value '1e38' (a number in [0, 1])"},
           {{"train", "--threads", "10000"}, "an integer from 0 to 1024"},
           {{"eval", "--checkpoint", "c", "--threads", "1025"}, "an integer from 0 to 1024"}}) {
    auto cmd = parse_command_line(c.args);
    ASSERT_FALSE(cmd.ok()) << c.args[0];
    EXPECT_EQ(cmd.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(cmd.status().message()).find(c.expect), std::string::npos)
        << cmd.status().message() << " lacks " << c.expect;
  }
}

// `unet3d`, `unet3d --help` and each command's --help are the help, listing
// the commands and each command's flags.
TEST_F(Unet3dProgram, HelpListsTheCommandsAndTheirFlags) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{}, {"help"}, {"--help"}}) {
    auto cmd = parse_command_line(args);
    ASSERT_TRUE(cmd.ok()) << cmd.status();
    EXPECT_EQ(cmd->kind, CommandKind::kHelp);
    for (const char* part : {"train", "eval", "predict", "--data"}) {
      EXPECT_NE(cmd->help.find(part), std::string::npos) << part << " not in:\n" << cmd->help;
    }
  }
  auto train = parse_command_line({"train", "--help"});
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->kind, CommandKind::kHelp);
  for (const char* part :
       {"--size N=48", "--seg-levels", "--no-flips", "--lms-set", "--scale-lr"}) {
    EXPECT_NE(train->help.find(part), std::string::npos) << part << " not in:\n" << train->help;
  }
  auto predict = parse_command_line({"predict", "-h"});
  ASSERT_TRUE(predict.ok()) << predict.status();
  EXPECT_NE(predict->help.find("--reference"), std::string::npos) << predict->help;
}

// A symbolic link that loops (or points nowhere) among the images was an
// uncaught std::filesystem exception (abort, rc 134); it is an error naming
// the file. A link that loops under a name that is not a NIfTI name is
// ignored like any other such file.
TEST_F(Unet3dProgram, ALoopingLinkInTheDataIsAnErrorNamingIt) {
  const fs::path loop = dir_ / "train" / "images" / "loop.nii.gz";
  fs::create_symlink(loop, loop);
  std::ostringstream log;
  absl::StatusOr<TrainResult> r = train(small(1), log);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string m(r.status().message());
  EXPECT_NE(m.find(loop.string()), std::string::npos) << m;
  EXPECT_NE(m.find("cannot be read"), std::string::npos) << m;
  fs::remove(loop);
  fs::create_symlink(dir_ / "train" / "images" / "notes", dir_ / "train" / "images" / "notes");
  EXPECT_TRUE(train(small(1), log).ok());
}

// LMS (auto policy under a budget below the peak without LMS) swaps
// activations of the U-Net, concat skips included, or (joint, the default)
// swaps and recomputes them, and changes no bit.
TEST_F(Unet3dProgram, LmsOnAndOffGiveBitIdenticalLossesAndWeights) {
  TrainOptions base = small(3);
  TrainResult plain = train_ok(base);
  ASSERT_EQ(plain.losses.size(), 3u);
  EXPECT_FALSE(plain.lms_report.enabled);
  for (const std::string actions : {"swap", "joint"}) {
    SCOPED_TRACE(actions);
    bool ran = false;
    for (int percent : {70, 80, 90}) {
      TrainOptions o = base;
      const uint64_t budget = plain.peak_device_bytes * percent / 100;
      o.run.lms_overrides = {"policy=auto", "auto_actions=" + actions,
                             "device_memory_limit=" + std::to_string(budget)};
      std::ostringstream log;
      absl::StatusOr<TrainResult> lms = train(o, log);
      std::printf("%s, budget %d%% of the peak (%llu bytes): %s\n", actions.c_str(), percent,
                  static_cast<unsigned long long>(budget), lms.status().ToString().c_str());
      if (!lms.ok()) {
        ASSERT_EQ(lms.status().code(), absl::StatusCode::kResourceExhausted) << log.str();
        continue;
      }
      ran = true;
      if (actions == "swap") {
        EXPECT_FALSE(lms->lms_report.swapped.empty());
        EXPECT_GT(lms->bytes_d2h_per_step, 0u);
      } else {
        EXPECT_FALSE(lms->lms_report.decisions.empty());
      }
      EXPECT_LE(lms->peak_device_bytes, plain.peak_device_bytes);
      EXPECT_TRUE(same_bits(plain.losses, lms->losses));
      expect_same_state(plain, *lms);
      break;
    }
    EXPECT_TRUE(ran) << "no budget between 70% and 90% of the peak could be planned";
  }
}

TEST_F(Unet3dProgram, ResumeEqualsTheUninterruptedRun) {
  TrainOptions full = small(4);
  full.checkpoint = (dir_ / "full.ckpt").string();
  TrainResult uninterrupted = train_ok(full);
  TrainOptions first = small(2);
  first.checkpoint = (dir_ / "half.ckpt").string();
  train_ok(first);
  TrainOptions rest = small(4);
  rest.checkpoint = first.checkpoint;
  rest.resume = true;
  TrainResult resumed = train_ok(rest);
  EXPECT_EQ(resumed.first_step, 3);
  ASSERT_EQ(resumed.losses.size(), 2u);
  ASSERT_EQ(uninterrupted.losses.size(), 4u);
  EXPECT_TRUE(same_bits({uninterrupted.losses[2], uninterrupted.losses[3]}, resumed.losses));
  expect_same_state(uninterrupted, resumed);
  // Different settings are refused, naming the key.
  TrainOptions other = rest;
  other.lr = 5e-3;
  std::ostringstream log;
  absl::StatusOr<TrainResult> refused = train(other, log);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(refused.status().message()).find("lr="), std::string::npos);
}

// Checkpoints with a valid checksum that --resume and eval used to take:
// an extra tensor (dropped by the next save), a step that disagrees with
// the optimizer's counter, no model entry (eval), and another --data folder.
// Each is rewritten through lms::io (so its checksum is valid) and refused
// naming what is wrong.
TEST_F(Unet3dProgram, ResumeAndEvalRefuseCheckpointsThatDisagree) {
  TrainOptions first = small(2);
  first.checkpoint = (dir_ / "m.ckpt").string();
  train_ok(first);
  absl::StatusOr<io::Checkpoint> good = io::load_checkpoint(first.checkpoint);
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_EQ(good->step, 2);
  ASSERT_NE(good->find("optimizer/step"), nullptr);
  struct Case {
    std::string name;
    std::function<void(io::Checkpoint&)> edit;
    absl::StatusCode code;
    std::string named;
  };
  const std::vector<Case> cases = {
      {"extra",
       [](io::Checkpoint& ck) {
         ck.tensors.push_back({"stray", {2}, {1, 2}});
       },
       absl::StatusCode::kFailedPrecondition, "holds tensor 'stray'"},
      {"step", [](io::Checkpoint& ck) { ck.step = 0; }, absl::StatusCode::kDataLoss,
       "at step 0 but its optimizer/step counter is 2"},
      {"counter",
       [](io::Checkpoint& ck) {
         for (io::NamedTensor& t : ck.tensors)
           if (t.name == "optimizer/step") t.data[0] = 5;
       },
       absl::StatusCode::kDataLoss, "optimizer/step counter is 5"},
  };
  for (const Case& c : cases) {
    io::Checkpoint ck = *good;
    c.edit(ck);
    const std::string path = (dir_ / (c.name + ".ckpt")).string();
    ASSERT_TRUE(io::save_checkpoint(path, ck.tensors, ck.step, ck.meta).ok());
    TrainOptions rest = small(4);
    rest.checkpoint = path;
    rest.resume = true;
    std::ostringstream log;
    absl::StatusOr<TrainResult> r = train(rest, log);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), c.code) << r.status();
    const std::string m(r.status().message());
    EXPECT_NE(m.find(c.named), std::string::npos) << m;
  }
  // Another --data folder (a copy of the same files elsewhere) is refused;
  // the same folder through a symbolic link is not.
  const fs::path copy = dir_ / "copy";
  fs::create_directories(copy);
  fs::copy(dir_ / "train", copy / "train", fs::copy_options::recursive);
  fs::copy(dir_ / "eval", copy / "eval", fs::copy_options::recursive);
  TrainOptions other = small(4);
  other.checkpoint = first.checkpoint;
  other.resume = true;
  other.run.data_dir = copy.string();
  std::ostringstream log;
  absl::StatusOr<TrainResult> r = train(other, log);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(r.status().message()).find("data="), std::string::npos) << r.status();
  fs::create_directory_symlink(dir_, dir_.string() + "_link");
  TrainOptions linked = small(4);
  linked.checkpoint = first.checkpoint;
  linked.resume = true;
  linked.run.data_dir = dir_.string() + "_link";
  r = train(linked, log);
  fs::remove(dir_.string() + "_link");
  EXPECT_TRUE(r.ok()) << r.status();

  // eval needs the model entry of unet3d train.
  io::Checkpoint no_model = *good;
  no_model.meta.erase("model");
  const std::string path = (dir_ / "no_model.ckpt").string();
  ASSERT_TRUE(io::save_checkpoint(path, no_model.tensors, no_model.step, no_model.meta).ok());
  EvalOptions e;
  e.run = first.run;
  e.checkpoint = path;
  absl::StatusOr<EvalResult> ev = evaluate(e, log, /*score_grid=*/16);
  ASSERT_FALSE(ev.ok());
  EXPECT_EQ(ev.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(ev.status().message()).find("no model entry"), std::string::npos)
      << ev.status();
}

// --lr-decay-steps: the poly schedule reads the checkpointed step counter,
// so a run stopped at step 2 of a 4-step schedule resumes bit-exactly; the
// decayed rate changes the weights; and a resume with another schedule is
// refused.
TEST_F(Unet3dProgram, PolyDecayResumesBitExactly) {
  TrainOptions constant = small(4);
  TrainResult steady = train_ok(constant);
  TrainOptions full = small(4);
  full.lr_decay_steps = 4;
  TrainResult uninterrupted = train_ok(full);
  ASSERT_EQ(uninterrupted.losses.size(), 4u);
  ASSERT_EQ(steady.losses.size(), 4u);
  // Step 1 trains at lr either way, so step 2's loss is the same; the
  // weights after step 2 (lr * 0.75^0.9) are not.
  EXPECT_TRUE(same_bits({steady.losses[1]}, {uninterrupted.losses[1]}));
  int changed = 0;
  for (const auto& [name, values] : steady.persistent) {
    if (name.find("/adam_") == std::string::npos && name != "optimizer/step" &&
        !same_bits(values, uninterrupted.persistent.at(name))) {
      ++changed;
    }
  }
  EXPECT_GT(changed, 0) << "the schedule changed no weight";
  TrainOptions first = small(2);
  first.lr_decay_steps = 4;
  first.checkpoint = (dir_ / "half.ckpt").string();
  train_ok(first);
  TrainOptions rest = small(4);
  rest.lr_decay_steps = 4;
  rest.checkpoint = first.checkpoint;
  rest.resume = true;
  TrainResult resumed = train_ok(rest);
  ASSERT_EQ(resumed.losses.size(), 2u);
  EXPECT_TRUE(same_bits({uninterrupted.losses[2], uninterrupted.losses[3]}, resumed.losses));
  expect_same_state(uninterrupted, resumed);
  TrainOptions other = rest;
  other.lr_decay_steps = 8;
  std::ostringstream log;
  absl::StatusOr<TrainResult> refused = train(other, log);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(refused.status().message()).find("lr_decay_steps="), std::string::npos)
      << refused.status();
}

TEST_F(Unet3dProgram, EvalAndPredictOnTheTrainedModel) {
  TrainOptions o = small(6);
  o.checkpoint = (dir_ / "m.ckpt").string();
  TrainResult trained = train_ok(o);
  EXPECT_EQ(trained.model.classes, 3);  // labels 0..2 in the folder

  EvalOptions e;
  e.run = o.run;
  e.checkpoint = o.checkpoint;
  std::ostringstream log;
  absl::StatusOr<EvalResult> ev = evaluate(e, log, /*score_grid=*/16);
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_EQ(ev->grid, 12);
  EXPECT_EQ(ev->score_grid, 16);
  ASSERT_EQ(ev->subjects.size(), 1u);
  ASSERT_EQ(ev->dice.size(), 3u);
  for (double d : ev->dice) EXPECT_TRUE(d >= 0 && d <= 1) << d;
  EXPECT_NE(log.str().find("background"), std::string::npos) << log.str();

  PredictOptions p;
  p.run = o.run;
  p.checkpoint = o.checkpoint;
  p.image = (dir_ / "eval" / "images" / "c.nii.gz").string();
  p.reference = (dir_ / "eval" / "labels" / "c.nii.gz").string();
  p.out = (dir_ / "pred").string();
  absl::StatusOr<PredictResult> pr = predict(p, log);
  ASSERT_TRUE(pr.ok()) << pr.status();
  ASSERT_EQ(pr->dice.size(), 3u);

  // The label map lies on the input's grid and holds classes only.
  absl::StatusOr<io::Volume> labels = io::read_nifti(pr->nifti_path);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(labels->dims, (std::array<int64_t, 3>{22, 20, 18}));
  for (float v : labels->voxels) EXPECT_TRUE(v == 0 || v == 1 || v == 2) << v;

  // The PNG: 3 columns x 3 rows of 12 * zoom pixels with gaps, and every
  // pixel of the prediction and reference columns is the overlay of its voxel.
  absl::StatusOr<io::Image> png = io::read_image(pr->png_path);
  ASSERT_TRUE(png.ok()) << png.status();
  const int zoom = slice_zoom(12), panel = 12 * zoom;
  ASSERT_EQ(png->width, 3 * panel + 2 * kSliceGap);
  ASSERT_EQ(png->height, 3 * panel + 2 * kSliceGap);
  ASSERT_EQ(png->channels, 3);
  const GreyScale grey = grey_scale(pr->image_cube);
  int coloured = 0;
  for (int view = 0; view < 3; ++view) {
    for (int u = 0; u < 12; ++u) {
      for (int r = 0; r < 12; ++r) {
        const int64_t up = 11 - r, mid = 6;
        const size_t v = view == 0   ? pr->image_cube.index(u, up, mid)
                         : view == 1 ? pr->image_cube.index(u, mid, up)
                                     : pr->image_cube.index(mid, u, up);
        const float g = grey(pr->image_cube.voxels[v]);
        for (int col = 0; col < 3; ++col) {
          const int label = col == 0   ? 0
                            : col == 1 ? static_cast<int>(pr->prediction.voxels[v])
                                       : static_cast<int>(pr->reference_cube.voxels[v]);
          coloured += label > 0;
          const std::array<float, 3> want = overlay_pixel(g, label);
          // The pixel at the centre of the voxel's zoom x zoom block.
          const int x = col * (panel + kSliceGap) + u * zoom + zoom / 2;
          const int y = view * (panel + kSliceGap) + r * zoom + zoom / 2;
          for (int ch = 0; ch < 3; ++ch) {
            const float have =
                png->data[(static_cast<size_t>(y) * png->width + x) * 3 + static_cast<size_t>(ch)];
            ASSERT_NEAR(have, want[static_cast<size_t>(ch)], 0.6 / 255)
                << "view " << view << " column " << col << " voxel " << u << "," << r;
          }
        }
      }
    }
  }
  EXPECT_GT(coloured, 0);  // the reference has foreground on the slices

  // A reference whose labels train would refuse (fractional, or a class the
  // model lacks) is refused by predict too, naming the file and the label.
  for (float bad : {1.5f, 3.0f}) {
    absl::StatusOr<io::Volume> ref = io::read_nifti(p.reference);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ref->voxels[7] = bad;
    const std::string bad_ref = (dir_ / "bad_ref.nii.gz").string();
    ASSERT_TRUE(io::write_nifti(bad_ref, *ref, io::NiftiType::kFloat32).ok());
    PredictOptions q = p;
    q.reference = bad_ref;
    absl::StatusOr<PredictResult> refused = predict(q, log);
    ASSERT_FALSE(refused.ok()) << "label " << bad;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string m(refused.status().message());
    EXPECT_NE(m.find(bad_ref + ": label " + absl::StrCat(bad) + " is not a class id"),
              std::string::npos)
        << m;
  }
}

// predict --out is a file name prefix: a folder ("DIR/", or an existing
// folder) would have written the hidden DIR/.nii.gz.
TEST_F(Unet3dProgram, PredictOutMustNotBeAFolder) {
  for (const std::string& out : {dir_.string() + "/", dir_.string()}) {
    auto cmd = parse_command_line({"predict", "--checkpoint", "m.ckpt", "--out", out});
    ASSERT_FALSE(cmd.ok()) << out;
    EXPECT_EQ(cmd.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(cmd.status().message()).find("a file name prefix, not a folder"),
              std::string::npos)
        << cmd.status();
  }
  EXPECT_TRUE(
      parse_command_line({"predict", "--checkpoint", "m.ckpt", "--out", (dir_ / "p").string()})
          .ok());
}

// A stray label of 1e6 in a user's folder made a million classes; without
// --classes at most kMaxInferredClasses are taken from the data, and the
// host-memory check of the batches uses the classes the data has.
TEST_F(Unet3dProgram, HugeLabelsAreRefusedAndTheBatchCheckUsesTheDataClasses) {
  const fs::path label = dir_ / "train" / "labels" / "b.nii.gz";
  absl::StatusOr<io::Volume> l = io::read_nifti(label.string());
  ASSERT_TRUE(l.ok()) << l.status();
  l->voxels[3] = 1e6f;
  ASSERT_TRUE(io::write_nifti(label.string(), *l, io::NiftiType::kFloat32).ok());
  std::ostringstream log;
  absl::StatusOr<TrainResult> r = train(small(1), log);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string m(r.status().message());
  EXPECT_NE(m.find(label.string() + ": label 1e+06 is not a class id (whole numbers 0..255"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("give --classes for more"), std::string::npos) << m;

  // 255 classes taken from the data are checked against the host memory
  // with those classes, not --classes: a batch that fits with 13 classes
  // does not with 255 at this size.
  l->voxels[3] = 254;
  ASSERT_TRUE(io::write_nifti(label.string(), *l, io::NiftiType::kFloat32).ok());
  TrainOptions big = small(1);
  const uint64_t limit = io::host_memory_limit_bytes();
  // The batch whose one-hot bytes with 255 classes exceed the limit while
  // those with 14 do not: b (1 + c) s^3 4 bytes, s = 8.
  big.batch = static_cast<int64_t>(limit / ((1 + 100) * 512 * 4));
  ASSERT_TRUE(check_batch_memory(big, 13).ok());
  ASSERT_FALSE(check_batch_memory(big, 255).ok());
  r = train(big, log);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("and 255 classes"), std::string::npos)
      << r.status();
}

// A few steps on crops of the real volume (ch2bet / ch2 with the AAL
// classes): LMS on and off are bit-identical.
TEST(Unet3dRealVolume, LmsOnAndOffAreBitIdenticalOnTheMri) {
  const std::string dir = std::string(LMS_SOURCE_DIR) + "/data/mri";
  if (!fs::exists(dir + "/aal.nii.gz")) {
    GTEST_SKIP() << dir << " not fetched (scripts/fetch_data.sh --mri-only); the synthetic "
                 << "folder is tested above";
  }
  TrainOptions o;
  o.run.data_dir = dir;
  o.run.device.capacity_bytes = 256 * kMiB;
  o.run.device.threads = 1;
  o.model.filters = 2;
  o.model.levels = 2;
  o.model.segmentation_levels = 2;
  o.size = 16;
  o.grid = 20;
  o.steps = 2;
  o.seed = kSeed;
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  TrainResult plain = train_ok(o);
  ASSERT_EQ(plain.losses.size(), 2u);
  EXPECT_EQ(plain.model.classes, 13);
  TrainOptions with_lms = o;
  with_lms.run.lms_overrides = {
      "policy=auto", "auto_actions=swap",
      "device_memory_limit=" + std::to_string(plain.peak_device_bytes * 85 / 100)};
  TrainResult lms = train_ok(with_lms);
  EXPECT_GT(lms.bytes_d2h_per_step, 0u);
  EXPECT_TRUE(same_bits(plain.losses, lms.losses));
  expect_same_state(plain, lms);
}

}  // namespace
}  // namespace lms::unet3d
