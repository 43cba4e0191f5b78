#include "lms/config.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "lms/units.h"

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
  EXPECT_EQ(a.time_model, b.time_model);
  EXPECT_EQ(a.link_devices, b.link_devices);
  EXPECT_EQ(a.auto_actions, b.auto_actions);
  EXPECT_EQ(a.auto_search_plans, b.auto_search_plans);
  EXPECT_EQ(a.auto_refine_plans, b.auto_refine_plans);
  EXPECT_EQ(a.chunked_head, b.chunked_head);
  auto near = [](double x, double y) { EXPECT_NEAR(x, y, 1e-12 * std::abs(y)); };
  near(a.fragmentation_reserve, b.fragmentation_reserve);
  near(a.link.d2h_bytes_per_s, b.link.d2h_bytes_per_s);
  near(a.link.h2d_bytes_per_s, b.link.h2d_bytes_per_s);
  near(a.link.copy_latency_s, b.link.copy_latency_s);
  near(a.cost_model.compute_flops_per_s, b.cost_model.compute_flops_per_s);
  near(a.cost_model.memory_bytes_per_s, b.cost_model.memory_bytes_per_s);
  near(a.cost_model.kernel_launch_s, b.cost_model.kernel_launch_s);
}

bool same_bits(double a, double b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

// Equal exactly: every double bit for bit.
void expect_identical(const LmsConfig& a, const LmsConfig& b, const std::string& context) {
  EXPECT_EQ(a.enabled, b.enabled) << context;
  EXPECT_EQ(a.policy, b.policy) << context;
  EXPECT_EQ(a.device_memory_limit, b.device_memory_limit) << context;
  EXPECT_EQ(a.host_memory_limit, b.host_memory_limit) << context;
  EXPECT_EQ(a.swapout_threshold, b.swapout_threshold) << context;
  EXPECT_EQ(a.swapin_ahead, b.swapin_ahead) << context;
  EXPECT_EQ(a.swapin_groupby, b.swapin_groupby) << context;
  EXPECT_EQ(a.sync_mode, b.sync_mode) << context;
  EXPECT_EQ(a.min_tensor_bytes, b.min_tensor_bytes) << context;
  EXPECT_EQ(a.tensors, b.tensors) << context;
  EXPECT_EQ(a.alignment_bytes, b.alignment_bytes) << context;
  EXPECT_EQ(a.time_model, b.time_model) << context;
  EXPECT_EQ(a.link_devices, b.link_devices) << context;
  EXPECT_EQ(a.auto_actions, b.auto_actions) << context;
  EXPECT_EQ(a.auto_search_plans, b.auto_search_plans) << context;
  EXPECT_EQ(a.auto_refine_plans, b.auto_refine_plans) << context;
  EXPECT_EQ(a.chunked_head, b.chunked_head) << context;
  EXPECT_TRUE(same_bits(a.fragmentation_reserve, b.fragmentation_reserve)) << context;
  EXPECT_TRUE(same_bits(a.link.d2h_bytes_per_s, b.link.d2h_bytes_per_s)) << context;
  EXPECT_TRUE(same_bits(a.link.h2d_bytes_per_s, b.link.h2d_bytes_per_s)) << context;
  EXPECT_TRUE(same_bits(a.link.copy_latency_s, b.link.copy_latency_s)) << context;
  EXPECT_TRUE(same_bits(a.cost_model.compute_flops_per_s, b.cost_model.compute_flops_per_s))
      << context;
  EXPECT_TRUE(same_bits(a.cost_model.memory_bytes_per_s, b.cost_model.memory_bytes_per_s))
      << context;
  EXPECT_TRUE(same_bits(a.cost_model.kernel_launch_s, b.cost_model.kernel_launch_s)) << context;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
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
time_model = "roofline"
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
  EXPECT_EQ(c->time_model, TimeModel::kRoofline);
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
      {"time_model = \"measure\"", "time_model", "measure"},
      {"time_model = 1", "time_model", "1"},
      {"auto_actions = \"both\"", "auto_actions", "both"},
      {"auto_actions = 2", "auto_actions", "2"},
      {"auto_search_plans = -1", "auto_search_plans", "-1"},
      {"chunked_head = 1", "chunked_head", "1"},
      {"auto_search_plans = 1001", "auto_search_plans", "1001"},
      {"auto_search_plans = \"many\"", "auto_search_plans", "many"},
      {"auto_refine_plans = -1", "auto_refine_plans", "-1"},
      {"auto_refine_plans = 10001", "auto_refine_plans", "10001"},
      {"auto_refine_plans = 2.5", "auto_refine_plans", "2.5"},
      {"link_devices = 0", "link_devices", "0"},
      {"link_devices = 1025", "link_devices", "1025"},
      {"link_devices = 1.5", "link_devices", "1.5"},
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
  EXPECT_EQ(LmsConfig{}.time_model, TimeModel::kMeasured);
  EXPECT_TRUE(c.apply_override("time_model=roofline").ok());
  EXPECT_EQ(c.time_model, TimeModel::kRoofline);
  EXPECT_NE(c.to_toml().find("time_model = \"roofline\""), std::string::npos) << c.to_toml();
  EXPECT_EQ(LmsConfig{}.auto_actions, AutoActions::kJoint);
  EXPECT_TRUE(c.apply_override("auto_actions=recompute").ok());
  EXPECT_EQ(c.auto_actions, AutoActions::kRecompute);
  EXPECT_NE(c.to_toml().find("auto_actions = \"recompute\""), std::string::npos) << c.to_toml();
  EXPECT_EQ(LmsConfig{}.link_devices, 1);
  EXPECT_TRUE(c.apply_override("link_devices=2").ok());
  EXPECT_EQ(c.link_devices, 2);
  EXPECT_NE(c.to_toml().find("link_devices = 2"), std::string::npos) << c.to_toml();
  const std::string before = c.to_toml();
  for (const char* bad : {"sync_mode=9", "nokey", "=3", "Policy=auto", "policy=fast", "a.b=1",
                          "sync_mode=1\nenabled=true", "link=3", "time_model=fast",
                          "time_model=Measured", "link_devices=0"}) {
    absl::Status s = c.apply_override(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(c.to_toml(), before) << bad;  // unchanged on error
  }
  EXPECT_NE(message(c.apply_override("sync_mode=9")).find("sync_mode"), std::string::npos);
}

void expect_rejected(const BadCase& c, const absl::Status& s) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.toml;
  EXPECT_NE(message(s).find(c.key), std::string::npos) << c.toml << "\n" << s;
  EXPECT_NE(message(s).find(c.value), std::string::npos) << c.toml << "\n" << s;
  EXPECT_NE(message(s).find("allowed"), std::string::npos) << c.toml << "\n" << s;
}

// NaN, infinities, values a unit scales out of range, byte counts above
// 2^63 - 1 and integers TOML itself cannot hold: each names key, value and
// what is allowed.
TEST(Config, NumbersMustBeFiniteAndRepresentable) {
  const BadCase cases[] = {
      {"[link]\nd2h_bandwidth = nan", "link.d2h_bandwidth", "nan"},
      {"[link]\nd2h_bandwidth = inf", "link.d2h_bandwidth", "inf"},
      {"[link]\nh2d_bandwidth = -inf", "link.h2d_bandwidth", "-inf"},
      {"[link]\nh2d_bandwidth = \"1e308GB/s\"", "link.h2d_bandwidth", "1e308GB/s"},
      {"[link]\nh2d_bandwidth = \"inf GB/s\"", "link.h2d_bandwidth", "inf GB/s"},
      {"[link]\ncopy_latency = nan", "link.copy_latency", "nan"},
      {"[link]\ncopy_latency = inf", "link.copy_latency", "inf"},
      {"[link]\ncopy_latency = -1e-9", "link.copy_latency", "-1e-09"},
      {"[link]\ncopy_latency = 1e400", "link.copy_latency", "1e400"},
      {"[cost_model]\ncompute_rate = \"1e300PFLOP/s\"", "cost_model.compute_rate", "1e300PFLOP/s"},
      {"[cost_model]\ncompute_rate = nan", "cost_model.compute_rate", "nan"},
      {"[cost_model]\nmemory_bandwidth = \"1e300GiB/s\"", "cost_model.memory_bandwidth",
       "1e300GiB/s"},
      {"[cost_model]\nkernel_launch = \"nan s\"", "cost_model.kernel_launch", "nan s"},
      {"fragmentation_reserve = nan", "fragmentation_reserve", "nan"},
      {"device_memory_limit = \"16000000TB\"", "device_memory_limit", "16000000TB"},
      {"device_memory_limit = \"9223372036854775808\"", "device_memory_limit",
       "9223372036854775808"},
      {"device_memory_limit = 9223372036854775808", "device_memory_limit", "9223372036854775808"},
      {"device_memory_limit = 18446744073709551616", "device_memory_limit", "18446744073709551616"},
      {"host_memory_limit = \"8388608TiB\"", "host_memory_limit", "8388608TiB"},
      {"host_memory_limit = -1", "host_memory_limit", "-1"},
      {"host_memory_limit = \"-1GiB\"", "host_memory_limit", "-1GiB"},
      {"min_tensor_bytes = \"9EiB\"", "min_tensor_bytes", "9EiB"},
      {"min_tensor_bytes = \"1e30B\"", "min_tensor_bytes", "1e30B"},
      {"alignment = \"2TiB\"", "alignment", "2TiB"},
      {"swapin_ahead = 99999999999999999999", "swapin_ahead", "99999999999999999999"},
  };
  for (const BadCase& c : cases) {
    expect_rejected(c, LmsConfig::from_toml_string(c.toml).status());
  }
}

// Byte counts are exact integers up to 2^63 - 1, also when given as strings
// (a double would round 2^63 - 1 up to 2^63 and 2^53 + 1 down to 2^53).
TEST(Config, ByteCountsAreExactUpTo2To63Minus1) {
  constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
  const std::pair<const char*, uint64_t> cases[] = {
      {"device_memory_limit = 9223372036854775807", kMax},
      {"device_memory_limit = \"9223372036854775807\"", kMax},
      {"device_memory_limit = \"9223372036854775807 B\"", kMax},
      {"device_memory_limit = \"8388607TiB\"", 8388607ull << 40},
      {"device_memory_limit = \"9007199254740993B\"", (1ull << 53) + 1},
      {"device_memory_limit = 9007199254740993", (1ull << 53) + 1},
      {"device_memory_limit = \"1.5KiB\"", 1536},
      {"device_memory_limit = \"0.5B\"", 0},
      {"device_memory_limit = \"9.2e18B\"", 9200000000000000000ull},
  };
  for (const auto& [toml, bytes] : cases) {
    auto c = LmsConfig::from_toml_string(toml);
    ASSERT_TRUE(c.ok()) << toml << ": " << c.status();
    EXPECT_EQ(c->device_memory_limit, bytes) << toml;
    auto again = LmsConfig::from_toml_string(c->to_toml());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->device_memory_limit, bytes) << toml;
  }
}

