// LmsConfig parsing. toml++ 3.3 reports syntax errors by throwing
// toml::parse_error; it is caught here, at the edge, and turned into a Status.
#include "lms/config.h"

#include <toml++/toml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lms/status.h"
#include "lms/strings.h"
#include "lms/units.h"

namespace lms {
namespace {

absl::Status bad(absl::string_view why) { return absl::InvalidArgumentError(why); }

absl::StatusOr<double> number(const toml::node& v) {
  if (auto i = v.as_integer()) return static_cast<double>(i->get());
  if (auto f = v.as_floating_point()) return f->get();
  return bad("not a number");
}

absl::StatusOr<bool> get_bool(const toml::node& v) {
  if (auto b = v.as_boolean()) return b->get();
  return bad("not a boolean");
}

absl::StatusOr<int32_t> get_int(const toml::node& v, int64_t lo, int64_t hi) {
  auto i = v.as_integer();
  if (!i) return bad("not an integer");
  if (i->get() < lo || i->get() > hi) return bad("out of range");
  return static_cast<int32_t>(i->get());
}

// A string through `parse`, or a number checked by `ok`.
template <typename T, typename Parse>
absl::StatusOr<T> get_unit(const toml::node& v, Parse parse, bool (*ok)(double)) {
  if (auto s = v.as_string()) return parse(std::string_view(s->get()));
  LMS_ASSIGN_OR_RETURN(double d, number(v));
  if (!ok(d)) return bad("out of range");
  return static_cast<T>(d);
}

bool non_negative(double d) { return d >= 0 && d < 1.8e19; }
bool positive(double d) { return d > 0 && std::isfinite(d); }

absl::StatusOr<uint64_t> get_bytes(const toml::node& v) {
  if (v.is_floating_point()) return bad("a byte count must be an integer or a string with a unit");
  return get_unit<uint64_t>(v, parse_bytes, non_negative);
}
absl::StatusOr<double> get_bandwidth(const toml::node& v) {
  return get_unit<double>(v, parse_bandwidth, positive);
}
absl::StatusOr<double> get_duration(const toml::node& v) {
  return get_unit<double>(v, parse_duration, [](double d) { return d >= 0 && std::isfinite(d); });
}

// "10TFLOP/s", "500GFLOP/s", "1e12FLOP/s".
absl::StatusOr<double> parse_rate(std::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(to_absl(text));
  if (!absl::ConsumeSuffix(&s, "FLOP/s")) return bad("missing unit FLOP/s");
  double scale = 1;
  const std::string prefixes = "KMGTP";
  if (!s.empty() && prefixes.find(s.back()) != std::string::npos) {
    scale = std::pow(1000.0, static_cast<double>(prefixes.find(s.back()) + 1));
    s.remove_suffix(1);
  }
  double d = 0;
  if (!absl::SimpleAtod(s, &d) || !positive(d * scale)) return bad("not a positive number");
  return d * scale;
}
absl::StatusOr<double> get_rate(const toml::node& v) {
  return get_unit<double>(v, parse_rate, positive);
}

absl::StatusOr<double> get_reserve(const toml::node& v) {
  LMS_ASSIGN_OR_RETURN(double d, number(v));
  if (!(d >= 0 && d <= 0.9)) return bad("out of range");
  return d;
}

absl::StatusOr<uint64_t> get_alignment(const toml::node& v) {
  LMS_ASSIGN_OR_RETURN(uint64_t a, get_bytes(v));
  if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 20)) return bad("not a power of two up to 1MiB");
  return a;
}

absl::StatusOr<SwapPolicy> get_policy(const toml::node& v) {
  auto s = v.as_string();
  if (!s) return bad("not a string");
  for (SwapPolicy p :
       {SwapPolicy::kAuto, SwapPolicy::kTflms, SwapPolicy::kVdnn, SwapPolicy::kManual}) {
    if (s->get() == policy_name(p)) return p;
  }
  return bad("unknown policy");
}

absl::StatusOr<std::vector<std::string>> get_names(const toml::node& v) {
  std::vector<std::string> names;
  if (auto s = v.as_string()) {
    for (absl::string_view part : absl::StrSplit(s->get(), ',', absl::SkipWhitespace())) {
      names.emplace_back(absl::StripAsciiWhitespace(part));
    }
    return names;
  }
  auto a = v.as_array();
  if (!a) return bad("not an array of strings");
  for (const toml::node& e : *a) {
    auto s = e.as_string();
    if (!s || s->get().empty()) return bad("an element is not a non-empty string");
    names.push_back(s->get());
  }
  return names;
}

struct KeySpec {
  const char* key;
  const char* allowed;
  std::function<absl::Status(const toml::node&, LmsConfig&)> set;
};

