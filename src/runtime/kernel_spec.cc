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

// Every field of KernelSpec but the names (node and inputs, for messages
// only) is in the key: a field added to KernelSpec changes its size and
// stops the build here until the key has it.
struct KernelSpecFields {
  std::string name;
  OpKind op;
  Attrs attrs;
  std::vector<Shape> input_shapes;
  std::vector<Shape> output_shapes;
  std::vector<DType> input_dtypes;
  std::vector<std::string> input_names;
};
static_assert(sizeof(KernelSpec) == sizeof(KernelSpecFields),
              "kernel_spec_key must hold every field of KernelSpec but the names");

KernelSpecKey kernel_spec_key(const KernelSpec& spec) {
  return {spec.op, spec.attrs, spec.input_shapes, spec.output_shapes, spec.input_dtypes};
}

absl::StatusOr<std::shared_ptr<Kernel>> KernelCache::kernel(const Graph& g, NodeId id,
                                                            Device& device) {
  KernelSpec spec = kernel_spec(g, g.node(id));
  KernelSpecKey key = kernel_spec_key(spec);
  if (auto it = kernels_.find(key); it != kernels_.end()) return it->second;
  LMS_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> compiled, device.compile(spec));
  std::shared_ptr<Kernel> shared = std::move(compiled);
  kernels_.emplace(std::move(key), shared);
  return shared;
}

}  // namespace lms