TEST(Config, TablesMustBeKnownAndNonEmpty) {
  const std::pair<const char*, const char*> cases[] = {
      {"[link]\n", "'link'"},
      {"[cost_model]\n# nothing here\n", "'cost_model'"},
      {"link = {}\n", "'link'"},
      {"[foo]\n", "'foo'"},
      {"[foo]\nx = 1\n", "'foo.x'"},
      {"[link.extra]\n", "'link.extra'"},
      {"[link]\nd2h_bandwidth = \"1GB/s\"\n[link.sub]\nx = 1\n", "'link.sub'"},
      {"[[link]]\nd2h_bandwidth = 1\n", "'link' is a table"},
      {"enabled = {}\n", "'enabled'"},
  };
  for (const auto& [toml, named] : cases) {
    auto c = LmsConfig::from_toml_string(toml);
    ASSERT_FALSE(c.ok()) << toml;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(message(c.status()).find(named), std::string::npos) << toml << "\n" << c.status();
    EXPECT_NE(message(c.status()).find("allowed"), std::string::npos) << c.status();
  }
  auto empty = LmsConfig::from_toml_string("[link]\n");
  EXPECT_NE(message(empty.status()).find("allowed tables: link, cost_model"), std::string::npos)
      << empty.status();
}

// toml++ follows TOML 1.0 here: a table defined by dotted keys cannot be
// reopened with a [table] header, and no key may be set twice.
TEST(Config, AKeyGivenTwiceIsAnError) {
  const std::pair<const char*, const char*> cases[] = {
      {"link.d2h_bandwidth = \"1GB/s\"\n[link]\nd2h_bandwidth = \"2GB/s\"\n", "'link'"},
      {"link.d2h_bandwidth = \"1GB/s\"\n[link]\nh2d_bandwidth = \"2GB/s\"\n", "'link'"},
      {"link = { d2h_bandwidth = 1 }\n[link]\nh2d_bandwidth = 2\n", "'link'"},
      {"[link]\nd2h_bandwidth = 1\n[link]\nh2d_bandwidth = 1\n", "'link'"},
      {"[link]\nd2h_bandwidth = 1\nd2h_bandwidth = 2\n", "'d2h_bandwidth'"},
      {"enabled = true\nenabled = false\n", "'enabled'"},
      // A quoted dotted key is one TOML key, so TOML sees no duplicate; it
      // names the same setting as the key under [link].
      {"\"link.copy_latency\" = \"5us\"\n[link]\ncopy_latency = \"6us\"\n", "'link.copy_latency'"},
      {"[link]\ncopy_latency = \"6us\"\n", nullptr},
  };
  for (const auto& [toml, named] : cases) {
    auto c = LmsConfig::from_toml_string(toml);
    if (named == nullptr) {  // the key given once: accepted
      EXPECT_TRUE(c.ok()) << toml << "\n" << c.status();
      continue;
    }
    ASSERT_FALSE(c.ok()) << toml;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(message(c.status()).find(named), std::string::npos) << toml << "\n" << c.status();
    EXPECT_NE(message(c.status()).find("line "), std::string::npos) << c.status();
  }
}

