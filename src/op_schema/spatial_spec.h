// Reading and validating the OpInstance of a spatial op (docs/ops.md), shared
// by both backends so they reject a bad spec with the same status: attribute
// lookup with type/length checks, arity checks, and the geometry of the
// convolution family. Every error is InvalidArgument naming the node, what
// was wrong and what is allowed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "op_schema/op_instance.h"

namespace lms {

absl::Status spec_error(const OpInstance& spec, const std::string& message);

// Checks the number of inputs and outputs against the allowed ranges.
absl::Status check_arity(const OpInstance& spec, size_t min_inputs, size_t max_inputs,
                         size_t min_outputs, size_t max_outputs);

// Spatial rank (2 or 3) of an NCHW / NCDHW shape with every dimension >= 1.
absl::StatusOr<int> spatial_rank(const OpInstance& spec, const Shape& shape,
                                 const std::string& what);

// An `ints` attribute of length `rank` whose entries are >= min_value. When
// absent, optional_ints gives `default_value` repeated and required_ints fails.
absl::StatusOr<std::vector<int64_t>> optional_ints(const OpInstance& spec, const std::string& key,
                                                   int rank, int64_t default_value,
                                                   int64_t min_value);
absl::StatusOr<std::vector<int64_t>> required_ints(const OpInstance& spec, const std::string& key,
                                                   int rank, int64_t min_value);
// A full-shape `ints` attribute (input_shape, weight_shape).
absl::StatusOr<Shape> required_shape(const OpInstance& spec, const std::string& key);
absl::StatusOr<std::string> required_str(const OpInstance& spec, const std::string& key);
// has_bias: when absent it is inferred from the number of outputs.
absl::StatusOr<bool> has_bias_attr(const OpInstance& spec);

// avg_pool's count_include_pad: when absent 1 (PyTorch's default).
absl::StatusOr<bool> count_include_pad_attr(const OpInstance& spec);
// Checks that `actual` equals `expected`, naming `what` in the error.
absl::Status check_shape(const OpInstance& spec, const std::string& what, const Shape& actual,
                         const Shape& expected);

// Which pass of the convolution family an op is (conv and deconv alike).
enum class ConvPass { kForward, kBackwardData, kBackwardWeights };
ConvPass conv_pass(OpKind op);

// The convolution problem behind conv*/deconv* ops, in forward terms:
// x[N,C,S] -> y[N,K,S']. `w` is the op's weight shape: [K,C,k..] for conv,
// [C,K,k..] for deconv (transposed).
struct ConvProblem {
  bool transposed = false;
  bool bias = false;
  int rank = 2;
  int64_t groups = 1;  // conv's channel groups: w is [K,C/groups,k..]
  Shape x, w, y;
  std::vector<int64_t> stride, pad, dilation;  // dilation as in ops.md (1 = dense)
};

// Derives and validates the problem of conv, conv_bwd_data, conv_bwd_weights,
// deconv, deconv_bwd_data, deconv_bwd_weights.
absl::StatusOr<ConvProblem> conv_problem(const OpInstance& spec);

}  // namespace lms
