// lms-bench contention at small scale: a 4-layer, 8-channel VDSR on 32x32
// random crops, batch 16 (512 KiB activations), with LMS under about 0.7 of
// its no-LMS peak (5% above the working-set limit; it swaps about 0.5 MiB
// per step), on 1 and then 2 devices sharing a 50 MB/s link cut in 64 KiB
// chunks, so a copy of one activation is 8 chunks and two interleave. Checked: both configurations
// run and swap, the simulator predicts the shared link slower, each device of the pair copies
// slower than the device alone (an ordering, not a rate), and the table, the comparison line and
// the JSON hold what the README promises.
#include "contention.h"

#include <sstream>

#include "bench.h"
#include "gtest/gtest.h"

namespace lms::bench {
namespace {

ModelFactory tiny_vdsr() {
  auto f = vdsr_factory({.depth = 4, .channels = 8, .crop = 32, .seed = 7}, nullptr);
  EXPECT_TRUE(f.ok()) << f.status();
  return *f;
}

constexpr double kLinkBytesPerS = 50e6;

// Bytes copied both ways / time a copy stream was busy, per step.
double copy_rate(const ContentionDevice& d) {
  const double in = static_cast<double>(d.bytes_h2d_per_step);
  const double out = static_cast<double>(d.bytes_d2h_per_step);
  return (in + out) / (in / d.h2d_bytes_per_s + out / d.d2h_bytes_per_s);
}

ContentionOptions tiny_options() {
  ContentionOptions o;
  o.size = 16;
  o.steps = 4;
  o.link = {.d2h_bytes_per_s = kLinkBytesPerS,
            .h2d_bytes_per_s = kLinkBytesPerS,
            .latency_s = 5e-6,
            .chunk_bytes = 64 << 10};
  o.host_pool_bytes = uint64_t{64} << 20;
  return o;
}

TEST(Contention, TwoDevicesOnOneLinkCopySlowerAndArePredictedSlower) {
  std::ostringstream log;
  auto r = run_contention(tiny_vdsr(), tiny_options(), log);
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf("%s", format_contention(*r).c_str());
  ASSERT_EQ(r->cases.size(), 2u);
  const ContentionCase& one = r->cases[0];
  const ContentionCase& two = r->cases[1];
  ASSERT_EQ(one.runs.size(), 1u);
  ASSERT_EQ(two.runs.size(), 2u);
  EXPECT_LT(r->budget_bytes, r->no_lms_peak_bytes);
  for (const ContentionCase* c : {&one, &two}) {
    EXPECT_GT(c->planned_bytes_out_per_step, 0u) << c->devices;
    for (const ContentionDevice& d : c->runs) {
      EXPECT_GT(d.bytes_d2h_per_step, 0u) << c->devices;
      EXPECT_EQ(d.step_s.size(), 4u);
      EXPECT_GT(d.compute_utilisation, 0) << c->devices;
      EXPECT_LE(d.compute_utilisation, 1.0 + 1e-9) << c->devices;
    }
  }
  // The lockstep model: every copy takes twice the bandwidth time.
  EXPECT_GT(two.predicted_step_s, one.predicted_step_s);
  // A device alone never copies faster than the link; sharing it, each
  // device copies slower than the device alone did. Both directions
  // together: the swap-ins of the backward pass overlap less than the
  // swap-outs, as the two devices drift apart within a step.
  EXPECT_LE(one.runs[0].h2d_bytes_per_s, kLinkBytesPerS * 1.001);
  EXPECT_LE(one.runs[0].d2h_bytes_per_s, kLinkBytesPerS * 1.001);
  for (const ContentionDevice& d : two.runs) {
    EXPECT_LT(copy_rate(d), 0.9 * copy_rate(one.runs[0]));
  }
  const std::string table = format_contention(*r);
  EXPECT_NE(table.find("devices/link"), std::string::npos) << table;
  EXPECT_NE(table.find("2 vs 1 device per link"), std::string::npos) << table;
  EXPECT_NE(table.find("within 20%"), std::string::npos) << table;
  EXPECT_NE(table.find("1 compute thread per device"), std::string::npos) << table;
  const nlohmann::json j = to_json(*r);
  ASSERT_EQ(j["cases"].size(), 2u);
  EXPECT_EQ(j["cases"][1]["devices_per_link"], 2);
  EXPECT_EQ(j["cases"][1]["devices"].size(), 2u);
  EXPECT_EQ(j["cases"][1]["within_tolerance"], two.within_tolerance());
}

TEST(Contention, BadOptionsNameTheFlag) {
  std::ostringstream log;
  ContentionOptions o = tiny_options();
  o.steps = 1;
  auto r = run_contention(tiny_vdsr(), o, log);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("--steps"), std::string::npos) << r.status();
  o = tiny_options();
  o.link.h2d_bytes_per_s = -1;
  r = run_contention(tiny_vdsr(), o, log);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("h2d_bytes_per_s"), std::string::npos)
      << r.status();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"contention", "--devices", "0"},
        std::vector<std::string>{"contention", "--devices", "17"},
        std::vector<std::string>{"contention", "--model", "resnet"},
        std::vector<std::string>{"contention", "--batch", "4,8"},
        std::vector<std::string>{"contention", "--capacity", "1GiB"},
        std::vector<std::string>{"contention", "--threads", "2"}}) {
    std::ostringstream out, err;
    EXPECT_EQ(run_main(args, out, err), 2) << args[1] << " " << args[2];
    EXPECT_NE(err.str().find(args[1]), std::string::npos) << err.str();
  }
  absl::StatusOr<BenchCommand> cmd = parse_command_line({"contention"});
  ASSERT_TRUE(cmd.ok()) << cmd.status();
  EXPECT_EQ(cmd->sizes, std::vector<int64_t>{16});
  EXPECT_EQ(cmd->devices, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(cmd->link_bytes_per_s, kContentionLinkBytesPerS);
  EXPECT_EQ(cmd->threads, 1);
}

}  // namespace
}  // namespace lms::bench
