#include "lms/io/checkpoint.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "gtest/gtest.h"
#include "lms/io/file_util.h"
#include "temp_dir_test.h"

namespace lms::io {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kSeed = 424242;

class CheckpointTest : public TempDirTest {
 protected:
  CheckpointTest() : TempDirTest(kSeed) {}
  int files_in_dir() const {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) n += e.is_regular_file();
    return n;
  }
};

// Random bit patterns, so NaN payloads, infinities, -0 and denormals all occur.
std::vector<NamedTensor> random_tensors(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<NamedTensor> ts = {{"conv1.weight", {8, 1, 3, 3}, {}},
                                 {"conv1.bias", {8}, {}},
                                 {"scalar", {}, {}},
                                 {"empty", {0, 4}, {}},
                                 {"adam.m/conv1.weight", {8, 1, 3, 3}, {}}};
  for (NamedTensor& t : ts) {
    size_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    for (size_t i = 0; i < n; ++i)
      t.data.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  }
  ts[1].data[0] = -0.0f;
  ts[1].data[1] = std::numeric_limits<float>::infinity();
  ts[1].data[2] = std::numeric_limits<float>::denorm_min();
  return ts;
}

void expect_bit_equal(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].shape, b[i].shape);
    ASSERT_EQ(a[i].data.size(), b[i].data.size()) << a[i].name;
    for (size_t k = 0; k < a[i].data.size(); ++k) {
      ASSERT_EQ(std::bit_cast<uint32_t>(a[i].data[k]), std::bit_cast<uint32_t>(b[i].data[k]))
          << a[i].name << "[" << k << "]";
    }
  }
}

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

TEST(Crc32, MatchesTheStandardCheckValue) {
  const char* check = "123456789";
  EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>(check), 9), 0xCBF43926u);
  EXPECT_EQ(crc32(nullptr, 0), 0u);
}

TEST_F(CheckpointTest, RoundTripIsBitExact) {
  std::vector<NamedTensor> ts = random_tensors(kSeed);
  std::map<std::string, std::string> meta = {{"model", "vdsr"}, {"lr", "1e-4"}, {"empty", ""}};
  ASSERT_TRUE(save_checkpoint(path("a.ckpt"), ts, -123456789012345, meta).ok());
  absl::StatusOr<Checkpoint> ck = load_checkpoint(path("a.ckpt"));
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->step, -123456789012345);
  EXPECT_EQ(ck->meta, meta);
  expect_bit_equal(ck->tensors, ts);
  ASSERT_NE(ck->find("conv1.bias"), nullptr);
  EXPECT_EQ(ck->find("conv1.bias")->shape, std::vector<int64_t>{8});
  EXPECT_EQ(ck->find("missing"), nullptr);
  EXPECT_EQ(files_in_dir(), 1);  // no temporary file left behind
}

TEST_F(CheckpointTest, EmptyCheckpointRoundTrips) {
  ASSERT_TRUE(save_checkpoint(path("e.ckpt"), {}, 0, {}).ok());
  absl::StatusOr<Checkpoint> ck = load_checkpoint(path("e.ckpt"));
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_TRUE(ck->tensors.empty());
  EXPECT_TRUE(ck->meta.empty());
}

// Any single corrupted byte is caught: in the header by the magic, version or
// length checks, in the payload by the CRC.
TEST_F(CheckpointTest, EveryCorruptedByteIsDataLossNamingThePath) {
  ASSERT_TRUE(save_checkpoint(path("c.ckpt"), random_tensors(kSeed), 7, {{"k", "v"}}).ok());
  std::vector<uint8_t> good = slurp(path("c.ckpt"));
  std::mt19937 rng(kSeed);
  for (size_t at = 0; at < good.size(); ++at) {
    std::vector<uint8_t> bad = good;
    bad[at] ^= static_cast<uint8_t>(1 + rng() % 255);
    spit(path("bad.ckpt"), bad);
    absl::Status s = load_checkpoint(path("bad.ckpt")).status();
    ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << "byte " << at << ": " << s;
    ASSERT_NE(s.message().find(path("bad.ckpt")), std::string::npos) << s;
  }
}

