// Shared by the binding files of the Python module lms._lms: how an
// absl::Status becomes a Python exception, and byte sizes given as numbers or
// strings.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lms::python {

namespace py = pybind11;

// ResourceExhausted, raised in Python as MemoryError (a C++ exception, so
// that it may be thrown where the GIL is released).
struct OutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Raises the Python exception of a failed status, with its message:
// ValueError for InvalidArgument, MemoryError for ResourceExhausted,
// RuntimeError for every other code (the message starts with the code's name
// then, "NOT_FOUND: ...").
void raise_if_error(const absl::Status& status);

template <typename T>
T value_or_raise(absl::StatusOr<T> result) {
  raise_if_error(result.status());
  return std::move(*result);
}

// A byte count given as an int (bytes) or a string with a unit ("256MiB",
// "1GB"); ValueError naming `what` otherwise.
uint64_t bytes_arg(const py::object& value, const char* what);
// A bandwidth in bytes/s given as a number or a string ("12GB/s").
double bandwidth_arg(const py::object& value, const char* what);
// A duration in seconds given as a number or a string ("5us").
double duration_arg(const py::object& value, const char* what);

void define_graph(py::module_& m);
void define_config(py::module_& m);
void define_device(py::module_& m);
void define_session(py::module_& m);
void define_facts(py::module_& m);

}  // namespace lms::python