// Numbers with units are decimal: hexadecimal (which strtod would read, so
// "0x10MiB" was 16 MiB), inf and nan are refused, naming the value.
TEST(Config, UnitNumbersAreDecimal) {
  for (const char* toml :
       {"device_memory_limit = \"0x10MiB\"", "host_memory_limit = \"0X1p4B\"",
        "device_memory_limit = \"infGiB\"", "[link]\nd2h_bandwidth = \"0x10GB/s\"",
        "[link]\ncopy_latency = \"0x5us\""}) {
    auto c = LmsConfig::from_toml_string(toml);
    ASSERT_FALSE(c.ok()) << toml;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(message(c.status()).find("decimal"), std::string::npos) << c.status();
  }
  auto ok = LmsConfig::from_toml_string("device_memory_limit = \"16MiB\"");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->device_memory_limit, uint64_t{16} << 20);
  EXPECT_FALSE(parse_bytes("0x10").ok());
  EXPECT_EQ(parse_bytes("1.5KiB").value(), 1536u);
  EXPECT_EQ(parse_bytes("1e3").value(), 1000u);
}

TEST(Config, OverridesGetTheSameChecks) {
  const BadCase cases[] = {
      {"device_memory_limit=9223372036854775808", "device_memory_limit", "9223372036854775808"},
      {"device_memory_limit=16000000TB", "device_memory_limit", "16000000TB"},
      {"host_memory_limit=-1", "host_memory_limit", "-1"},
      {"link.d2h_bandwidth=1e308GB/s", "link.d2h_bandwidth", "1e308GB/s"},
      {"link.d2h_bandwidth=nan", "link.d2h_bandwidth", "nan"},
      {"link.copy_latency=inf", "link.copy_latency", "inf"},
      {"link.copy_latency=-0.1s", "link.copy_latency", "-0.1s"},
      {"cost_model.compute_rate=1e400", "cost_model.compute_rate", "1e400"},
      {"fragmentation_reserve=nan", "fragmentation_reserve", "nan"},
      {"sync_mode=99999999999999999999", "sync_mode", "99999999999999999999"},
      {"link={}", "link", "empty"},
      {"foo.bar=1", "foo", "1"},
  };
  LmsConfig c;
  c.policy = SwapPolicy::kVdnn;
  const std::string before = c.to_toml();
  for (const BadCase& bad : cases) {
    expect_rejected(bad, c.apply_override(bad.toml));
    EXPECT_EQ(c.to_toml(), before) << bad.toml;  // unchanged on error
  }
  ASSERT_TRUE(c.apply_override("device_memory_limit=9223372036854775807").ok());
  EXPECT_EQ(c.device_memory_limit, static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  ASSERT_TRUE(c.apply_override("min_tensor_bytes=9007199254740993").ok());
  EXPECT_EQ(c.min_tensor_bytes, (1ull << 53) + 1);
  // -0.0 is stored as 0.0: a sign of zero means nothing for a duration.
  ASSERT_TRUE(c.apply_override("link.copy_latency=-0.0").ok());
  EXPECT_TRUE(same_bits(c.link.copy_latency_s, 0.0));
  ASSERT_TRUE(c.apply_override("link={d2h_bandwidth=\"3GB/s\"}").ok());
  EXPECT_EQ(c.link.d2h_bytes_per_s, 3e9);
}

// ---- Random valid configs round-trip through to_toml exactly ----

// A positive finite double: edges, any exponent, or random bits.
double random_positive(std::mt19937_64& rng) {
  using L = std::numeric_limits<double>;
  switch (rng() % 4) {
    case 0: {
      const double edges[] = {L::denorm_min(), L::min(), L::max(), 1.0, 12e9, 0.1, 1e-300};
      return edges[rng() % std::size(edges)];
    }
    case 1:
      return std::pow(10.0, std::uniform_real_distribution<double>(-320, 308)(rng));
    default: {
      double d = 0;
      do {
        d = std::abs(std::bit_cast<double>(rng()));
      } while (!std::isfinite(d) || d == 0);
      return d;
    }
  }
}

std::string random_name(std::mt19937_64& rng) {
  static const char* const kPieces[] = {
      "a", "Z", "0", "_", "/", ":",  " ",  ",",    "\"",   "\\",     "'",      "#",
      "=", "[", "]", "{", "}", "\n", "\t", "\x01", "\x7f", "\u00e9", "\u65e5", "\U0001F642",
  };
  std::string name;
  const size_t n = 1 + rng() % 8;
  for (size_t i = 0; i < n; ++i) name += kPieces[rng() % std::size(kPieces)];
  return name;
}

LmsConfig random_config(std::mt19937_64& rng) {
  constexpr uint64_t kMaxBytes = std::numeric_limits<int64_t>::max();
  auto bytes = [&]() -> uint64_t {
    const uint64_t edges[] = {0, 1, kMaxBytes, (1ull << 53) + 1, kMaxBytes - 1};
    return rng() % 3 == 0 ? edges[rng() % std::size(edges)] : rng() >> (1 + rng() % 63);
  };
  auto duration = [&] { return rng() % 5 == 0 ? 0.0 : random_positive(rng); };
  LmsConfig c;
  c.enabled = rng() % 2 == 0;
  c.policy = static_cast<SwapPolicy>(rng() % 4);
  c.device_memory_limit = bytes();
  c.host_memory_limit = bytes();
  c.swapout_threshold = static_cast<int32_t>(rng() % 1000001);
  c.swapin_ahead = 1 + static_cast<int32_t>(rng() % 1000000);
  c.swapin_groupby = static_cast<int32_t>(rng() % 1000001);
  c.sync_mode = static_cast<int32_t>(rng() % 4);
  c.min_tensor_bytes = bytes();
  c.tensors.resize(rng() % 4);
  for (std::string& t : c.tensors) t = random_name(rng);
  const double reserves[] = {0.0, 0.9, std::numeric_limits<double>::denorm_min(),
                             std::uniform_real_distribution<double>(0, 0.9)(rng)};
  c.fragmentation_reserve = reserves[rng() % std::size(reserves)];
  c.alignment_bytes = uint64_t{1} << (rng() % 21);
  c.time_model = static_cast<TimeModel>(rng() % 2);
  c.auto_actions = static_cast<AutoActions>(rng() % 3);
  c.link_devices = 1 + static_cast<int32_t>(rng() % 1024);
  c.link.d2h_bytes_per_s = random_positive(rng);
  c.link.h2d_bytes_per_s = random_positive(rng);
  c.link.copy_latency_s = duration();
  c.cost_model.compute_flops_per_s = random_positive(rng);
  c.cost_model.memory_bytes_per_s = random_positive(rng);
  c.cost_model.kernel_launch_s = duration();
  c.auto_search_plans = static_cast<int32_t>(rng() % 1001);
  c.auto_refine_plans = static_cast<int32_t>(rng() % 10001);
  return c;
}

// Every "key = value" line of to_toml() as an override ("link.copy_latency=...").
std::vector<std::string> as_overrides(const std::string& toml) {
  std::vector<std::string> out;
  std::string table;
  for (absl::string_view line : absl::StrSplit(toml, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "[") && absl::ConsumeSuffix(&line, "]")) {
      table = absl::StrCat(line, ".");
      continue;
    }
    const size_t eq = line.find(" = ");
    if (eq == absl::string_view::npos) continue;
    out.push_back(absl::StrCat(table, line.substr(0, eq), "=", line.substr(eq + 3)));
  }
  return out;
}

