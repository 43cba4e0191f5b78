// LmsConfig parsing. toml++ 3.3 reports syntax errors by throwing
// toml::parse_error; it is caught here, at the edge, and turned into a Status.
#include "lms/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
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

bool positive(double d) { return d > 0 && std::isfinite(d); }
bool non_negative(double d) { return d >= 0 && std::isfinite(d); }

// A string through `parse` or a number, either way checked by `ok` (so that a
// unit cannot scale a value out of range). -0.0 becomes 0.0: the sign of zero
// means nothing here and would only show up in to_toml.
template <typename Parse>
absl::StatusOr<double> get_real(const toml::node& v, Parse parse, bool (*ok)(double),
                                absl::string_view range) {
  double d = 0;
  if (auto s = v.as_string()) {
    LMS_ASSIGN_OR_RETURN(d, parse(std::string_view(s->get())));
  } else {
    LMS_ASSIGN_OR_RETURN(d, number(v));
  }
  if (!ok(d)) return bad(absl::StrCat("not ", range));
  return d + 0.0;
}

// Byte counts are exact: an integer, or a string for parse_bytes (which is
// exact for whole numbers); never through a double, which would round
// 2^63 - 1 up to 2^63.
absl::StatusOr<uint64_t> get_bytes(const toml::node& v) {
  if (auto i = v.as_integer()) {
    if (i->get() < 0) return bad("a byte count must not be negative");
    return static_cast<uint64_t>(i->get());
  }
  if (auto s = v.as_string()) {
    LMS_ASSIGN_OR_RETURN(uint64_t bytes, parse_bytes(std::string_view(s->get())));
    if (bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return bad("more than 2^63 - 1 bytes");
    }
    return bytes;
  }
  return bad("a byte count must be an integer or a string with a unit");
}
absl::StatusOr<double> get_bandwidth(const toml::node& v) {
  return get_real(v, parse_bandwidth, positive, "a positive finite bandwidth");
}
absl::StatusOr<double> get_duration(const toml::node& v) {
  return get_real(v, parse_duration, non_negative, "a non-negative finite duration");
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
  if (!absl::SimpleAtod(s, &d) || !positive(d * scale)) {
    return bad("not a positive finite number of FLOP/s");
  }
  return d * scale;
}
absl::StatusOr<double> get_rate(const toml::node& v) {
  return get_real(v, parse_rate, positive, "a positive finite rate");
}

