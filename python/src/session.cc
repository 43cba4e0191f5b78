// Devices and sessions from Python: feeds and fetches as NumPy arrays,
// parameters and checkpoints.
#include "lms/session.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "lms/device.h"
#include "lms/graph.h"
#include "lms/io/checkpoint.h"
#include "lms/units.h"

namespace lms::python {
namespace {

py::dict stats_dict(const AllocatorStats& s) {
  py::dict out;
  out["capacity_bytes"] = s.capacity_bytes;
  out["bytes_in_use"] = s.bytes_in_use;
  out["peak_bytes_in_use"] = s.peak_bytes_in_use;
  out["largest_free_chunk"] = s.largest_free_chunk;
  out["num_allocs"] = s.num_allocs;
  out["total_allocs"] = s.total_allocs;
  return out;
}

std::string shape_text(const Shape& shape) {
  std::string out = "(";
  for (size_t k = 0; k < shape.size(); ++k) out += (k ? ", " : "") + std::to_string(shape[k]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

std::string shape_text(const py::array& a) {
  return shape_text(Shape(a.shape(), a.shape() + a.ndim()));
}

// The NumPy dtype a tensor of `d` is fed and fetched as: int64, or float32
// for every float dtype (bf16 and f16 values are rounded on the way in and
// widened on the way out).
const char* dtype_text(DType d) { return d == DType::kInt64 ? "int64" : "float32"; }

bool has_dtype(const py::array& a, DType d) {
  const char kind = a.dtype().kind();
  return d == DType::kInt64 ? (kind == 'i' && a.itemsize() == 8)
                            : (kind == 'f' && a.itemsize() == 4);
}

// `values` (owned by the returned array, no copy) as an array of `shape`.
template <typename T>
py::array owning_array(std::vector<T>&& values, const Shape& shape) {
  auto* owned = new std::vector<T>(std::move(values));
  py::capsule owner(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  if (static_cast<int64_t>(owned->size()) != num_elements(shape)) {
    dims = {static_cast<py::ssize_t>(owned->size())};
  }
  return py::array_t<T>(dims, owned->data(), owner);
}

// The session and what it must outlive: the graph it runs (a copy, so the
// caller may rewrite or drop its own) and the device.
struct PySession {
  std::shared_ptr<Device> device;
  std::shared_ptr<const Graph> graph;  // the session's own copy, or a StepPlan's
  std::unique_ptr<Session> session;

  const Tensor* tensor(const std::string& name) const {
    const TensorId t = graph->find_tensor(name);
    return t == kNoTensor ? nullptr : &graph->tensor(t);
  }

  std::string inputs_text() const {
    std::string out;
    for (int32_t t = 0; t < graph->num_tensors(); ++t) {
      const Tensor& tensor = graph->tensor(t);
      if (tensor.role != TensorRole::kInput) continue;
      out += (out.empty() ? "" : ", ") + tensor.name + " " + shape_text(tensor.shape) + " " +
             dtype_text(tensor.dtype);
    }
    return out;
  }

  // The persistent tensor `name` and a C-contiguous float32 copy-free view
  // of `values` checked against it; ValueError / KeyError naming both.
  py::array_t<float, py::array::c_style> checked_values(const std::string& name,
                                                        const py::array& values,
                                                        const char* what) const {
    const Tensor* t = tensor(name);
    if (t == nullptr || !is_persistent(t->role)) {
      throw py::key_error(std::string(what) + ": '" + name +
                          "' is not a parameter or optimizer state of the session");
    }
    if (!has_dtype(values, DType::kFloat32)) {
      throw py::value_error(std::string(what) + ": '" + name + "' is float32 " +
                            shape_text(t->shape) + ", the array is " +
                            std::string(py::str(values.dtype())) + "; pass a float32 array");
    }
    if (Shape(values.shape(), values.shape() + values.ndim()) != t->shape) {
      throw py::value_error(std::string(what) + ": '" + name + "' has shape " +
                            shape_text(t->shape) + ", the array " + shape_text(values));
    }
    return py::array_t<float, py::array::c_style>::ensure(values);
  }
};

struct Step {
  py::dict fetched;
  std::optional<double> loss;
  StepResult stats;
};

}  // namespace

void define_device(py::module_& m) {
  py::class_<Device, std::shared_ptr<Device>>(
      m, "Device",
      "Device memory (one region under a BFC allocator), a pinned host pool, a compute stream "
      "and D2H / H2D copy streams. Made by lms.cpu_device or lms.cuda_device.")
      .def_property_readonly("name", &Device::name)
      .def_property_readonly("kind", &Device::kind)
      .def(
          "memory_stats", [](const Device& d) { return stats_dict(d.memory_stats()); },
          "Device memory, bytes: capacity_bytes, bytes_in_use, peak_bytes_in_use, ...")
      .def(
          "host_stats", [](const Device& d) { return stats_dict(d.host_stats()); },
          "The pinned host pool, bytes, as memory_stats.")
      .def("reset_peak_memory", &Device::reset_peak_memory)
      .def("__repr__", [](const Device& d) {
        return "<lms.Device " + d.name() + ", " + format_bytes(d.memory_stats().capacity_bytes) +
               ">";
      });

  m.def(
      "cpu_device",
      [](const py::object& capacity, const py::object& host_pool, const py::object& d2h_bandwidth,
         const py::object& h2d_bandwidth, const py::object& copy_latency, int threads) {
        CpuDeviceOptions o;
        o.capacity_bytes = bytes_arg(capacity, "capacity");
        o.host_pool_bytes = bytes_arg(host_pool, "host_pool");
        o.d2h_bytes_per_s = bandwidth_arg(d2h_bandwidth, "d2h_bandwidth");
        o.h2d_bytes_per_s = bandwidth_arg(h2d_bandwidth, "h2d_bandwidth");
        o.copy_latency_s = duration_arg(copy_latency, "copy_latency");
        o.compute_threads = threads;
        return std::shared_ptr<Device>(value_or_raise(make_cpu_device(o)));
      },
      py::arg("capacity") = "256MiB", py::arg("host_pool") = "4GiB", py::arg("d2h_bandwidth") = 0,
      py::arg("h2d_bandwidth") = 0, py::arg("copy_latency") = 0, py::arg("threads") = 0,
      R"(The emulated device on the CPU: `capacity` bytes of device memory
(int or "256MiB"), a pinned host pool of `host_pool` bytes, copies throttled to
d2h_bandwidth / h2d_bandwidth bytes/s ("12GB/s"; 0 = unthrottled) plus
copy_latency seconds ("5us"), oneDNN kernels on `threads` threads (0 = all
cores). Running out of its memory fails as on a GPU. ValueError for a bad value.)");

  m.def(
      "cuda_device",
      [](int ordinal, const py::object& capacity, const py::object& reserve,
         const py::object& host_pool) {
        CudaDeviceOptions o;
        o.device_ordinal = ordinal;
        o.capacity_bytes = bytes_arg(capacity, "capacity");
        o.reserve_bytes = bytes_arg(reserve, "reserve");
        o.host_pool_bytes = bytes_arg(host_pool, "host_pool");
        return std::shared_ptr<Device>(value_or_raise(make_cuda_device(o)));
      },
      py::arg("ordinal") = 0, py::arg("capacity") = 0, py::arg("reserve") = "256MiB",
      py::arg("host_pool") = "1GiB",
      R"(A CUDA GPU: `capacity` bytes of its memory (0 = what is free less
`reserve`), a pinned host pool of `host_pool` bytes. RuntimeError when lms was
built without CUDA or the GPU cannot be used.)");
}

void define_session(py::module_& m) {
  py::class_<Step>(m, "StepResult",
                   "One step: the fetched arrays and what the step took (seconds, bytes).")
      .def_readonly("fetched", &Step::fetched, "Fetched tensors by name, NumPy arrays.")
      .def_readonly("loss", &Step::loss, "The loss as a float, when it was fetched.")
      .def_property_readonly("step_s", [](const Step& s) { return s.stats.step_s; })
      .def_property_readonly(
          "stall_s", [](const Step& s) { return s.stats.stall_s; },
          "Compute-stream waits on copies, seconds.")
      .def_property_readonly("host_wait_s", [](const Step& s) { return s.stats.host_wait_s; })
      .def_property_readonly("peak_device_bytes",
                             [](const Step& s) { return s.stats.peak_device_bytes; })
      .def_property_readonly("peak_pinned_host_bytes",
                             [](const Step& s) { return s.stats.peak_pinned_host_bytes; })
      .def_property_readonly("bytes_d2h", [](const Step& s) { return s.stats.bytes_d2h; })
      .def_property_readonly("bytes_h2d", [](const Step& s) { return s.stats.bytes_h2d; })
      .def("__repr__", [](const Step& s) {
        return "<lms.StepResult loss " + (s.loss ? std::to_string(*s.loss) : "-") + ", " +
               std::to_string(s.stats.step_s) + " s, peak " +
               format_bytes(s.stats.peak_device_bytes) + ">";
      });

  py::class_<PySession>(m, "Session",
                        R"(Runs a training (or forward) graph on a device, one step per run().

  session = lms.Session(graph, device)
  step = session.run({"input": x, "labels": y})   # NumPy arrays
  print(step.loss, step.peak_device_bytes)

The session keeps its own copy of the graph and holds the device.)")
      .def(py::init([](const Graph& graph, const std::shared_ptr<Device>& device,
                       std::vector<std::string> fetches) {
             if (!device) throw py::value_error("Session: device is None");
             auto s = std::make_unique<PySession>();
             s->device = device;
             s->graph = std::make_shared<const Graph>(graph);
             py::gil_scoped_release release;
             s->session = value_or_raise(
                 Session::create(*s->graph, *device, {.fetches = std::move(fetches)}));
             return s;
           }),
           py::arg("graph"), py::arg("device"), py::arg("fetches") = std::vector<std::string>{},
           "Allocates and initialises the parameters and optimizer state on `device`. "
           "fetches: tensors returned by run() (default: the loss). MemoryError when the "
           "persistent tensors do not fit; RuntimeError (FAILED_PRECONDITION) when the graph "
           "was planned for another device.")
      .def(py::init([](const StepPlan& plan, const std::shared_ptr<Device>& device,
                       std::vector<std::string> fetches) {
             if (!device) throw py::value_error("Session: device is None");
             auto s = std::make_unique<PySession>();
             s->device = device;
             s->graph = plan.shared_graph();
             py::gil_scoped_release release;
             s->session =
                 value_or_raise(Session::create(plan, *device, {.fetches = std::move(fetches)}));
             return s;
           }),
           py::arg("plan"), py::arg("device"), py::arg("fetches") = std::vector<std::string>{},
           "The same for a StepPlan (lms.plan_step): the step runs on the plan's own layout, "
           "with no layout search (reused_planned_layout). RuntimeError (FAILED_PRECONDITION) "
           "when the plan was made for another device or fetch set.")
      .def(
          "run",
          [](PySession& s, const py::dict& feeds) {
            // C-contiguous arrays are read in place (FeedView); others are
            // copied once into a contiguous array held here until the step
            // ends.
            FeedViews views;
            std::vector<py::array> held;
            for (const auto& [key, value] : feeds) {
              const std::string name = py::str(key);
              const Tensor* t = s.tensor(name);
              if (t == nullptr || t->role != TensorRole::kInput) {
                throw py::value_error("feed '" + name +
                                      "' names no graph input; the inputs: " + s.inputs_text());
              }
              if (!py::isinstance<py::array>(value)) {
                throw py::value_error("feed '" + name + "': expected a NumPy array of " +
                                      dtype_text(t->dtype) + " " + shape_text(t->shape) + ", got " +
                                      std::string(py::str(py::type::of(value).attr("__name__"))));
              }
              const auto a = py::reinterpret_borrow<py::array>(value);
              if (!has_dtype(a, t->dtype)) {
                throw py::value_error("feed '" + name + "': the input is " + dtype_text(t->dtype) +
                                      ", the array " + std::string(py::str(a.dtype())) +
                                      "; convert it with .astype(numpy." + dtype_text(t->dtype) +
                                      ")");
              }
              if (Shape(a.shape(), a.shape() + a.ndim()) != t->shape) {
                throw py::value_error("feed '" + name + "': the input has shape " +
                                      shape_text(t->shape) + ", the array " + shape_text(a));
              }
              if (t->dtype == DType::kInt64) {
                held.push_back(py::array_t<int64_t, py::array::c_style>::ensure(a));
              } else {
                held.push_back(py::array_t<float, py::array::c_style>::ensure(a));
              }
              views[name] = {held.back().data(), static_cast<size_t>(held.back().size()),
                             is_float_dtype(t->dtype) ? DType::kFloat32 : DType::kInt64};
            }
            Step step;
            {
              py::gil_scoped_release release;
              raise_if_error(s.session->run_views(views, &step.stats));
            }
            const std::string loss =
                s.graph->loss() == kNoTensor ? "" : s.graph->tensor(s.graph->loss()).name;
            for (auto& [name, values] : step.stats.fetched) {
              if (name == loss && values.size() == 1) step.loss = values[0];
              step.fetched[py::str(name)] = owning_array(std::move(values), s.tensor(name)->shape);
            }
            for (auto& [name, values] : step.stats.fetched_int64) {
              step.fetched[py::str(name)] = owning_array(std::move(values), s.tensor(name)->shape);
            }
            step.stats.fetched.clear();
            step.stats.fetched_int64.clear();
            return step;
          },
          py::arg("feeds"),
          R"(Runs one step. feeds: every graph input by name, a NumPy array of the
input's dtype (float32 or int64) and shape; a C-contiguous array is read in
place, without a copy. The GIL is released while the step
runs. ValueError naming the feed for a wrong name, dtype or shape; MemoryError
when device or pinned memory runs out. A failed step changes no parameter or
optimizer state, and the session stays usable.)")
      .def_property_readonly(
          "persistent_tensors", [](const PySession& s) { return s.session->persistent_tensors(); },
          "Names of the parameters and optimizer state, in tensor order.")
      .def_property_readonly("parameters",
                             [](const PySession& s) {
                               std::vector<std::string> out;
                               for (const std::string& n : s.session->persistent_tensors()) {
                                 if (s.tensor(n)->role == TensorRole::kParameter) out.push_back(n);
                               }
                               return out;
                             })
      .def(
          "read",
          [](const PySession& s, const std::string& name) {
            const Tensor* t = s.tensor(name);
            if (t == nullptr || !is_persistent(t->role)) {
              throw py::key_error("'" + name +
                                  "' is not a parameter or optimizer state of the session");
            }
            return owning_array(value_or_raise(s.session->read(name)), t->shape);
          },
          py::arg("name"), "A parameter or optimizer state as a float32 array (a copy).")
      .def(
          "write",
          [](PySession& s, const std::string& name, const py::array& values) {
            auto c = s.checked_values(name, values, "write");
            raise_if_error(
                s.session->write(name, std::vector<float>(c.data(), c.data() + c.size())));
          },
          py::arg("name"), py::arg("values"),
          "Overwrites a parameter or optimizer state with a float32 array of its shape.")
      .def(
          "state_dict",
          [](const PySession& s) {
            py::dict out;
            for (const std::string& n : s.session->persistent_tensors()) {
              out[py::str(n)] =
                  owning_array(value_or_raise(s.session->read(n)), s.tensor(n)->shape);
            }
            return out;
          },
          "Every parameter and optimizer state by name, float32 arrays.")
      .def(
          "load_state_dict",
          [](PySession& s, const py::dict& values) {
            // Everything is checked before anything is written.
            std::vector<std::pair<std::string, std::vector<float>>> checked;
            for (const auto& [key, value] : values) {
              const std::string name = py::str(key);
              if (!py::isinstance<py::array>(value)) {
                throw py::value_error("load_state_dict: '" + name + "' is not a NumPy array");
              }
              auto c = s.checked_values(name, py::reinterpret_borrow<py::array>(value),
                                        "load_state_dict");
              checked.emplace_back(name, std::vector<float>(c.data(), c.data() + c.size()));
            }
            for (const auto& [name, v] : checked) raise_if_error(s.session->write(name, v));
          },
          py::arg("values"),
          "Writes the arrays of `values` (name -> float32 array) into the session; all are "
          "checked first, so a bad one writes none.")
      .def(
          "save_checkpoint",
          [](const PySession& s, const std::string& path, int64_t step,
             const std::map<std::string, std::string>& meta) {
            std::vector<io::NamedTensor> tensors;
            for (const std::string& n : s.session->persistent_tensors()) {
              const Shape& shape = s.tensor(n)->shape;
              tensors.push_back({n, std::vector<int64_t>(shape.begin(), shape.end()),
                                 value_or_raise(s.session->read(n))});
            }
            py::gil_scoped_release release;
            raise_if_error(io::save_checkpoint(path, tensors, step, meta));
          },
          py::arg("path"), py::arg("step") = 0,
          py::arg("meta") = std::map<std::string, std::string>{},
          "Writes every parameter and optimizer state to `path` atomically (a crash leaves the "
          "old file).")
      .def(
          "load_checkpoint",
          [](PySession& s, const std::string& path) {
            io::Checkpoint ck;
            {
              py::gil_scoped_release release;
              ck = value_or_raise(io::load_usable_checkpoint(path));
            }
            for (const std::string& n : s.session->persistent_tensors()) {
              const io::NamedTensor* t = ck.find(n);
              if (t == nullptr) {
                throw py::value_error("checkpoint '" + path + "' has no tensor '" + n + "'");
              }
              if (Shape(t->shape.begin(), t->shape.end()) != s.tensor(n)->shape) {
                throw py::value_error("checkpoint '" + path + "': '" + n + "' has shape " +
                                      shape_text(Shape(t->shape.begin(), t->shape.end())) +
                                      ", the session's " + shape_text(s.tensor(n)->shape));
              }
            }
            for (const std::string& n : s.session->persistent_tensors()) {
              raise_if_error(s.session->write(n, ck.find(n)->data));
            }
            return ck.step;
          },
          py::arg("path"),
          "Reads a checkpoint of save_checkpoint into the session and returns its step. Checks "
          "every tensor first: on error nothing is written.")
      .def_property_readonly("reused_planned_layout",
                             [](const PySession& s) { return s.session->reused_planned_layout(); });
}

}  // namespace lms::python