TEST(Config, RandomValidConfigsRoundTripExactly) {
  const uint64_t seed = 0x636f6e666967;  // "config"
  std::printf("config round-trip seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::vector<LmsConfig> configs = {LmsConfig{}};
  LmsConfig edges;
  edges.device_memory_limit = edges.host_memory_limit = edges.min_tensor_bytes =
      std::numeric_limits<int64_t>::max();
  edges.link.d2h_bytes_per_s = std::numeric_limits<double>::denorm_min();
  edges.link.h2d_bytes_per_s = std::numeric_limits<double>::max();
  edges.link.copy_latency_s = std::numeric_limits<double>::max();
  edges.cost_model.kernel_launch_s = std::numeric_limits<double>::denorm_min();
  edges.fragmentation_reserve = 0.9;
  edges.tensors = {"quote\"d",    "back\\slash", "caf\u00e9 \u65e5\u672c \U0001F642", "a,b", " ",
                   "line\nbreak", "\x7f"};
  configs.push_back(edges);
  for (int i = 0; i < 400; ++i) configs.push_back(random_config(rng));
  for (const LmsConfig& c : configs) {
    const std::string text = c.to_toml();
    auto parsed = LmsConfig::from_toml_string(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
    expect_identical(*parsed, c, text);
    EXPECT_EQ(parsed->to_toml(), text);
    // The same values as command-line overrides.
    LmsConfig overridden;
    for (const std::string& o : as_overrides(text)) {
      absl::Status s = overridden.apply_override(o);
      ASSERT_TRUE(s.ok()) << o << ": " << s;
    }
    expect_identical(overridden, c, text);
  }
}

// ---- Fuzzing ----

// One to four edits: byte flips, insertions (digits, huge numbers, special
// characters), deletions, truncations and duplicated or dropped lines.
std::string mutate(std::string text, std::mt19937_64& rng) {
  static const char* const kInsertions[] = {
      "0",
      "9",
      "-",
      "-1",
      "9223372036854775807",
      "9223372036854775808",
      "18446744073709551616",
      "1e308",
      "1e400",
      "-0.0",
      "4.9406564584124654e-324",
      "nan",
      "inf",
      "\"",
      "'",
      "\\",
      "\\u00e9",
      "[",
      "]",
      "{",
      "}",
      "=",
      ".",
      ",",
      "\n",
      "#",
      " ",
      "TiB",
      "GB/s",
      "FLOP/s",
      "[link]",
      "[foo]",
      "[[link]]",
      "link.",
      "\xff",
  };
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < edits && !text.empty(); ++i) {
    const size_t at = rng() % text.size();
    switch (rng() % 6) {
      case 0:
        text[at] = static_cast<char>(rng() % 256);
        break;
      case 1:
      case 2:
        text.insert(at, kInsertions[rng() % std::size(kInsertions)]);
        break;
      case 3:
        text.erase(at, 1 + rng() % 8);
        break;
      case 4:
        text.resize(at);
        break;
      default: {
        const size_t nl = text.rfind('\n', at);
        const size_t begin = nl == std::string::npos ? 0 : nl + 1;
        size_t end = text.find('\n', at);
        end = end == std::string::npos ? text.size() : end + 1;
        const std::string line = text.substr(begin, end - begin);
        if (rng() % 2 == 0) {
          text.insert(rng() % (text.size() + 1), line);
        } else {
          text.erase(begin, end - begin);
        }
        break;
      }
    }
  }
  return text;
}

// An accepted config must print to TOML that reads back to the same text.
void expect_stable(const LmsConfig& c, const std::string& input) {
  const std::string text = c.to_toml();
  auto again = LmsConfig::from_toml_string(text);
  ASSERT_TRUE(again.ok()) << again.status() << "\ninput:\n" << absl::CEscape(input);
  ASSERT_EQ(again->to_toml(), text) << "input:\n" << absl::CEscape(input);
}

TEST(ConfigFuzz, MutatedTomlGivesAStatusAndAcceptedConfigsRoundTrip) {
  const uint64_t seed = 20240611;
  std::printf("config fuzz seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  LmsConfig manual;
  manual.policy = SwapPolicy::kManual;
  manual.tensors = {"a", "b\"\\c", "\u00e9"};
  manual.device_memory_limit = std::numeric_limits<int64_t>::max();
  const std::vector<std::string> bases = {
      manual.to_toml(), read_file(std::string(LMS_SOURCE_DIR) + "/configs/lms.toml"),
      "device_memory_limit = \"6GiB\"\ntensors = \"relu1, relu2\"\n"
      "link.copy_latency = \"8us\"\ncost_model.compute_rate = \"10TFLOP/s\"\n"};
  const std::vector<std::string> overrides = {"link.copy_latency=8us",
                                              "device_memory_limit=9223372036854775807",
                                              "tensors=[\"a\\\"b\", \"c\"]",
                                              "tensors=relu1, relu2",
                                              "cost_model.compute_rate=10TFLOP/s",
                                              "fragmentation_reserve=0.9",
                                              "link={d2h_bandwidth=\"1GB/s\"}",
                                              "host_memory_limit=1.5GiB",
                                              "time_model=roofline"};
  constexpr int kIterations = 3000;
  int ok = 0;
  for (int i = 0; i < kIterations; ++i) {
    const std::string input = mutate(bases[i % bases.size()], rng);
    auto c = LmsConfig::from_toml_string(input);
    if (c.ok()) {
      ++ok;
      expect_stable(*c, input);
    } else {
      EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    }
    LmsConfig o;
    const std::string override_input = mutate(overrides[i % overrides.size()], rng);
    absl::Status s = o.apply_override(override_input);
    if (s.ok()) {
      expect_stable(o, override_input);
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(o.to_toml(), LmsConfig{}.to_toml());  // unchanged on error
    }
  }
  std::printf("%d of %d mutated files accepted\n", ok, kIterations);
  EXPECT_GT(ok, 0);            // some mutations stay valid
  EXPECT_LT(ok, kIterations);  // and most do not
}

}  // namespace
}  // namespace lms
