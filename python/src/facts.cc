// lms.gather_facts and lms.PlanningFacts from Python (lms/facts.h).
#include "lms/facts.h"

#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "lms/device.h"
#include "lms/rewrite.h"

namespace lms::python {

void define_facts(py::module_& m) {
  py::class_<PlanningFacts>(m, "PlanningFacts",
                            R"(What a plan depends on that the device decides (lms.gather_facts):
capacity, alignment and pinned host pool in bytes, each kernel's workspace in
bytes and each node's measured time in seconds, by node of the graph given,
the copy link and the calibrated roofline. Pass it to lms.rewrite(facts=...)
to plan again without measuring again.)")
      .def_readonly("device_capacity_bytes", &PlanningFacts::device_capacity_bytes)
      .def_readonly("alignment_bytes", &PlanningFacts::alignment_bytes)
      .def_readonly("host_pool_bytes", &PlanningFacts::host_pool_bytes)
      .def_readonly("workspace_bytes", &PlanningFacts::workspace_bytes,
                    "Bytes by node of the graph given; None when not known.")
      .def_readonly("least_workspace_bytes", &PlanningFacts::least_workspace_bytes)
      .def_readonly("node_time_s", &PlanningFacts::node_time_s,
                    "Seconds by node; -1 where not measured (the roofline applies).")
      .def_readonly("least_node_time_s", &PlanningFacts::least_node_time_s)
      .def_property_readonly(
          "link",
          [](const PlanningFacts& f) -> py::object {
            if (!f.link) return py::none();
            py::dict d;
            d["d2h_bytes_per_s"] = f.link->d2h_bytes_per_s;
            d["h2d_bytes_per_s"] = f.link->h2d_bytes_per_s;
            d["copy_latency_s"] = f.link->copy_latency_s;
            return d;
          },
          "The measured copy link (bytes/s each way, latency in seconds), or None.")
      .def_property_readonly(
          "roofline",
          [](const PlanningFacts& f) -> py::object {
            if (!f.roofline) return py::none();
            py::dict d;
            d["compute_flops_per_s"] = f.roofline->compute_flops_per_s;
            d["memory_bytes_per_s"] = f.roofline->memory_bytes_per_s;
            d["kernel_launch_s"] = f.roofline->kernel_launch_s;
            return d;
          },
          "The roofline calibrated on the device, or None.")
      .def_readonly("ranks", &PlanningFacts::ranks)
      .def_readonly("device_kind", &PlanningFacts::device_kind)
      .def_readonly("measured_on", &PlanningFacts::measured_on);

  m.def(
      "gather_facts",
      [](const Graph& graph, const LmsConfig& config, const std::shared_ptr<Device>& device,
         const std::vector<std::string>& fetched, bool fuse_conv_relu) {
        if (!device) throw py::value_error("gather_facts: a device is required");
        GatherOptions options;
        options.rewrite = {.fetched = fetched, .fuse_conv_relu = fuse_conv_relu};
        py::gil_scoped_release release;
        return value_or_raise(gather_facts(graph, config, *device, nullptr, options));
      },
      py::arg("graph"), py::arg("config"), py::arg("device"),
      py::arg("fetched") = std::vector<std::string>{}, py::arg("fuse_conv_relu") = true,
      R"(Gathers once what planning `graph` on `device` depends on: capacity,
alignment, pinned host pool, every kernel's workspace and, with the config's
time_model "measured", each node's time and the copy link. Returns
PlanningFacts for lms.rewrite(..., facts=...). Raises RuntimeError
(FAILED_PRECONDITION) when the device holds memory, ValueError for a bad
graph.)");
}

}  // namespace lms::python
