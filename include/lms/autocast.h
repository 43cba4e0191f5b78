// Automatic mixed precision as a graph pass, after PyTorch's torch.autocast
// (the op lists of its CUDA autocast, PyTorch 1.13 / 2.x):
//
//   lms::Graph g = ...;  // a forward model ending in a float32 loss
//   LMS_ASSIGN_OR_RETURN(lms::AutocastReport r,
//                        lms::autocast(g, {.dtype = lms::DType::kBFloat16}));
//   LMS_ASSIGN_OR_RETURN(lms::Graph train, lms::training_graph(g, g.loss(), opt));
//
// Per op of the forward graph:
//  - conv, deconv, linear and matmul compute in the low dtype: each float32
//    input gets a cast node, and the output is of the low dtype;
//  - softmax, reduce_mean, sum_to, attention, embedding and the losses
//    compute in float32: a low-precision input is cast back;
//  - every other op (the normalisations, the pointwise ops, pooling,
//    upsample, reshapes) follows its inputs: in their dtype when they share
//    one, in float32 when they mix (PyTorch's type promotion). A
//    normalisation computes its statistics in float32 whatever its input,
//    and its scale and shift stay float32 (PyTorch's bf16 batch norm).
// Parameters stay float32 master weights: the cast of a parameter is made
// once and shared by its readers (torch.autocast's weight-cast cache), the
// cast of an activation once per reader. The casts are graph tensors that
// lms::rewrite can keep, swap or recompute like any other; their gradients
// are cast back (the cast op, lms/ops.h), so the optimizer updates the
// float32 parameters with float32 gradients. A cast the pass would place on
// the output of a cast whose dtype holds every value of its input (float32
// holds bf16 and f16) reads that input instead: the cast of a cast is folded,
// and a cast back to the input's own dtype disappears.
//
// Node and tensor names are kept (a low-precision node's output keeps its
// name and is fetched as float32); casts are named "<reader>/autocast/<i>"
// for input i of an activation and "<parameter>/<dtype>" for a parameter.
//
// On a device without a low-precision kernel for an op, the op runs in
// float32 between casts (docs/design.md, "Mixed precision"): results are
// those of the low-precision kernel up to the order of float32 sums, and
// the planner counts those float32 copies like every other tensor.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "lms/graph.h"
#include "lms/types.h"

namespace lms {

struct AutocastOptions {
  // The low dtype: kBFloat16 (bf16, float32's exponent range) or kFloat16
  // (f16, which needs loss scaling to keep small gradients).
  DType dtype = DType::kBFloat16;
};

struct AutocastReport {
  int32_t low_precision_nodes = 0;  // nodes computing in options.dtype
  int32_t casts_added = 0;          // cast nodes the pass placed
  int32_t casts_folded = 0;         // casts of casts that read the first input instead
};

// Rewrites the forward graph `graph` in place. Errors (InvalidArgument, the
// graph unchanged): options.dtype is not bf16 or f16; the graph has a
// recorded error, does not verify, is already planned by lms::rewrite, or
// holds backward or optimizer nodes (autocast runs before training_graph).
absl::StatusOr<AutocastReport> autocast(Graph& graph, const AutocastOptions& options = {});

}  // namespace lms
