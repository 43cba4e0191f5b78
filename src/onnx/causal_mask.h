// Note [Causal mask from positions]: a causal language model computes its
// mask from the sequence's positions, i = arange(t), as
//
//   (i[None, :] > i[:, None]).float() * -1e9       or
//   torch.where(i[None, :] > i[:, None], -1e9, 0.)
//
// which torch.onnx.export writes as Range -> Unsqueeze (twice) -> Greater
// (or Less with the operands swapped) -> Cast(float) -> Mul by a constant,
// or Greater -> Where(cond, c, 0). Folding that chain, as the walk folds
// any shape arithmetic, makes a [t, t] constant per layer (1 GiB of floats
// at t = 16,384), only for the attention fusion to find it causal and drop
// it. So the fusion (Note [Attention chain]) takes the comparison and what
// follows it into its chain, and the mapper checks the comparison's two
// operands, vectors of t positions that the walk has folded, in O(t): the
// one read as the key index (varying along the last axis) must be the one
// read as the query index (varying along the second last), strictly
// increasing, so that "key > query" holds exactly above the diagonal; the
// constant must mask (at most kMaskLimit; Where may also give -inf) and
// Where's other value be 0. When it is not so, the comparison's nodes are
// folded after all and the folded [t, t] mask checked as any other mask.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace lms::onnx_import {

// A mask entry at or below this is a masked score: exp(score - max) is 0
// in double and float for every score below 9e3 in magnitude, as for -inf.
inline constexpr double kMaskLimit = -1e4;

// The node of `g` writing `value` if it is an `op` node and `value` has no
// other reader; -1 else.
using SoleProducer = std::function<int(const std::string& value, const char* op)>;

// The nodes of `g` computing the mask value `mask` from a comparison of
// positions, the comparison first and the node writing `mask` last, each
// inner value read by the next node only; empty when `mask` is not written
// so. Structure only: the values are the mapper's to check.
std::vector<int> causal_mask_nodes(const ::onnx::GraphProto& g, const std::string& mask,
                                   const SoleProducer& from);

// Whether the nodes `nodes` of `g` (as causal_mask_nodes gives them)
// compute, from the constants `im` has bound, a causal mask over [t, t]
// scores: 0 where key <= query, masked above. O(t): nothing of [t, t] is
// made.
bool is_causal_mask_from_positions(const Importer& im, const ::onnx::GraphProto& g,
                                   const std::vector<int>& nodes, int64_t t);

}  // namespace lms::onnx_import
