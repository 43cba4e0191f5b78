// Plans that keep large tensors within the 32-bit limits of the CUDA and
// cuDNN APIs the backend calls. Pure C++ (no CUDA calls), so they are
// unit-tested without a GPU (tests/backend/cuda/large_tensor_plan_test.cc).
//
// Note [Large tensors]: a 3-D U-Net at high resolution has tensors far past
// 2^31 bytes and elements. Two API limits bite:
//   - cudaMemcpy2DAsync rejects a pitch over cudaDevAttrMaxPitch (2^31 - 1
//     bytes on every current GPU). concat / slice move channel blocks whose
//     row pitch is channels x inner x 4 bytes: a [1, 32, 256^3] skip concat
//     has a 2 GiB row. channel_copy_plan copies contiguous blocks with one
//     cudaMemcpyAsync, pitched blocks with cudaMemcpy2DAsync only when both
//     pitches fit, and row by row otherwise.
//   - cuDNN's legacy tensor descriptors hold int dimensions and strides, so
//     a tensor must have at most 2^31 - 1 elements. conv_split_plan splits a
//     convolution along N into pieces within that limit; backward-weights
//     accumulates the pieces with beta = 1 in piece order, so results stay
//     deterministic (Note [CUDA kernel determinism]). One sample over the
//     limit cannot be split this way and is a clear error.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lms::cuda {

// The largest pitch cudaMemcpy2DAsync accepts, bytes.
inline constexpr int64_t kMaxCopyPitchBytes = (int64_t{1} << 31) - 1;
// The most elements a cuDNN legacy tensor descriptor can describe.
inline constexpr int64_t kMaxCudnnTensorElements = (int64_t{1} << 31) - 1;

// One copy of `rows` rows of `row_bytes` bytes; consecutive rows start
// `src_pitch` / `dst_pitch` bytes apart. Offsets are bytes from the source's
// and the destination's base address.
struct CopyStep {
  enum class Kind {
    kContiguous,  // one cudaMemcpyAsync of row_bytes (rows == 1)
    kPitched,     // one cudaMemcpy2DAsync
  };
  Kind kind = Kind::kContiguous;
  int64_t src_offset = 0, dst_offset = 0;
  int64_t row_bytes = 0, rows = 1;
  int64_t src_pitch = 0, dst_pitch = 0;
};

// The copies that move channels [src_c0, src_c0 + c) of a dense
// [n, src_c, inner] tensor into channels [dst_c0, dst_c0 + c) of a dense
// [n, dst_c, inner] tensor, elements of `elem_bytes` bytes:
//   - one contiguous copy when the block is contiguous on both sides (n == 1,
//     or c equals both channel counts);
//   - one pitched copy when both pitches are at most `max_pitch` bytes;
//   - one contiguous copy per sample otherwise.
// Empty for an empty block. Sizes are in range by construction (the caller
// validated the shapes); every product is int64.
std::vector<CopyStep> channel_copy_plan(int64_t n, int64_t src_c, int64_t src_c0, int64_t dst_c,
                                        int64_t dst_c0, int64_t c, int64_t inner,
                                        int64_t elem_bytes, int64_t max_pitch = kMaxCopyPitchBytes);

// A convolution split along N: pieces of `chunk` samples (the last may have
// fewer), in order, covering [0, n) exactly once.
struct ConvSplit {
  int64_t chunk = 0;
  std::vector<std::pair<int64_t, int64_t>> pieces;  // (first sample, samples)
};

// Splits n samples so that every piece's largest tensor, samples x
// `max_sample_elements`, stays within `limit` elements. One piece when the
// whole batch fits. InvalidArgument naming `node`, the sample's elements and
// the limit when one sample alone exceeds it (nothing along N can help), or
// for n < 1 or max_sample_elements < 1.
absl::StatusOr<ConvSplit> conv_split_plan(const std::string& node, int64_t n,
                                          int64_t max_sample_elements,
                                          int64_t limit = kMaxCudnnTensorElements);

// `v` as an int for a CUDA or cuDNN argument, or InvalidArgument naming
// `what`, the value and the int range: no size is ever truncated silently.
absl::StatusOr<int> checked_int(int64_t v, const std::string& what);

}  // namespace lms::cuda
