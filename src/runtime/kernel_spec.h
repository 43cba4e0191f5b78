// How the runtime turns a graph node into a kernel: the KernelSpec a backend
// compiles (op, attributes, input shapes, dtypes and names, output shapes)
// and which nodes have no
// kernel (swap_out / swap_in run on the copy streams, all_reduce on the
// communication stream). Shared by Session,
// kernel_workspace_bytes and profile_step, so every caller compiles a node
// the same way and sees the same workspace.
#pragma once

#include <memory>

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

}  // namespace lms
