// One op instance as both the graph and the backends see it: the op, its
// attributes, the shapes and dtypes of its inputs and the shapes of its
// outputs, with no graph or device types. The op schema (op_schema.h)
// checks it; the graph builds one per node it adds or verifies, the runtime
// one per kernel it compiles (a backend's OpInstance is this struct).
//
//   OpInstance inst{"fc1/slice", OpKind::kSlice, {{"begin", int64_t{0}}, {"size", int64_t{2}}},
//                   {{4, 8}}};
//   absl::StatusOr<std::vector<Shape>> y = infer_outputs(inst);  // {{2, 8}}
#pragma once

#include <string>
#include <vector>

#include "lms/op_kind.h"
#include "lms/types.h"

namespace lms {

struct OpInstance {
  std::string name;           // node name, for error messages
  OpKind op = OpKind::kConv;  // an op of docs/ops.md
  Attrs attrs;
  std::vector<Shape> input_shapes;
  // The outputs a compiled kernel writes; empty while the graph infers them.
  std::vector<Shape> output_shapes;
  // One per input, or empty: then every input is taken to have the dtype
  // the op takes there (a spec built by hand, in a test).
  std::vector<DType> input_dtypes;
  // The inputs' tensor names, for messages; empty when unknown.
  std::vector<std::string> input_names;
};

}  // namespace lms
