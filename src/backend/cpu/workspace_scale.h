// Note [Workspace scale test hook]
//
// oneDNN picks other convolution kernels, with other workspaces, on every
// CPU (its instruction set, but also its vendor and cache sizes), so a plan
// computed on one x86 machine differs from another's. A test that asserts
// what the planner chose must hold whatever workspaces the machine's kernels
// need, and emulating an instruction set (DNNL_MAX_CPU_ISA) does not
// reproduce another vendor's caches. With the environment variable
// LMS_CPU_WORKSPACE_SCALE set to a factor f (0 < f <= 16), every kernel the
// CPU device compiles reports ceil(f x its real workspace) bytes, so the
// planner, the placement and the session account for that size:
//  - f >= 1: the kernel runs in its slot of the arena (large enough);
//  - f < 1: the kernel runs in a private buffer of its real size outside
//    the device region, so the arena's accounting is the scaled one.
// The kernels and so the results are unchanged; only the bytes the device
// reports for them move, as they would on another machine. The test suite
// runs its planner-shape tests again with f = 0.5 and f = 2
// (tests/lms_tests.cmake).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "lms/device.h"

namespace lms::cpu {

// The factor of LMS_CPU_WORKSPACE_SCALE: 1 when unset; InvalidArgument when
// it is not a number in (0, 16].
absl::StatusOr<double> workspace_scale_from_env();

// `kernel` reporting ceil(scale x its workspace) bytes (Note [Workspace
// scale test hook]); `kernel` itself when scale is 1.
std::unique_ptr<Kernel> scale_workspace(std::unique_ptr<Kernel> kernel, double scale);

}  // namespace lms::cpu
