// A compiled kernel: created when a session is built, once per distinct spec
// (primitive creation is expensive; the nodes of one spec share it), then
// run every step on the compute stream. Ops, inputs and attributes are those
// of docs/ops.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lms/device.h"
#include "lms/op_kind.h"
#include "lms/types.h"
#include "op_schema/op_instance.h"

namespace lms {

// What a backend needs to know to compile a kernel (no graph types: the
// backend layer does not depend on the graph): the op instance the op schema
// checks, so a backend validates a spec with the same check_spec as the
// graph (op_schema/op_schema.h) before its kernel reads it. A struct of its
// own only because lms/device.h declares it.
struct KernelSpec : OpInstance {};

// Device pointers of one invocation. Inputs listed as mutated in docs/ops.md
// are written in place.
struct KernelArgs {
  std::vector<float*> inputs;
  std::vector<float*> outputs;
  void* workspace = nullptr;  // workspace_bytes() of device memory, or null if 0
  // The session's count of completed steps (0 for the first; a failed step
  // does not advance it): the counter of dropout's mask (backend/dropout_hash.h).
  int64_t step = 0;
};

// class Kernel is declared in lms/device.h (a Device decorator passes
// kernels through without the internal types above).

}  // namespace lms
