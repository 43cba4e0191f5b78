// How the CUDA backend's grouped reductions (cuda_reduce.cu: norm
// statistics, norm backward sums, channel sums, soft Dice sums) split their
// work across blocks. Plain C++, no CUDA includes, so the partition is unit
// tested without a GPU; chunk_range, UnitCursor and shifted_moments are
// compiled for the device too, so the kernels use these very functions.
//
//   const GroupReducePlan p = plan_group_reduce(/*nv=*/N, /*cv=*/C, /*s=*/D*H*W);
//   // block b = g*p.chunks + j sums units chunk_range(p, j) of group g and
//   // writes kValues partials; then one warp per group joins them.
//   uint64_t scratch = partial_bytes(p, kValues);  // part of the workspace
//
// Note [Grouped reduction plan]: the tensor is viewed as [Nv, Cv, S]; group g
// (< Cv) holds the Nv contiguous runs of S floats at element offsets
// (n*Cv + g)*S. Its M = Nv*S elements are numbered e = n*S + s and read in
// units of `width` floats (4 when S % 4 == 0, so a unit never straddles two
// runs and float4 loads line up, else 1). Each group is cut into `chunks`
// consecutive ranges of `chunk_units` units (the last may be shorter, none
// is empty unless the group is):
//
//   chunks = max(1, min(ceil(M / kMinChunkElements), ceil(kTargetBlocks / Cv)))
//
// then lowered to ceil(units / chunk_units) so that no chunk is empty. Thread
// t of a chunk's block sums the chunk's units t, t + kReduceThreads, ... in
// order (each unit's floats in order) in double, and the block joins its
// threads with the fixed tree of detail::block_sum. The second pass gives
// group g to one warp: lane l sums partials l, l + 32, ... in index order and
// a fixed shuffle tree joins the lanes. Everything depends on the shape
// alone, never on the device, the pointers or timing, and there are no
// atomics (Note [CUDA kernel determinism]).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define LMS_HOST_DEVICE __host__ __device__
#else
#define LMS_HOST_DEVICE
#endif

namespace lms::cuda {

// Threads per block of the first pass (equals detail::kThreads; the .cu file
// checks) and lanes per group of the second.
inline constexpr int kReduceThreads = 256;
inline constexpr int kFinishLanes = 32;
// Elements a chunk is aimed to hold at least (32 per thread), so a block's
// fixed cost (start, tree, partial store) stays small against its loads; a
// split group's chunks hold more than half of it.
inline constexpr int64_t kMinChunkElements = 8192;
// Blocks aimed for over all groups: about 15 per SM of a 132-SM H100, enough
// waves for a short tail. A constant, not the device's SM count, so the
// summation tree is the same on every GPU.
inline constexpr int64_t kTargetBlocks = 2048;

struct GroupReducePlan {
  int64_t groups = 0;        // Cv
  int64_t runs = 0;          // Nv
  int64_t run_elements = 0;  // S
  int64_t width = 1;         // floats per unit: 4 when S % 4 == 0, else 1
  int64_t run_units = 0;     // S / width
  int64_t chunks = 1;        // chunks per group, >= 1
  int64_t chunk_units = 0;   // units per chunk (the last may be shorter)

  LMS_HOST_DEVICE int64_t group_units() const { return runs * run_units; }
  int64_t blocks() const { return groups * chunks; }  // first-pass blocks
};

// The plan of Note [Grouped reduction plan] for a [nv, cv, s] view; all
// arguments >= 0 (a zero gives empty groups, or no groups for cv = 0).
inline GroupReducePlan plan_group_reduce(int64_t nv, int64_t cv, int64_t s) {
  GroupReducePlan p;
  p.groups = cv;
  p.runs = nv;
  p.run_elements = s;
  p.width = s % 4 == 0 ? 4 : 1;
  p.run_units = s / p.width;
  const int64_t elements = nv * s;
  const int64_t units = p.group_units();
  const int64_t by_size = (elements + kMinChunkElements - 1) / kMinChunkElements;
  const int64_t by_blocks = cv > 0 ? (kTargetBlocks + cv - 1) / cv : 1;
  const int64_t wanted = by_size < by_blocks ? by_size : by_blocks;
  p.chunks = wanted > 1 ? wanted : 1;
  p.chunk_units = (units + p.chunks - 1) / p.chunks;
  if (p.chunk_units > 0) p.chunks = (units + p.chunk_units - 1) / p.chunk_units;
  return p;
}

// Units [begin, end) of a group that chunk j (< p.chunks) covers; unit u is
// group elements u*width .. u*width + width - 1.
struct UnitRange {
  int64_t begin = 0, end = 0;
};
LMS_HOST_DEVICE inline UnitRange chunk_range(const GroupReducePlan& p, int64_t j) {
  const int64_t units = p.group_units();
  const int64_t begin = j * p.chunk_units;
  const int64_t end = begin + p.chunk_units;
  return {begin < units ? begin : units, end < units ? end : units};
}

// A thread's walk through a group: unit u, then u + step, ..., following the
// group's runs and dividing only when a step crosses into another run.
class UnitCursor {
 public:
  // At unit u of group g; u < p.group_units() (the caller checks).
  LMS_HOST_DEVICE UnitCursor(const GroupReducePlan& p, int64_t g, int64_t u)
      : run_units_(p.run_units), run_stride_(p.groups * p.run_units), width_(p.width) {
    const int64_t n = u / run_units_;
    s_ = u - n * run_units_;
    row_ = (n * p.groups + g) * run_units_;
  }
  // Offset in the tensor of the unit's first float.
  LMS_HOST_DEVICE int64_t element() const { return (row_ + s_) * width_; }
  LMS_HOST_DEVICE void advance(int64_t step) {
    s_ += step;
    if (s_ >= run_units_) {
      const int64_t runs = s_ / run_units_;
      s_ -= runs * run_units_;
      row_ += runs * run_stride_;
    }
  }

 private:
  int64_t run_units_, run_stride_, width_;
  int64_t row_ = 0;  // units before run n of group g
  int64_t s_ = 0;    // unit within the run
};

// mean = c + s1/m and biased variance s2/m - (s1/m)^2 (floored at 0) from
// s1 = sum (x - c) and s2 = sum (x - c)^2 over m elements: the shifted-data
// algorithm; with c one of the elements the subtraction does not cancel
// catastrophically as sum x^2/m - mean^2 does when |mean| >> stddev.
struct Moments {
  double mean, var;
};
LMS_HOST_DEVICE inline Moments shifted_moments(double c, double s1, double s2, double m) {
  const double d = s1 / m;
  const double var = s2 / m - d * d;
  return {c + d, var > 0.0 ? var : 0.0};
}

// Doubles of scratch the first pass writes: `values` partials per block,
// block b = g*chunks + j at [b*values, (b + 1)*values).
inline int64_t partial_count(const GroupReducePlan& p, int values) { return p.blocks() * values; }
inline uint64_t partial_bytes(const GroupReducePlan& p, int values) {
  return static_cast<uint64_t>(partial_count(p, values)) * sizeof(double);
}

}  // namespace lms::cuda