TEST_F(CheckpointTest, EveryTruncationAndWrongMagicIsDataLoss) {
  ASSERT_TRUE(save_checkpoint(path("t.ckpt"), random_tensors(kSeed), 1, {}).ok());
  std::vector<uint8_t> good = slurp(path("t.ckpt"));
  for (size_t len = 0; len < good.size(); ++len) {
    spit(path("cut.ckpt"), std::vector<uint8_t>(good.begin(), good.begin() + len));
    ASSERT_EQ(load_checkpoint(path("cut.ckpt")).status().code(), absl::StatusCode::kDataLoss)
        << "cut at " << len;
  }
  std::vector<uint8_t> padded = good;
  padded.push_back(0);
  spit(path("pad.ckpt"), padded);
  EXPECT_EQ(load_checkpoint(path("pad.ckpt")).status().code(), absl::StatusCode::kDataLoss);
  spit(path("png.ckpt"), {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 0, 0,
                          0,    0,   0,   0,   0,    0,    0,    0,    0, 0, 0, 0});
  absl::Status magic = load_checkpoint(path("png.ckpt")).status();
  EXPECT_EQ(magic.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(magic.message().find("magic"), std::string::npos) << magic;
  EXPECT_EQ(load_checkpoint(path("none.ckpt")).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointTest, InvalidTensorsAreRejectedBeforeWriting) {
  auto code = [&](std::vector<NamedTensor> ts) {
    return save_checkpoint(path("x.ckpt"), ts, 0, {}).code();
  };
  EXPECT_EQ(code({{"", {1}, {1.0f}}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"a", {1}, {1.0f}}, {"a", {1}, {2.0f}}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"a", {2, 2}, {1.0f}}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"a", {-1}, {}}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"a", std::vector<int64_t>(9, 1), {1.0f}}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(files_in_dir(), 0);
}

// A save that fails part-way (the file-size limit stops the write with EFBIG,
// which works even for root, unlike a read-only folder) must leave the old
// checkpoint readable and no temporary file behind.
TEST_F(CheckpointTest, FailedSaveLeavesTheOldCheckpointIntact) {
  std::vector<NamedTensor> old_ts = {{"w", {4}, {1, 2, 3, 4}}};
  ASSERT_TRUE(save_checkpoint(path("m.ckpt"), old_ts, 1, {}).ok());
  std::vector<NamedTensor> big = {{"w", {1 << 16}, std::vector<float>(1 << 16, 0.5f)}};

  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limited = saved;
  limited.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  absl::Status s = save_checkpoint(path("m.ckpt"), big, 2, {});
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, old_handler);

  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  absl::StatusOr<Checkpoint> ck = load_checkpoint(path("m.ckpt"));
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->step, 1);
  expect_bit_equal(ck->tensors, old_ts);
  EXPECT_EQ(files_in_dir(), 1);
}

TEST_F(CheckpointTest, UnwritableDestinationsFailCleanly) {
  std::vector<NamedTensor> ts = {{"w", {1}, {1.0f}}};
  EXPECT_EQ(save_checkpoint(path("no/such/dir/a.ckpt"), ts, 0, {}).code(),
            absl::StatusCode::kNotFound);
  // Renaming over a non-empty directory fails after the temporary file is written.
  fs::create_directories(dir_ / "taken" / "child");
  absl::Status s = save_checkpoint(path("taken"), ts, 0, {});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("taken"), std::string::npos) << s;
  EXPECT_EQ(files_in_dir(), 0);
  EXPECT_TRUE(fs::is_directory(dir_ / "taken" / "child"));
  EXPECT_EQ(save_checkpoint(dir_.string() + "/", ts, 0, {}).code(),
            absl::StatusCode::kInvalidArgument);
}

// The pid of a process that has exited and been reaped: no live process owns it
// (until the kernel reuses it, which takes a full cycle of the pid space).
pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

// Per Note [Stale temporary files], a killed writer's temporary file is removed
// by the next write of the same path; a live writer's file, other paths'
// files and other names are left alone.
TEST_F(CheckpointTest, StaleTempFilesOfKilledWritersAreRemovedOnTheNextWrite) {
  const std::string dead = std::to_string(dead_pid());
  const std::vector<std::string> stale = {
      "m.ckpt.tmp." + dead + ".a1B2c3",  // killed writer
      "m.ckpt.tmp." + dead + ".Zx81Qa",
  };
  const std::vector<std::string> kept = {
      "m.ckpt.tmp.1.q9W8e7",                                   // pid 1 is alive
      "m.ckpt.tmp." + std::to_string(::getpid()) + ".Pp0Oo9",  // this process
      "other.ckpt.tmp." + dead + ".a1B2c3",                    // another checkpoint
      "m.ckpt.tmp.notes",                                      // not a temporary name
      "m.ckpt.tmp.backup",  // the older pid-less shape: could be a user's file
      "m.ckpt.tmp." + dead + ".toolong7",
  };
  for (const std::string& name : stale) spit(path(name), {1, 2, 3});
  for (const std::string& name : kept) spit(path(name), {1, 2, 3});
  std::vector<NamedTensor> ts = {{"w", {2}, {1.5f, -2.0f}}};
  ASSERT_TRUE(save_checkpoint(path("m.ckpt"), ts, 4, {{"k", "v"}}).ok());
  for (const std::string& name : stale) EXPECT_FALSE(fs::exists(path(name))) << name;
  for (const std::string& name : kept) EXPECT_TRUE(fs::exists(path(name))) << name;
  absl::StatusOr<Checkpoint> ck = load_usable_checkpoint(path("m.ckpt"));
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->step, 4);
  expect_bit_equal(ck->tensors, ts);
  EXPECT_EQ(files_in_dir(), 1 + static_cast<int>(kept.size()));
}

