#include "runtime/kernel_spec.h"

#include "graph/op_registry.h"

namespace lms {

bool has_no_kernel(const Node& n) { return !has_kernel(n.op); }

KernelSpec kernel_spec(const Graph& g, const Node& n) {
  KernelSpec spec{n.name, n.op, n.attrs, {}, {}, {}, {}};
  for (TensorId t : n.inputs) {
    const Tensor& tensor = g.tensor(t);
    spec.input_shapes.push_back(tensor.shape);
    spec.input_dtypes.push_back(tensor.dtype);
    spec.input_names.push_back(tensor.name);
  }
  for (TensorId t : n.outputs) spec.output_shapes.push_back(g.tensor(t).shape);
  return spec;
}

absl::StatusOr<std::unique_ptr<Kernel>> compile_node(const Graph& g, NodeId id, Device& device) {
  return device.compile(kernel_spec(g, g.node(id)));
}

}  // namespace lms
