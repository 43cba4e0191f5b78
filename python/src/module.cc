// The Python module lms._lms; the package lms (python/lms/__init__.py)
// re-exports it. Each define_* is in the file of its part of the API.
#include <cmath>
#include <string>
#include <type_traits>

#include "common.h"
#include "lms/units.h"

namespace lms::python {

void raise_if_error(const absl::Status& status) {
  if (status.ok()) return;
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      throw py::value_error(message);
    case absl::StatusCode::kResourceExhausted:
      throw OutOfMemory(message);
    default:
      throw std::runtime_error(std::string(absl::StatusCodeToString(status.code())) + ": " +
                               message);
  }
}

namespace {

// A string is parsed with its unit; a number is taken as it is (bytes,
// bytes/s or seconds).
template <typename T>
T parse_arg(const py::object& value, const char* what, absl::StatusOr<T> (*parse)(std::string_view),
            const char* example) {
  absl::StatusOr<T> parsed = absl::InvalidArgumentError(
      std::string("expected a number or a string such as \"") + example + "\", got " +
      std::string(py::str(py::type::of(value).attr("__name__"))));
  if (py::isinstance<py::str>(value)) {
    parsed = parse(value.cast<std::string>());
  } else if (py::isinstance<py::int_>(value) && !py::isinstance<py::bool_>(value)) {
    if (value.cast<py::int_>() < py::int_(0)) {
      parsed =
          absl::InvalidArgumentError("must not be negative, got " + std::string(py::str(value)));
    } else if constexpr (std::is_integral_v<T>) {
      parsed = value.cast<T>();
    } else {
      parsed = static_cast<T>(value.cast<double>());
    }
  } else if (py::isinstance<py::float_>(value)) {
    const double v = value.cast<double>();
    if (!std::isfinite(v) || v < 0) {
      parsed = absl::InvalidArgumentError("must be finite and not negative, got " +
                                          std::string(py::repr(value)));
    } else if constexpr (std::is_integral_v<T>) {
      parsed = parse(std::string(py::str(py::int_(value))));
      if (static_cast<double>(static_cast<T>(v)) != v) {
        parsed = absl::InvalidArgumentError("a byte count must be whole, got " +
                                            std::string(py::repr(value)));
      }
    } else {
      parsed = v;
    }
  }
  if (!parsed.ok()) {
    throw py::value_error(std::string(what) + ": " + std::string(parsed.status().message()));
  }
  return *parsed;
}

}  // namespace

uint64_t bytes_arg(const py::object& value, const char* what) {
  return parse_arg<uint64_t>(value, what, &parse_bytes, "256MiB");
}
double bandwidth_arg(const py::object& value, const char* what) {
  return parse_arg<double>(value, what, &parse_bandwidth, "12GB/s");
}
double duration_arg(const py::object& value, const char* what) {
  return parse_arg<double>(value, what, &parse_duration, "5us");
}

PYBIND11_MODULE(_lms, m) {
  m.doc() =
      "lms: Large Model Support. Trains a network whose activations do not fit in device "
      "memory by swapping them to pinned host memory or recomputing them (lms::rewrite), "
      "with the same results bit for bit.";
  m.def(
      "parse_bytes", [](const std::string& text) { return value_or_raise(parse_bytes(text)); },
      py::arg("text"), "Bytes of \"256MiB\", \"1GB\" or \"512\" (binary and decimal units).");
  m.def("format_bytes", &format_bytes, py::arg("bytes"), "\"256 MiB\" and the like.");
  // Translated once the stack is unwound, with the GIL held again.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const OutOfMemory& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    }
  });
  define_graph(m);
  define_config(m);
  define_device(m);
  define_session(m);
  define_facts(m);
}

}  // namespace lms::python
