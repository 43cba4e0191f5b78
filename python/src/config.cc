// LmsConfig and lms.rewrite from Python.
#include "lms/config.h"

#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "lms/device.h"
#include "lms/rewrite.h"

namespace lms::python {
namespace {

// `value` as a TOML value for LmsConfig::apply_override.
std::string toml_value(const py::handle& value, const std::string& key) {
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>() ? "true" : "false";
  if (py::isinstance<py::int_>(value)) return std::string(py::str(value));
  if (py::isinstance<py::float_>(value)) {
    const double v = value.cast<double>();
    if (!std::isfinite(v)) throw py::value_error(key + ": the number must be finite");
    return std::string(py::repr(value));
  }
  if (py::isinstance<py::str>(value)) {
    std::string out = "\"";
    for (char c : value.cast<std::string>()) {
      if (c == '"' || c == '\\') out += '\\';
      if (static_cast<unsigned char>(c) < 0x20) {
        throw py::value_error(key + ": control characters are not allowed in a value");
      }
      out += c;
    }
    return out + "\"";
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    std::string out = "[";
    for (const py::handle& item : value) {
      if (out.size() > 1) out += ", ";
      out += toml_value(item, key);
    }
    return out + "]";
  }
  throw py::value_error(key + ": expected a bool, number, string or list, got " +
                        std::string(py::str(py::type::of(value).attr("__name__"))));
}

// Applies keyword arguments as the keys of the config file; a dict is a
// table ("link": {"h2d_bandwidth": "16GB/s"}).
void apply(LmsConfig& config, const py::dict& kwargs, const std::string& prefix) {
  for (const auto& [k, v] : kwargs) {
    const std::string key = prefix + k.cast<std::string>();
    if (py::isinstance<py::dict>(v)) {
      apply(config, v.cast<py::dict>(), key + ".");
      continue;
    }
    raise_if_error(config.apply_override(key + "=" + toml_value(v, key)));
  }
}

py::dict decision_dict(const TensorDecision& d) {
  py::dict out;
  out["tensor"] = d.tensor;
  out["action"] = decision_action_name(d.action);
  out["bytes"] = d.bytes;
  out["restores"] = d.restores;
  out["seconds"] = d.seconds;
  return out;
}

}  // namespace

void define_config(py::module_& m) {
  py::class_<LmsConfig>(m, "LmsConfig", R"(How lms.rewrite plans (the keys of configs/lms.toml).

  lms.LmsConfig(device_memory_limit="200MiB", auto_actions="joint",
                link={"h2d_bandwidth": "16GB/s"})
  lms.LmsConfig.from_file("lms.toml")

Keyword arguments are the file's keys (a dict for a table); values take the
file's units ("256MiB", "12GB/s", "5us"). ValueError names an unknown key or
a bad value and what is allowed.)")
      .def(py::init([](const py::kwargs& kwargs) {
        LmsConfig config;
        apply(config, kwargs, "");
        return config;
      }))
      .def_static(
          "from_file",
          [](const std::string& path) { return value_or_raise(LmsConfig::from_file(path)); },
          py::arg("path"))
      .def_static(
          "from_toml",
          [](const std::string& text) { return value_or_raise(LmsConfig::from_toml_string(text)); },
          py::arg("text"))
      .def(
          "set",
          [](LmsConfig& config, const py::kwargs& kwargs) {
            LmsConfig changed = config;
            apply(changed, kwargs, "");
            config = changed;
          },
          "Sets keys as the constructor does; on error the config is unchanged.")
      .def("to_toml", &LmsConfig::to_toml)
      .def_readwrite("enabled", &LmsConfig::enabled)
      .def_property_readonly("policy", [](const LmsConfig& c) { return policy_name(c.policy); })
      .def_property_readonly("auto_actions",
                             [](const LmsConfig& c) { return auto_actions_name(c.auto_actions); })
      .def_property_readonly("time_model",
                             [](const LmsConfig& c) { return time_model_name(c.time_model); })
      .def_readwrite("device_memory_limit", &LmsConfig::device_memory_limit, "bytes; 0 = capacity")
      .def_readwrite("host_memory_limit", &LmsConfig::host_memory_limit, "bytes; 0 = unlimited")
      .def_readonly("tensors", &LmsConfig::tensors)
      .def("__repr__", [](const LmsConfig& c) { return "<lms.LmsConfig\n" + c.to_toml() + ">"; });

  py::class_<RewriteReport>(m, "RewriteReport",
                            "What lms.rewrite planned. Sizes in bytes, times in seconds.")
      .def_readonly("enabled", &RewriteReport::enabled)
      .def_property_readonly("policy", [](const RewriteReport& r) { return policy_name(r.policy); })
      .def_property_readonly("actions",
                             [](const RewriteReport& r) { return auto_actions_name(r.actions); })
      .def_readonly("swapped", &RewriteReport::swapped)
      .def_readonly("recomputed", &RewriteReport::recomputed)
      .def_property_readonly(
          "decisions",
          [](const RewriteReport& r) {
            py::list out;
            for (const TensorDecision& d : r.decisions) out.append(decision_dict(d));
            return out;
          },
          "One dict per swapped or recomputed tensor: tensor, action, bytes, restores, seconds.")
      .def_readonly("recompute_s", &RewriteReport::recompute_s)
      .def_readonly("bytes_out_per_step", &RewriteReport::bytes_out_per_step)
      .def_readonly("bytes_in_per_step", &RewriteReport::bytes_in_per_step)
      .def_readonly("host_bytes", &RewriteReport::host_bytes)
      .def_readonly("budget_bytes", &RewriteReport::budget_bytes)
      .def_readonly("peak_bytes_before", &RewriteReport::peak_bytes_before)
      .def_readonly("peak_bytes_after", &RewriteReport::peak_bytes_after,
                    "The device's peak during every step, to the byte.")
      .def_readonly("arena_bytes", &RewriteReport::arena_bytes)
      .def_readonly("arena_lower_bound_bytes", &RewriteReport::arena_lower_bound_bytes)
      .def_readonly("device_bytes_by_position", &RewriteReport::device_bytes_by_position)
      .def_readonly("fits", &RewriteReport::fits)
      .def_readonly("fit_unknown_reason", &RewriteReport::fit_unknown_reason)
      .def_readonly("step_time_before_s", &RewriteReport::step_time_before_s)
      .def_readonly("step_time_after_s", &RewriteReport::step_time_after_s)
      .def_readonly("stall_s", &RewriteReport::stall_s)
      .def_readonly("time_model", &RewriteReport::time_model)
      .def_readonly("working_set_limit_bytes", &RewriteReport::working_set_limit_bytes)
      .def_readonly("working_set_node", &RewriteReport::working_set_node)
      .def_readonly("plan_text", &RewriteReport::plan_text)
      .def_readonly("fused", &RewriteReport::fused)
      .def("summary", &RewriteReport::summary)
      .def("decisions_text", &RewriteReport::decisions_text)
      .def("__repr__", &RewriteReport::summary);

  py::class_<StepPlan>(m, "StepPlan",
                       R"(A planned training step (lms.plan_step): the planned graph, its
report and the static layout of its step, immutable. lms.Session(plan,
device) runs it on that layout, with no layout search of its own.)")
      .def_property_readonly(
          "graph", [](const StepPlan& p) { return Graph(p.graph()); },
          "A copy of the planned graph (with the plan's swap, recompute and fused nodes).")
      .def_property_readonly(
          "report", [](const StepPlan& p) { return p.report(); }, "The plan's RewriteReport.")
      .def("__repr__", [](const StepPlan& p) { return p.report().summary(); });

  m.def(
      "plan_step",
      [](const Graph& graph, const LmsConfig& config, const std::shared_ptr<Device>& device,
         const std::vector<std::string>& fetched, bool fuse_conv_relu,
         const std::optional<PlanningFacts>& facts) {
        const RewriteOptions options{.fetched = fetched, .fuse_conv_relu = fuse_conv_relu};
        py::gil_scoped_release release;
        if (device) {
          return value_or_raise(
              plan_step(graph, config, *device, options, facts.value_or(PlanningFacts{})));
        }
        return value_or_raise(plan_step(graph, config, facts.value_or(PlanningFacts{}), options));
      },
      py::arg("graph"), py::arg("config"), py::arg("device") = nullptr,
      py::arg("fetched") = std::vector<std::string>{}, py::arg("fuse_conv_relu") = true,
      py::arg("facts") = std::nullopt,
      R"(Plans `graph` as lms.rewrite does, leaving `graph` unchanged, and returns a
StepPlan: the planned graph, its RewriteReport and the step's layout.
lms.Session(plan, device) then runs the step on that very layout. Arguments
and errors as lms.rewrite.)");

  m.def(
      "rewrite",
      [](Graph& graph, const LmsConfig& config, const std::shared_ptr<Device>& device,
         const std::vector<std::string>& fetched, bool fuse_conv_relu,
         const std::optional<PlanningFacts>& facts) {
        const RewriteOptions options{.fetched = fetched, .fuse_conv_relu = fuse_conv_relu};
        py::gil_scoped_release release;
        if (device)
          return value_or_raise(
              rewrite(graph, config, *device, options, facts.value_or(PlanningFacts{})));
        return value_or_raise(rewrite(graph, config, facts.value_or(PlanningFacts{}), options));
      },
      py::arg("graph"), py::arg("config"), py::arg("device") = nullptr,
      py::arg("fetched") = std::vector<std::string>{}, py::arg("fuse_conv_relu") = true,
      py::arg("facts") = std::nullopt,
      R"(Plans `graph` (a training graph, changed in place) for `device`: which
activations to keep, swap out to pinned host memory and prefetch back, or
recompute, so that the step's peak fits the device (or config's
device_memory_limit). Returns the RewriteReport.

fetched: tensors the session will fetch (Session(fetches=...)); default the loss.
facts: PlanningFacts from lms.gather_facts for this graph, device and fetched
tensors; what they hold is not measured again.
Raises MemoryError when even LMS cannot fit the budget (the message names the
node and the bytes it needs) and ValueError for a bad graph or config; the
graph is then unchanged. Without a device, only device_memory_limit is known
and `fits` stays undecided.)");
}

}  // namespace lms::python
