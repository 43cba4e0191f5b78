// Winograd F(4x4, 3x3) convolution for CPUs where oneDNN 2.6 has none
// (AVX2 without AVX-512): Lavin & Gray, "Fast Algorithms for Convolutional
// Neural Networks", CVPR 2016. Each 4x4 output tile is
//
//   Y = A^T [ sum_c (G g_kc G^T) ⊙ (B^T d_c B) ] A
//
// over 6x6 input tiles d_c: the sum over input channels is, for each of the
// 36 tile positions, one matrix product [tiles x C] x [C x K], which runs as
// oneDNN's batched matmul primitive. Only the transforms (B, G, A) are ours;
// they run on 8-channel AVX2 vectors straight from the device's blocked
// activation layout (nChw8c or nChw16c), so no reorder is needed.
//
// It computes 4x fewer multiplications than direct convolution in the
// matmul (36 products per 4x4 output tile and channel pair, against 144)
// and, on VDSR's 64->64 layer with 2 AVX2 threads, each pass takes
// 0.55-0.57x the time of oneDNN's direct kernel (bench/SPEED.md, section 7).
// Rounding differs from direct convolution by up to ~1e-5 relative to the
// sum of absolute terms. Results are deterministic; forward and backward
// data do not depend on the thread count either (every output tile is
// computed by one thread in a fixed order).
//
// The backward-data pass is the same algorithm on dy with the filter rotated
// by 180 degrees and its channel axes swapped; backward weights is its
// adjoint (WinogradConvBackwardWeights).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dnnl.hpp"

namespace lms::cpu {

// One pass in forward terms: x[N, C, H, W] correlated with 3x3 filters into
// y[N, K, Ho, Wo], Ho = H + 2 pad_h - 2, Wo = W + 2 pad_w - 2, stride 1.
// x and y are in the blocked layout with `block` (8 or 16) channels per block.
struct WinogradShape {
  int64_t n = 0, c = 0, k = 0, h = 0, w = 0, ho = 0, wo = 0, pad_h = 0, pad_w = 0;
  int64_t block = 8;
};

// Whether this CPU has the instructions the transforms are compiled for
// (AVX2 and FMA).
bool winograd_cpu_supported();

// What every pass shares: the output's 4x4 tiles, taken in chunks of up to
// 64, and one batched oneDNN matmul that each OpenMP thread runs per chunk.
class WinogradPass {
 public:
  // Scratch bytes run() needs (see each pass).
  uint64_t workspace_bytes() const { return workspace_bytes_; }

 protected:
  // `threads` is the OpenMP team size run() uses; 0 = omp_get_max_threads()
  // of the constructing thread, as oneDNN sizes its primitives.
  WinogradPass(const WinogradShape& shape, const dnnl::engine& engine, int threads);

  // Creates the matmul src x weights -> dst (accumulate: dst += ...), with
  // a scratchpad of each thread's own, and returns its size in floats.
  uint64_t make_matmul(const dnnl::memory::desc& src, const dnnl::memory::desc& weights,
                       const dnnl::memory::desc& dst, bool accumulate);
  // Runs it on the calling thread; a oneDNN error is kept in *failure (no
  // exception may leave a parallel region).
  void matmul(dnnl::stream& stream, const dnnl::memory& src, const dnnl::memory& weights,
              const dnnl::memory& dst, const dnnl::memory& scratch, std::string* failure) const;
  int64_t chunks() const { return (tiles_ + chunk_ - 1) / chunk_; }

  WinogradShape s_;
  int threads_;
  int64_t tiles_h_, tiles_w_, tiles_, chunk_;
  uint64_t workspace_bytes_ = 0;
  dnnl::engine engine_;
  dnnl::matmul matmul_;
  dnnl::memory::desc scratch_md_;
};

class WinogradConv final : public WinogradPass {
 public:
  // backward_data: `w` passed to run() is the forward filter w[C', K', 3, 3]
  // of the conv whose dx this computes (so here K = C', C = K'), used rotated;
  // otherwise w is [K, C, 3, 3] (OIHW). relu applies max-style ReLU after the
  // bias with oneDNN's eltwise rounding (negative v becomes v * 0, i.e. -0).
  // Workspace: the transformed filters and, per thread, one chunk of
  // transformed input and matmul output and the matmul's scratchpad.
  WinogradConv(const WinogradShape& shape, bool backward_data, bool bias, bool relu,
               const dnnl::engine& engine, int threads);

  // x, y blocked as in WinogradShape; bias[K] (read only when constructed
  // with bias). Internal when oneDNN's matmul fails.
  absl::Status run(const float* x, const float* w, const float* bias, float* y,
                   void* workspace) const;

 private:
  bool backward_data_, bias_, relu_;
  uint64_t u_floats_, v_floats_, m_floats_, thread_floats_;
  dnnl::memory::desc v_md_, u_md_, m_md_;
};

// Backward weights of the same algorithm, its adjoint: with Z = A dY A^T
// for each 4x4 tile of dy and V = B^T d B for the matching 6x6 tile of x,
//
//   dw_kc = G^T [ sum_tiles Z_k ⊙ V_c ] G,
//
// the sum over tiles being, per tile position, one matrix product
// [K x tiles] x [tiles x C] on oneDNN's matmul. Each thread accumulates a
// contiguous run of tiles; the runs are added in thread order, so the bits
// depend on the team size (as with oneDNN's own backward weights).
class WinogradConvBackwardWeights final : public WinogradPass {
 public:
  // x, dy in forward terms of `shape`; dw is [K, C, 3, 3] (OIHW), db [K]
  // when constructed with bias. Workspace, per thread: one accumulator of
  // 36 K x C matrices, one chunk of transformed x and dy, the matmul's
  // scratchpad.
  WinogradConvBackwardWeights(const WinogradShape& shape, bool bias, const dnnl::engine& engine,
                              int threads);

  // Internal when oneDNN's matmul fails.
  absl::Status run(const float* x, const float* dy, float* dw, float* db, void* workspace) const;

 private:
  bool bias_;
  uint64_t v_floats_, z_floats_, p_floats_, thread_floats_;
  dnnl::memory::desc z_md_, v_md_, p_md_;
};

}  // namespace lms::cpu