// Wraps a getter and a field into a setter.
template <typename Get, typename Field>
std::function<absl::Status(const toml::node&, LmsConfig&)> to(Get get, Field field) {
  return [get, field](const toml::node& v, LmsConfig& c) -> absl::Status {
    auto value = get(v);
    if (!value.ok()) return value.status();
    c.*field = static_cast<std::remove_reference_t<decltype(c.*field)>>(*value);
    return absl::OkStatus();
  };
}

template <typename Get, typename Member, typename Field>
std::function<absl::Status(const toml::node&, LmsConfig&)> to(Get get, Member member, Field field) {
  return [get, member, field](const toml::node& v, LmsConfig& c) -> absl::Status {
    auto value = get(v);
    if (!value.ok()) return value.status();
    (c.*member).*field = *value;
    return absl::OkStatus();
  };
}

const std::vector<KeySpec>& key_specs() {
  static const auto* const specs = new std::vector<KeySpec>{
      {"enabled", "true or false", to(get_bool, &LmsConfig::enabled)},
      {"policy", "\"auto\", \"tflms\", \"vdnn\" or \"manual\"", to(get_policy, &LmsConfig::policy)},
      {"device_memory_limit", "bytes such as \"6GiB\" or an integer; 0 = device capacity",
       to(get_bytes, &LmsConfig::device_memory_limit)},
      {"host_memory_limit", "bytes such as \"64GiB\" or an integer; 0 = unlimited",
       to(get_bytes, &LmsConfig::host_memory_limit)},
      {"swapout_threshold", "an integer 0..1000000",
       to([](const toml::node& v) { return get_int(v, 0, 1000000); },
          &LmsConfig::swapout_threshold)},
      {"swapin_ahead", "an integer 1..1000000",
       to([](const toml::node& v) { return get_int(v, 1, 1000000); }, &LmsConfig::swapin_ahead)},
      {"swapin_groupby", "an integer 0..1000000",
       to([](const toml::node& v) { return get_int(v, 0, 1000000); }, &LmsConfig::swapin_groupby)},
      {"sync_mode", "an integer 0..3 (0 async, 1 sync swap-out, 2 sync swap-in, 3 both)",
       to([](const toml::node& v) { return get_int(v, 0, 3); }, &LmsConfig::sync_mode)},
      {"min_tensor_bytes", "bytes such as \"1MiB\" or an integer",
       to(get_bytes, &LmsConfig::min_tensor_bytes)},
      {"tensors", "an array of tensor names, or one comma-separated string",
       to(get_names, &LmsConfig::tensors)},
      {"fragmentation_reserve", "a number in [0, 0.9]",
       to(get_reserve, &LmsConfig::fragmentation_reserve)},
      {"alignment", "bytes, a power of two up to 1MiB",
       to(get_alignment, &LmsConfig::alignment_bytes)},
      {"link.d2h_bandwidth", "a bandwidth such as \"12GB/s\" or a positive number of bytes/s",
       to(get_bandwidth, &LmsConfig::link, &LinkConfig::d2h_bytes_per_s)},
      {"link.h2d_bandwidth", "a bandwidth such as \"12GB/s\" or a positive number of bytes/s",
       to(get_bandwidth, &LmsConfig::link, &LinkConfig::h2d_bytes_per_s)},
      {"link.copy_latency", "a duration such as \"5us\" or a number of seconds",
       to(get_duration, &LmsConfig::link, &LinkConfig::copy_latency_s)},
      {"cost_model.compute_rate", "a rate such as \"10TFLOP/s\" or a positive number of FLOP/s",
       to(get_rate, &LmsConfig::cost_model, &CostModelConfig::compute_flops_per_s)},
      {"cost_model.memory_bandwidth", "a bandwidth such as \"900GB/s\" or a positive number",
       to(get_bandwidth, &LmsConfig::cost_model, &CostModelConfig::memory_bytes_per_s)},
      {"cost_model.kernel_launch", "a duration such as \"5us\" or a number of seconds",
       to(get_duration, &LmsConfig::cost_model, &CostModelConfig::kernel_launch_s)},
  };
  return *specs;
}