// A writer killed between creating its temporary file and renaming it: the
// temporary file it leaves is named after its pid and goes on the next save.
TEST_F(CheckpointTest, TempFileOfAWriterKilledMidWriteIsRemoved) {
  std::vector<NamedTensor> ts = {{"w", {1 << 16}, std::vector<float>(1 << 16, 0.25f)}};
  pid_t pid = ::fork();
  if (pid == 0) {
    // Stops the write with SIGXFSZ (default action: kill) part-way.
    struct rlimit limited = {4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limited);
    ::signal(SIGXFSZ, SIG_DFL);
    (void)save_checkpoint(path("k.ckpt"), ts, 1, {});
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer was not killed mid-write";
  ASSERT_EQ(files_in_dir(), 1);  // its temporary file
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().rfind("k.ckpt.tmp." + std::to_string(pid) + ".", 0), 0u)
        << e.path();
  }
  ASSERT_TRUE(save_checkpoint(path("k.ckpt"), ts, 2, {}).ok());
  EXPECT_EQ(files_in_dir(), 1);
  absl::StatusOr<Checkpoint> ck = load_usable_checkpoint(path("k.ckpt"));
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->step, 2);
}

TEST_F(CheckpointTest, CheckWritableNamesThePathAndTheReason) {
  EXPECT_TRUE(check_writable(path("a.ckpt")).ok());
  EXPECT_TRUE(check_writable(path("new/sub/a.ckpt")).ok());
  EXPECT_TRUE(fs::is_directory(dir_ / "new" / "sub"));  // created, so the save will work
  EXPECT_EQ(files_in_dir(), 0);                         // the probe is gone
  spit(path("file"), {1});
  // Under a regular file nothing can be created, even by root.
  absl::Status s = check_writable(path("file/a.ckpt"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find(path("file/a.ckpt")), std::string::npos) << s;
  EXPECT_NE(s.message().find("Not a directory"), std::string::npos) << s;
  s = check_writable(path("file/deeper/a.ckpt"));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot create the folder"), std::string::npos) << s;
  s = check_writable("/proc/lms_checkpoint_test.ckpt");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/proc"), std::string::npos) << s;
  EXPECT_EQ(check_writable(dir_.string()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(check_writable(dir_.string() + "/").code(), absl::StatusCode::kInvalidArgument);
}

// The format keeps any value (RoundTripIsBitExact); programs that use a
// checkpoint read it with load_usable_checkpoint, which refuses what no run
// could continue from.
TEST_F(CheckpointTest, UsableCheckpointsHaveFiniteValuesAndStepAtLeastZero) {
  std::vector<NamedTensor> ts = {{"conv1/w", {4}, {1, 2, 3, 4}}, {"conv1/b", {2}, {0, 0}}};
  ASSERT_TRUE(save_checkpoint(path("ok.ckpt"), ts, 0, {}).ok());
  EXPECT_TRUE(load_usable_checkpoint(path("ok.ckpt")).ok());

  ts[1].data[1] = std::numeric_limits<float>::quiet_NaN();
  ts[0].data[2] = std::numeric_limits<float>::infinity();
  ts[0].data[3] = -std::numeric_limits<float>::infinity();
  ASSERT_TRUE(save_checkpoint(path("nan.ckpt"), ts, 5, {}).ok());
  EXPECT_TRUE(load_checkpoint(path("nan.ckpt")).ok());
  absl::Status s = load_usable_checkpoint(path("nan.ckpt")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  for (const std::string& part :
       {path("nan.ckpt"), std::string("tensor 'conv1/w'"), std::string("2 non-finite values"),
        std::string("Inf at element 2 of 4"), std::string("finite")}) {
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " not in " << s;
  }

  ts = {{"w", {1}, {1}}};
  ASSERT_TRUE(save_checkpoint(path("neg.ckpt"), ts, -1, {}).ok());
  s = load_usable_checkpoint(path("neg.ckpt")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("field 'step' is -1"), std::string::npos) << s;
  EXPECT_NE(s.message().find(path("neg.ckpt")), std::string::npos) << s;
  EXPECT_EQ(load_usable_checkpoint(path("none.ckpt")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace lms::io
