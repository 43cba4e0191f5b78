// How the runtime turns a graph node into a kernel: the KernelSpec a backend
// compiles (op, attributes, input shapes, dtypes and names, output shapes)
// and which nodes have no
// kernel (swap_out / swap_in run on the copy streams, all_reduce on the
// communication stream). Shared by Session,
// kernel_workspace_bytes and profile_step, so every caller compiles a node
// the same way and sees the same workspace.
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/kernel.h"
#include "lms/device.h"
#include "lms/graph.h"

namespace lms {

// swap_out / swap_in (copies on the copy streams) and all_reduce (an
// exchange on the communication stream): nodes without a kernel.
bool has_no_kernel(const Node& n);

// The spec of compute node `n` of `g`.
KernelSpec kernel_spec(const Graph& g, const Node& n);

// Compiles compute node `id` of `g` on `device` (the device's errors:
// Unimplemented for an op it lacks, InvalidArgument for shapes or attributes
// it cannot handle).
absl::StatusOr<std::unique_ptr<Kernel>> compile_node(const Graph& g, NodeId id, Device& device);

// What a kernel depends on: its spec less the names (op, attributes, input
// and output shapes, input dtypes). Nodes with equal keys compile to the
// same kernel, so one kernel serves them all (Note [One kernel per spec]).
using KernelSpecKey =
    std::tuple<OpKind, Attrs, std::vector<Shape>, std::vector<Shape>, std::vector<DType>>;
KernelSpecKey kernel_spec_key(const KernelSpec& spec);

// Note [One kernel per spec]: the layers of a deep model repeat a few specs
// (VDSR's 11,111 layers, three), and compiling a kernel (oneDNN primitive
// descriptors, cuDNN plans) is what made Session::create of a 100k-node
// graph take seconds. So the session compiles each distinct spec once and
// its nodes share that kernel, and kernel_workspace_bytes compiles each
// once too. Sharing is safe because a kernel keeps nothing of a run: run()
// binds the buffers of the invocation it is given, and every compute
// kernel runs in order on the one compute stream. Errors from a shared
// kernel's run() name the node it was compiled for; the device's launch
// prefixes the node that ran (Device::launch).
class KernelCache {
 public:
  // The kernel of node `id` of `g`: compiled on `device` on the first node
  // of its spec, shared after. Errors: compile_node's.
  absl::StatusOr<std::shared_ptr<Kernel>> kernel(const Graph& g, NodeId id, Device& device);

 private:
  std::map<KernelSpecKey, std::shared_ptr<Kernel>> kernels_;
};

}  // namespace lms
