// A compiled kernel for one node: created once per node when a session is
// built (primitive creation is expensive), then run every step on the
// compute stream. Ops, inputs and attributes are those of docs/ops.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/types.h"

namespace lms {

// What a backend needs to know to compile a kernel (no graph types: the
// backend layer does not depend on the graph).
struct KernelSpec {
  std::string name;  // node name, for error messages
  std::string op;    // an op of docs/ops.md
  Attrs attrs;
  std::vector<Shape> input_shapes;
  std::vector<Shape> output_shapes;
};

// Device pointers of one invocation. Inputs listed as mutated in docs/ops.md
// are written in place.
struct KernelArgs {
  std::vector<float*> inputs;
  std::vector<float*> outputs;
  void* workspace = nullptr;  // workspace_bytes() of device memory, or null if 0
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Scratch device memory the kernel needs during run(), in bytes. The
  // executor allocates it from the device allocator so accounting is exact.
  virtual uint64_t workspace_bytes() const { return 0; }
  // Runs synchronously on the calling (stream) thread for the CPU backend, or
  // enqueues on the compute stream for CUDA. Internal library errors are
  // returned as Status (InternalError naming the node and library message).
  virtual absl::Status run(const KernelArgs& args) = 0;
};

}  // namespace lms