absl::StatusOr<double> get_reserve(const toml::node& v) {
  LMS_ASSIGN_OR_RETURN(double d, number(v));
  if (!(d >= 0 && d <= 0.9)) return bad("out of range");
  return d + 0.0;
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

absl::StatusOr<TimeModel> get_time_model(const toml::node& v) {
  auto s = v.as_string();
  if (!s) return bad("not a string");
  for (TimeModel m : {TimeModel::kMeasured, TimeModel::kRoofline}) {
    if (s->get() == time_model_name(m)) return m;
  }
  return bad("unknown time model");
}

absl::StatusOr<AutoActions> get_auto_actions(const toml::node& v) {
  auto s = v.as_string();
  if (!s) return bad("not a string");
  for (AutoActions a : {AutoActions::kSwap, AutoActions::kRecompute, AutoActions::kJoint}) {
    if (s->get() == auto_actions_name(a)) return a;
  }
  return bad("unknown auto actions");
}

absl::StatusOr<KernelChoice> get_kernel_choice(const toml::node& v) {
  auto s = v.as_string();
  if (!s) return bad("not a string");
  for (KernelChoice c :
       {KernelChoice::kDefault, KernelChoice::kLeastToFit, KernelChoice::kLeastWhenFaster}) {
    if (s->get() == kernel_choice_name(c)) return c;
  }
  return bad("unknown kernel choice");
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
      {"device_memory_limit",
       "bytes such as \"6GiB\" or an integer, at most 2^63 - 1; 0 = device capacity",
       to(get_bytes, &LmsConfig::device_memory_limit)},
      {"host_memory_limit",
       "bytes such as \"64GiB\" or an integer, at most 2^63 - 1; 0 = unlimited",
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
      {"min_tensor_bytes", "bytes such as \"1MiB\" or an integer, at most 2^63 - 1",
       to(get_bytes, &LmsConfig::min_tensor_bytes)},
      {"tensors", "an array of tensor names, or one comma-separated string",
       to(get_names, &LmsConfig::tensors)},
      {"fragmentation_reserve", "a number in [0, 0.9]",
       to(get_reserve, &LmsConfig::fragmentation_reserve)},
      {"alignment", "bytes, a power of two up to 1MiB",
       to(get_alignment, &LmsConfig::alignment_bytes)},
      {"time_model",
       "\"measured\" (profile on the device, lms/profile.h) or \"roofline\" ([cost_model] "
       "and [link])",
       to(get_time_model, &LmsConfig::time_model)},
      {"auto_actions",
       "\"swap\", \"recompute\" or \"joint\" (what the auto policy may do besides keep)",
       to(get_auto_actions, &LmsConfig::auto_actions)},
      {"kernel_choice",
       "\"default\" (keep every kernel: bit-identical to no LMS), \"least_workspace_to_fit\" "
       "or \"least_workspace_when_faster\" (convolutions may move to least-workspace kernels, "
       "which round differently)",
       to(get_kernel_choice, &LmsConfig::kernel_choice)},
      {"chunked_head",
       "true or false (the CPU device computes a language model's head and loss a chunk of rows "
       "at a time)",
       to(get_bool, &LmsConfig::chunked_head)},
      {"auto_search_plans",
       "an integer 0..1000 (jittered greedy plans the joint planner also tries; 0 = none)",
       to([](const toml::node& v) { return get_int(v, 0, 1000); }, &LmsConfig::auto_search_plans)},
      {"auto_refine_plans",
       "an integer 0..10000 (plans of the joint planner's local search; 0 = none)",
       to([](const toml::node& v) { return get_int(v, 0, 10000); }, &LmsConfig::auto_refine_plans)},
      {"link_devices", "an integer 1..1024 (devices sharing the host link)",
       to([](const toml::node& v) { return get_int(v, 1, 1024); }, &LmsConfig::link_devices)},
      {"link.d2h_bandwidth",
       "a bandwidth such as \"12GB/s\" or a positive finite number of bytes/s",
       to(get_bandwidth, &LmsConfig::link, &LinkConfig::d2h_bytes_per_s)},
      {"link.h2d_bandwidth",
       "a bandwidth such as \"12GB/s\" or a positive finite number of bytes/s",
       to(get_bandwidth, &LmsConfig::link, &LinkConfig::h2d_bytes_per_s)},
      {"link.copy_latency", "a duration such as \"5us\" or a non-negative finite number of seconds",
       to(get_duration, &LmsConfig::link, &LinkConfig::copy_latency_s)},
      {"cost_model.compute_rate",
       "a rate such as \"10TFLOP/s\" or a positive finite number of FLOP/s",
       to(get_rate, &LmsConfig::cost_model, &CostModelConfig::compute_flops_per_s)},
      {"cost_model.memory_bandwidth",
       "a bandwidth such as \"900GB/s\" or a positive finite number of bytes/s",
       to(get_bandwidth, &LmsConfig::cost_model, &CostModelConfig::memory_bytes_per_s)},
      {"cost_model.kernel_launch",
       "a duration such as \"5us\" or a non-negative finite number of seconds",
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

const KeySpec* find_spec(absl::string_view key) {
  for (const KeySpec& spec : key_specs()) {
    if (key == spec.key) return &spec;
  }
  return nullptr;
}

// The TOML tables of the config: the prefixes of the dotted keys ("link").
const std::vector<std::string>& table_names() {
  static const auto* const names = [] {
    auto* n = new std::vector<std::string>();
    for (const KeySpec& spec : key_specs()) {
      const absl::string_view key = spec.key;
      const size_t dot = key.find('.');
      if (dot == absl::string_view::npos) continue;
      std::string table(key.substr(0, dot));
      if (std::find(n->begin(), n->end(), table) == n->end()) n->push_back(table);
    }
    return n;
  }();
  return *names;
}

bool is_table_name(absl::string_view name) {
  const auto& names = table_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string allowed_tables() {
  return absl::StrCat("allowed tables: ", absl::StrJoin(table_names(), ", "));
}

absl::Status apply_key(const std::string& key, const toml::node& v, LmsConfig& c) {
  if (const KeySpec* spec = find_spec(key)) {
    absl::Status s = spec->set(v, c);
    if (s.ok()) return s;
    return absl::InvalidArgumentError(absl::StrCat("lms config: key '", key, "' = ", value_text(v),
                                                   ": ", s.message(),
                                                   "; allowed: ", spec->allowed));
  }
  if (is_table_name(key)) {
    return absl::InvalidArgumentError(absl::StrCat("lms config: '", key, "' = ", value_text(v),
                                                   ": '", key, "' is a table, not a value; ",
                                                   allowed_tables()));
  }
  std::vector<std::string> keys;
  for (const KeySpec& spec : key_specs()) keys.push_back(spec.key);
  return absl::InvalidArgumentError(absl::StrCat("lms config: unknown key '", key,
                                                 "' = ", value_text(v),
                                                 "; allowed keys: ", absl::StrJoin(keys, ", ")));
}

// A table that is not one of table_names(), named with its first key so that
// a misspelt table header points at what it holds.
absl::Status unknown_table(const std::string& name, const toml::table& table) {
  std::string first;
  if (!table.empty()) {
    const auto it = table.begin();  // *it refers into the iterator
    const auto& [k, v] = *it;
    first = absl::StrCat(" (key '", name, ".", std::string(k.str()), "' = ", value_text(v), ")");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("lms config: unknown table '", name, "'", first, "; ", allowed_tables()));
}

// Applies the keys of `table` (the root when `prefix` is empty). Every
// sub-table must be a known table with at least one key: an empty [link] is
// almost always a mistake (keys placed under the wrong header). `applied`
// holds the full names of the keys set so far: a quoted dotted key
// ("link.copy_latency" = ...) names the same setting as copy_latency under
// [link], and TOML itself sees two different keys, so the second is refused
// here rather than one of them silently winning.
absl::Status apply_table(const toml::table& table, const std::string& prefix, LmsConfig& c,
                         absl::flat_hash_set<std::string>& applied) {
  for (auto&& [k, v] : table) {
    const std::string key = prefix + std::string(k.str());
    const toml::table* sub = v.as_table();
    if (sub == nullptr || find_spec(key) != nullptr) {
      if (!applied.insert(key).second) {
        const auto line = v.source().begin.line;
        return absl::InvalidArgumentError(absl::StrCat(
            "lms config: key '", key, "' is given twice", line > 0 ? " (again on line " : "",
            line > 0 ? absl::StrCat(line, ")") : "",
            ", once as a quoted dotted key and once in its table; give it once"));
      }
      LMS_RETURN_IF_ERROR(apply_key(key, v, c));
    } else if (!prefix.empty() || !is_table_name(key)) {
      return unknown_table(key, *sub);
    } else if (sub->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("lms config: table '", key, "' is empty; give at least one of its keys or ",
                       "leave it out; ", allowed_tables()));
    } else {
      LMS_RETURN_IF_ERROR(apply_table(*sub, key + ".", c, applied));
    }
  }
  return absl::OkStatus();
}

// For a syntax error on line `line` (1-based) of `text`: the line itself and,
// if it sets a known key (under the last [table] header before it), what that
// key allows. toml++ rejects values it cannot represent (an integer of 2^64,
// a float of 1e400) as syntax errors, and its message names neither.
std::string syntax_error_context(std::string_view text, int64_t line) {
  std::string table;
  int64_t n = 0;
  for (absl::string_view l : absl::StrSplit(to_absl(text), '\n')) {
    if (++n > line) break;
    l = absl::StripAsciiWhitespace(l);
    if (n < line) {
      if (absl::ConsumePrefix(&l, "[") && !absl::StartsWith(l, "[") &&
          absl::ConsumeSuffix(&l, "]")) {
        table = std::string(absl::StripAsciiWhitespace(l));
      }
      continue;
    }
    std::string out =
        absl::StrCat("; the line: '",
                     l.size() > 80 ? absl::StrCat(l.substr(0, 77), "...") : std::string(l), "'");
    const size_t eq = l.find('=');
    if (eq == absl::string_view::npos) return out;
    const std::string key(absl::StripAsciiWhitespace(l.substr(0, eq)));
    const std::string full = table.empty() ? key : absl::StrCat(table, ".", key);
    if (const KeySpec* spec = find_spec(full)) {
      absl::StrAppend(&out, "; allowed for key '", full, "': ", spec->allowed);
    }
    return out;
  }
  return "";
}

absl::StatusOr<toml::table> parse_toml(std::string_view text) {
  try {
    return toml::parse(text);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "lms config: TOML syntax error at line %d, column %d: %s%s", e.source().begin.line,
        e.source().begin.column, std::string(e.description()),
        syntax_error_context(text, static_cast<int64_t>(e.source().begin.line))));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("lms config: cannot parse TOML: ", e.what()));
  }
}

}  // namespace

