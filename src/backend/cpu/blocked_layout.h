// The CPU backend's blocked-layout rule: which tensors its kernels can read
// and write in oneDNN's blocked activation layout (nChw16c / nCdhw16c), in
// one place for both sides that need it:
// the lowering pass that records the layouts in the graph
// (runtime/blocked_layouts.h, run for DeviceKind::kCpu by lowering_pipeline)
// and the kernels, which refuse any other layout attribute.
//
//   if (cpu::tensor_may_be_blocked(t.shape, t.dtype) &&
//       cpu::slot_may_be_blocked(node.op, /*input=*/true, 0)) { ... }
//
// No oneDNN types: the runtime includes this header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "backend/kernel.h"
#include "lms/op_kind.h"
#include "lms/types.h"

namespace lms::cpu {

// Note [Blocked layouts]: a convolution kernel on the CPU device runs on
// oneDNN's blocked layout (nChw16c with AVX-512, Note [Conv layouts]); when
// its input and output tensors are plain it reorders each of them on every
// call, about 9.5 ms per 64->64 layer of a VDSR step (bench/SPEED.md). A
// tensor whose producer and every consumer can work on the blocked layout is
// therefore stored blocked, and nothing reorders it. The rule:
//  - Only activations and their gradients, produced by a node, NCHW or NCDHW
//    with C a multiple of kBlockChannels: blocking then only permutes the
//    bytes (16 divides the block of every ISA), so the tensor's byte size, the
//    one the memory planner counts, is unchanged. Graph inputs, persistent
//    tensors, the loss and fetched tensors stay plain: the host writes and
//    reads those (feeds, fetches, Session::read, checkpoints).
//  - Convolutions read and write blocked only their activation slots (x, y,
//    dy, dx; weights and biases stay plain); their kernels reorder a blocked
//    tensor themselves when the primitive they pick wants plain.
//  - Element-wise ops (relu, add, ...) see a tensor as a flat array, so they
//    work on any layout as long as all their inputs and outputs share it:
//    either all are blocked or none is. A broadcasting add or mul is not
//    flat (it indexes its smaller operand by dimension) and stays plain.
//  - Swap copies copy bytes, so a swapped tensor keeps its layout:
//    lms::rewrite lays the graph out before it inserts them, and the nodes
//    it rewires to a swap-in keep their "layout" attribute. (In a graph that
//    already has swap nodes, their tensors stay plain.)
//  - Any other op (concat, pooling, normalisation, losses, optimizers) reads
//    and writes plain; the CPU kernels refuse anything else
//    (check_blocked_layout below, and the convolutions' own slot check).
// Reorders are exact permutations and every kernel keeps the primitive it
// would pick for plain tensors, so results are bit-identical with and
// without blocking. The functions below are this rule; the lowering pass
// that applies it to a graph (assign_blocked_layouts) runs in the runtime,
// for DeviceKind::kCpu only (Note [Device lowering]).

// Channels per block: a multiple of oneDNN's channel block on every ISA
// (nChw8c below AVX-512, nChw16c with it), so a tensor of whole blocks is
// never padded.
inline constexpr int64_t kBlockChannels = 16;

// A tensor the blocked layout only permutes: NCHW or NCDHW float32 with C a
// multiple of kBlockChannels, so its byte size (the one the memory planner
// counts) is that of the plain layout.
bool tensor_may_be_blocked(const Shape& shape, DType dtype);

// Whether the kernel of `op` can read its input `i` (input) or write its
// output `i` blocked: a convolution's activations (x, y, dy, dx; never
// weights or biases), and every tensor of a flat element-wise op
// (is_flat_elementwise), which must then agree (all_or_none_blocked).
bool slot_may_be_blocked(OpKind op, bool input, size_t i);

// Ops whose tensors are blocked all together or not at all (flat
// element-wise ops, which see their tensors as one flat array).
bool all_or_none_blocked(OpKind op);

// The kernel side of the rule for every op but the convolutions (whose
// kernels check their slots and blocks themselves): OK when the spec's
// layout attribute (kLayoutAttr) blocks only slots slot_may_be_blocked
// allows, only tensors tensor_may_be_blocked allows, all or none of an
// all_or_none_blocked op's tensors, and no broadcasting add / mul.
// InvalidArgument naming the node and the rule otherwise. The attribute's
// form is the op schema's (check_spec).
absl::Status check_blocked_layout(const KernelSpec& spec);

}  // namespace lms::cpu
