#include "lms/config.h"

#include <cmath>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "lms/graph.h"
#include "swap_test_util.h"

namespace lms {
namespace {

std::string message(const absl::Status& s) { return std::string(s.message()); }

// Equal up to the rounding of unit parsing ("5us" * 1e-6).
void expect_same(const LmsConfig& a, const LmsConfig& b) {
  EXPECT_EQ(a.enabled, b.enabled);
  EXPECT_EQ(a.policy, b.policy);
  EXPECT_EQ(a.device_memory_limit, b.device_memory_limit);
  EXPECT_EQ(a.host_memory_limit, b.host_memory_limit);
  EXPECT_EQ(a.swapout_threshold, b.swapout_threshold);
  EXPECT_EQ(a.swapin_ahead, b.swapin_ahead);
  EXPECT_EQ(a.swapin_groupby, b.swapin_groupby);
  EXPECT_EQ(a.sync_mode, b.sync_mode);
  EXPECT_EQ(a.min_tensor_bytes, b.min_tensor_bytes);
  EXPECT_EQ(a.tensors, b.tensors);
  EXPECT_EQ(a.alignment_bytes, b.alignment_bytes);
  auto near = [](double x, double y) { EXPECT_NEAR(x, y, 1e-12 * std::abs(y)); };
  near(a.fragmentation_reserve, b.fragmentation_reserve);
  near(a.link.d2h_bytes_per_s, b.link.d2h_bytes_per_s);
  near(a.link.h2d_bytes_per_s, b.link.h2d_bytes_per_s);
  near(a.link.copy_latency_s, b.link.copy_latency_s);
  near(a.cost_model.compute_flops_per_s, b.cost_model.compute_flops_per_s);
  near(a.cost_model.memory_bytes_per_s, b.cost_model.memory_bytes_per_s);
  near(a.cost_model.kernel_launch_s, b.cost_model.kernel_launch_s);
}

TEST(Config, DocumentedFileGivesTheDefaults) {
  auto file = LmsConfig::from_file(std::string(LMS_SOURCE_DIR) + "/configs/lms.toml");
  ASSERT_TRUE(file.ok()) << file.status();
  expect_same(*file, LmsConfig{});
}

TEST(Config, ValuesWithUnits) {
  auto c = LmsConfig::from_toml_string(R"(
enabled = false
policy = "manual"
device_memory_limit = "6GiB"
host_memory_limit = 1000
swapout_threshold = 3
swapin_ahead = 2
swapin_groupby = 0
sync_mode = 3
min_tensor_bytes = "1MB"
tensors = ["relu1", "conv2"]
fragmentation_reserve = 0.1
alignment = 512
[link]
d2h_bandwidth = "16GB/s"
h2d_bandwidth = 2e9
copy_latency = "8us"
[cost_model]
compute_rate = "10TFLOP/s"
memory_bandwidth = "900GB/s"
kernel_launch = 0.00001
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->enabled);
  EXPECT_EQ(c->policy, SwapPolicy::kManual);
  EXPECT_EQ(c->device_memory_limit, 6ull << 30);
  EXPECT_EQ(c->host_memory_limit, 1000u);
  EXPECT_EQ(c->swapout_threshold, 3);
  EXPECT_EQ(c->swapin_ahead, 2);
  EXPECT_EQ(c->swapin_groupby, 0);
  EXPECT_EQ(c->sync_mode, 3);
  EXPECT_EQ(c->min_tensor_bytes, 1000000u);
  EXPECT_EQ(c->tensors, (std::vector<std::string>{"relu1", "conv2"}));
  EXPECT_DOUBLE_EQ(c->fragmentation_reserve, 0.1);
  EXPECT_EQ(c->alignment_bytes, 512u);
  EXPECT_DOUBLE_EQ(c->link.d2h_bytes_per_s, 16e9);
  EXPECT_DOUBLE_EQ(c->link.h2d_bytes_per_s, 2e9);
  EXPECT_DOUBLE_EQ(c->link.copy_latency_s, 8e-6);
  EXPECT_DOUBLE_EQ(c->cost_model.compute_flops_per_s, 10e12);
  EXPECT_DOUBLE_EQ(c->cost_model.memory_bytes_per_s, 900e9);
  EXPECT_DOUBLE_EQ(c->cost_model.kernel_launch_s, 1e-5);
  // to_toml reads back to the same config.
  auto again = LmsConfig::from_toml_string(c->to_toml());
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << c->to_toml();
  EXPECT_EQ(again->to_toml(), c->to_toml());
}

struct BadCase {
  const char* toml;
  const char* key;    // must be named in the message
  const char* value;  // must be named in the message
};

TEST(Config, EachBadKeyOrValueIsNamed) {
  const BadCase cases[] = {
      {"enabled = 1", "enabled", "1"},
      {"policy = \"greedy\"", "policy", "greedy"},
      {"policy = 3", "policy", "3"},
      {"device_memory_limit = \"6 GiBs\"", "device_memory_limit", "6 GiBs"},
      {"device_memory_limit = -5", "device_memory_limit", "-5"},
      {"device_memory_limit = 1.5", "device_memory_limit", "1.5"},
      {"host_memory_limit = true", "host_memory_limit", "true"},
      {"swapout_threshold = -1", "swapout_threshold", "-1"},
      {"swapin_ahead = 0", "swapin_ahead", "0"},
      {"swapin_groupby = \"5\"", "swapin_groupby", "5"},
      {"sync_mode = 4", "sync_mode", "4"},
      {"min_tensor_bytes = \"lots\"", "min_tensor_bytes", "lots"},
      {"tensors = [1, 2]", "tensors", "1"},
      {"fragmentation_reserve = 0.95", "fragmentation_reserve", "0.95"},
      {"alignment = 300", "alignment", "300"},
      {"[link]\nd2h_bandwidth = \"12GB\"", "link.d2h_bandwidth", "12GB"},
      {"[link]\nh2d_bandwidth = 0", "link.h2d_bandwidth", "0"},
      {"[link]\ncopy_latency = \"5 parsecs\"", "link.copy_latency", "5 parsecs"},
      {"[cost_model]\ncompute_rate = \"fast\"", "cost_model.compute_rate", "fast"},
      {"[cost_model]\nmemory_bandwidth = -1", "cost_model.memory_bandwidth", "-1"},
      {"[cost_model]\nkernel_launch = \"-1us\"", "cost_model.kernel_launch", "-1us"},
      {"swap_threshold = 3", "swap_threshold", "3"},  // unknown key
      {"[links]\nd2h_bandwidth = \"1GB/s\"", "links.d2h_bandwidth", "1GB/s"},
  };
  for (const BadCase& c : cases) {
    auto config = LmsConfig::from_toml_string(c.toml);
    ASSERT_FALSE(config.ok()) << c.toml;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(message(config.status()).find(c.key), std::string::npos) << config.status();
    EXPECT_NE(message(config.status()).find(c.value), std::string::npos) << config.status();
    EXPECT_NE(message(config.status()).find("allowed"), std::string::npos) << config.status();
  }
}

TEST(Config, SyntaxErrorsAndMissingFiles) {
  auto c = LmsConfig::from_toml_string("policy = \"auto\nsync_mode = 1");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message(c.status()).find("line 1"), std::string::npos) << c.status();
  auto f = LmsConfig::from_file("/nonexistent/lms.toml");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message(f.status()).find("/nonexistent/lms.toml"), std::string::npos);
  EXPECT_EQ(LmsConfig::from_file(LMS_SOURCE_DIR).status().code(),
            absl::StatusCode::kInvalidArgument);  // a directory
}