std::string value_text(const toml::node& v) {
  if (auto f = v.as_floating_point()) return absl::StrFormat("%g", f->get());
  std::ostringstream out;
  v.visit([&](const auto& x) { out << x; });
  std::string s = out.str();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// A TOML basic string holding `text` exactly.
std::string toml_quote(absl::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20 || u == 0x7f) {
      out += absl::StrFormat("\\u%04x", u);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

absl::Status apply_key(const std::string& key, const toml::node& v, LmsConfig& c) {
  for (const KeySpec& spec : key_specs()) {
    if (key != spec.key) continue;
    absl::Status s = spec.set(v, c);
    if (s.ok()) return s;
    return absl::InvalidArgumentError(absl::StrCat("lms config: key '", key, "' = ", value_text(v),
                                                   ": ", s.message(), "; allowed: ", spec.allowed));
  }
  std::vector<std::string> keys;
  for (const KeySpec& spec : key_specs()) keys.push_back(spec.key);
  return absl::InvalidArgumentError(absl::StrCat("lms config: unknown key '", key,
                                                 "' = ", value_text(v),
                                                 "; allowed keys: ", absl::StrJoin(keys, ", ")));
}

absl::Status apply_table(const toml::table& table, const std::string& prefix, LmsConfig& c) {
  for (auto&& [k, v] : table) {
    const std::string key = prefix + std::string(k.str());
    if (const toml::table* sub = v.as_table()) {
      LMS_RETURN_IF_ERROR(apply_table(*sub, key + ".", c));
    } else {
      LMS_RETURN_IF_ERROR(apply_key(key, v, c));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<toml::table> parse_toml(std::string_view text) {
  try {
    return toml::parse(text);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "lms config: TOML syntax error at line %d, column %d: %s", e.source().begin.line,
        e.source().begin.column, std::string(e.description())));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("lms config: cannot parse TOML: ", e.what()));
  }
}

}  // namespace

const char* policy_name(SwapPolicy policy) {
  switch (policy) {
    case SwapPolicy::kAuto:
      return "auto";
    case SwapPolicy::kTflms:
      return "tflms";
    case SwapPolicy::kVdnn:
      return "vdnn";
    case SwapPolicy::kManual:
      return "manual";
  }
  return "auto";
}

absl::StatusOr<LmsConfig> LmsConfig::from_toml_string(std::string_view text) {
  LMS_ASSIGN_OR_RETURN(toml::table table, parse_toml(text));
  LmsConfig config;
  LMS_RETURN_IF_ERROR(apply_table(table, "", config));
  return config;
}

absl::StatusOr<LmsConfig> LmsConfig::from_file(std::string_view path) {
  std::error_code error;
  std::ifstream in{std::string(path), std::ios::binary};
  if (!std::filesystem::is_regular_file(std::filesystem::path(path), error) || !in) {
    return absl::InvalidArgumentError(
        absl::StrCat("lms config: cannot read '", to_absl(path), "'"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto config = from_toml_string(buffer.str());
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(to_absl(path), ": ", config.status().message()));
  }
  return config;
}

absl::Status LmsConfig::apply_override(std::string_view key_eq_value) {
  const size_t eq = key_eq_value.find('=');
  const absl::string_view key = absl::StripAsciiWhitespace(to_absl(key_eq_value.substr(0, eq)));
  if (eq == std::string_view::npos || key.empty() ||
      key.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_.") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lms override '", to_absl(key_eq_value), "': expected key=value with a key of the config ",
        "(lower-case letters, digits, '_' and '.'), e.g. policy=tflms or link.copy_latency=8us"));
  }
  const absl::string_view value = absl::StripAsciiWhitespace(to_absl(key_eq_value.substr(eq + 1)));
  if (value.find_first_of("\n\r") != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("lms override for key '", key, "': the value must be on one line"));
  }
  // A TOML value as written, else the text as a string ("tflms", "12GB/s").
  auto table = parse_toml(absl::StrCat(key, " = ", value));
  if (!table.ok()) {
    table = parse_toml(absl::StrCat(key, " = ", toml_quote(value)));
  }
  if (!table.ok()) return table.status();
  LmsConfig changed = *this;
  LMS_RETURN_IF_ERROR(apply_table(*table, "", changed));
  *this = std::move(changed);
  return absl::OkStatus();
}

std::string LmsConfig::to_toml() const {
  auto real = [](double d) { return absl::StrFormat("%.17e", d); };
  std::vector<std::string> quoted;
  for (const std::string& t : tensors) quoted.push_back(toml_quote(t));
  return absl::StrCat(
      "enabled = ", enabled ? "true" : "false", "\npolicy = \"", policy_name(policy),
      "\"\ndevice_memory_limit = ", device_memory_limit,
      "\nhost_memory_limit = ", host_memory_limit, "\nswapout_threshold = ", swapout_threshold,
      "\nswapin_ahead = ", swapin_ahead, "\nswapin_groupby = ", swapin_groupby,
      "\nsync_mode = ", sync_mode, "\nmin_tensor_bytes = ", min_tensor_bytes, "\ntensors = [",
      absl::StrJoin(quoted, ", "), "]\nfragmentation_reserve = ", real(fragmentation_reserve),
      "\nalignment = ", alignment_bytes, "\n\n[link]\nd2h_bandwidth = ", real(link.d2h_bytes_per_s),
      "\nh2d_bandwidth = ", real(link.h2d_bytes_per_s),
      "\ncopy_latency = ", real(link.copy_latency_s),
      "\n\n[cost_model]\ncompute_rate = ", real(cost_model.compute_flops_per_s),
      "\nmemory_bandwidth = ", real(cost_model.memory_bytes_per_s),
      "\nkernel_launch = ", real(cost_model.kernel_launch_s), "\n");
}

}  // namespace lms