const char* time_model_name(TimeModel model) {
  switch (model) {
    case TimeModel::kMeasured:
      return "measured";
    case TimeModel::kRoofline:
      return "roofline";
  }
  return "measured";
}

const char* auto_actions_name(AutoActions actions) {
  switch (actions) {
    case AutoActions::kSwap:
      return "swap";
    case AutoActions::kRecompute:
      return "recompute";
    case AutoActions::kJoint:
      return "joint";
  }
  return "joint";
}

const char* kernel_choice_name(KernelChoice choice) {
  switch (choice) {
    case KernelChoice::kDefault:
      return "default";
    case KernelChoice::kLeastToFit:
      return "least_workspace_to_fit";
    case KernelChoice::kLeastWhenFaster:
      return "least_workspace_when_faster";
  }
  return "default";
}

absl::StatusOr<LmsConfig> LmsConfig::from_toml_string(std::string_view text) {
  LMS_ASSIGN_OR_RETURN(toml::table table, parse_toml(text));
  LmsConfig config;
  absl::flat_hash_set<std::string> applied;
  LMS_RETURN_IF_ERROR(apply_table(table, "", config, applied));
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
  absl::flat_hash_set<std::string> applied;
  LMS_RETURN_IF_ERROR(apply_table(*table, "", changed, applied));
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
      "\nalignment = ", alignment_bytes, "\ntime_model = \"", time_model_name(time_model),
      "\"\nauto_actions = \"", auto_actions_name(auto_actions), "\"\nkernel_choice = \"",
      kernel_choice_name(kernel_choice), "\"\nchunked_head = ", chunked_head ? "true" : "false",
      "\nauto_search_plans = ", auto_search_plans, "\nauto_refine_plans = ", auto_refine_plans,
      "\nlink_devices = ", link_devices, "\n\n[link]\nd2h_bandwidth = ", real(link.d2h_bytes_per_s),
      "\nh2d_bandwidth = ", real(link.h2d_bytes_per_s),
      "\ncopy_latency = ", real(link.copy_latency_s),
      "\n\n[cost_model]\ncompute_rate = ", real(cost_model.compute_flops_per_s),
      "\nmemory_bandwidth = ", real(cost_model.memory_bytes_per_s),
      "\nkernel_launch = ", real(cost_model.kernel_launch_s), "\n");
}

}  // namespace lms