TEST(Config, OverridesUseTheSameKeysAndValidation) {
  LmsConfig c;
  EXPECT_TRUE(c.apply_override("policy=tflms").ok());
  EXPECT_EQ(c.policy, SwapPolicy::kTflms);
  EXPECT_TRUE(c.apply_override("link.h2d_bandwidth=16GB/s").ok());
  EXPECT_DOUBLE_EQ(c.link.h2d_bytes_per_s, 16e9);
  EXPECT_TRUE(c.apply_override("device_memory_limit = 2GiB").ok());
  EXPECT_EQ(c.device_memory_limit, 2ull << 30);
  EXPECT_TRUE(c.apply_override("tensors=relu1, conv2/w").ok());
  EXPECT_EQ(c.tensors, (std::vector<std::string>{"relu1", "conv2/w"}));
  EXPECT_TRUE(c.apply_override("tensors=[\"a\"]").ok());
  EXPECT_EQ(c.tensors, std::vector<std::string>{"a"});
  EXPECT_TRUE(c.apply_override("enabled=false").ok());
  EXPECT_FALSE(c.enabled);
  const std::string before = c.to_toml();
  for (const char* bad : {"sync_mode=9", "nokey", "=3", "Policy=auto", "policy=fast", "a.b=1",
                          "sync_mode=1\nenabled=true", "link=3"}) {
    absl::Status s = c.apply_override(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(c.to_toml(), before) << bad;  // unchanged on error
  }
  EXPECT_NE(message(c.apply_override("sync_mode=9")).find("sync_mode"), std::string::npos);
}

// Mutates `text` by flipping, inserting, deleting bytes or truncating.
std::string mutate(std::string text, std::mt19937_64& rng) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < edits && !text.empty(); ++i) {
    const size_t at = rng() % text.size();
    switch (rng() % 4) {
      case 0:
        text[at] = static_cast<char>(rng() % 256);
        break;
      case 1:
        text.insert(at, 1, "\"'[]={}=.,\n#\\\0x"[rng() % 16]);
        break;
      case 2:
        text.erase(at, 1 + rng() % 8);
        break;
      default:
        text.resize(at);
        break;
    }
  }
  return text;
}

TEST(ConfigFuzz, MutatedTomlAlwaysGivesAStatus) {
  const uint64_t seed = 20240611;
  std::printf("config fuzz seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  LmsConfig manual;
  manual.policy = SwapPolicy::kManual;
  manual.tensors = {"a", "b"};
  const std::string base = manual.to_toml();
  int ok = 0;
  for (int i = 0; i < 2000; ++i) {
    auto c = LmsConfig::from_toml_string(mutate(base, rng));
    if (c.ok()) {
      ++ok;
    } else {
      EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    }
    LmsConfig o;
    absl::Status s = o.apply_override(mutate("link.copy_latency=8us", rng));
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    }
  }
  EXPECT_GT(ok, 0);     // some mutations stay valid
  EXPECT_LT(ok, 2000);  // and most do not
}

TEST(GraphTextFuzz, MutatedGraphTextAlwaysGivesAStatus) {
  const uint64_t seed = 77;
  std::printf("graph text fuzz seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const std::string base = to_text(swap_test::conv_training_graph());
  int parsed = 0;
  for (int i = 0; i < 2000; ++i) {
    auto g = parse_graph(mutate(base, rng));
    if (!g.ok()) continue;
    ++parsed;
    (void)verify(*g);  // must not crash either
  }
  EXPECT_LT(parsed, 2000);
}

}  // namespace
}  // namespace lms
