// The CUDA kernels on 3-D (NCDHW) problems, where the CPU device is the
// reference and GPU-only failure modes live:
//  - conv, conv_bwd_data, conv_bwd_weights (with the bias gradient), deconv,
//    deconv_bwd_data and deconv_bwd_weights on [2, 4, 9, 10, 11] with a 3x3x3
//    kernel, pad 1, stride 1 and 2; max_pool and upsample (nearest, linear)
//    forward and backward; instance_norm and batch_norm forward and
//    backward; soft_dice_loss and its gradient: each against the CPU device
//    on random inputs from a fixed, printed seed, within a float tolerance
//    scaled to the op's reduction length (reduction_tolerance);
//  - determinism at other addresses: conv_bwd_weights and the norm
//    gradients run twice, the second time with every input, output and the
//    workspace at another offset of the device region, give the same bits;
//  - concat and slice whose per-sample row is 2 GiB or more (one sample, and
//    two samples with an input row over 2 GiB), checked element by element
//    against an index pattern uploaded from the host (too large for a CPU
//    reference). These skip with "out of memory: ..." on a GPU with too
//    little free memory.
// Every test skips with the reason on a machine without a usable CUDA
// device (and fails there under LMS_REQUIRE_CUDA=1): they have not run on a
// GPU here.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernel_compare.h"
#include "lms/status.h"

namespace lms::cuda {
namespace {

using testing::Case;
using testing::Floats;
using testing::Tolerance;
using V = std::vector<int64_t>;

// Tolerance for outputs that are sums of `terms` products of values in
// [-1, 1] (a convolution over C*k^3 taps, a weight, bias or norm-parameter
// gradient over N*S positions). Such a sum has partial sums of
// about sqrt(terms), so summing in another order (cuDNN's tiling against
// oneDNN's) moves the result by about u*sqrt(terms) relative and u*terms
// absolute, u = 2^-24 the float unit roundoff. The factor 64 leaves room for
// the transforms some cuDNN algorithms use (FFT tiling) and for norms
// dividing by a standard deviation below 1.
Tolerance reduction_tolerance(int64_t terms) {
  constexpr double kMargin = 64;
  const double u = std::ldexp(1.0, -24);
  const double t = static_cast<double>(terms);
  return {.abs = static_cast<float>(kMargin * u * t + 1e-6),
          .rel = static_cast<float>(kMargin * u * std::sqrt(t))};
}

// Tolerance for normalised outputs (of order 1) computed from statistics
// over `terms` values, whose relative error is about u*sqrt(terms).
Tolerance statistics_tolerance(int64_t terms) {
  const float x = static_cast<float>(64 * std::ldexp(std::sqrt(static_cast<double>(terms)), -24));
  return {.abs = x, .rel = x};
}

constexpr Tolerance kExact = {.abs = 0, .rel = 0};

class CudaKernels3d : public testing::CpuReferenceTest {
 protected:
  void conv_family(int64_t stride);
  void deconv_family(int64_t stride);
};

Attrs conv_attrs(int64_t stride) {
  return {{"stride", V{stride, stride, stride}}, {"pad", V{1, 1, 1}}, {"dilation", V{1, 1, 1}}};
}

Attrs deconv_attrs(int64_t stride) {
  return {{"stride", V{stride, stride, stride}}, {"pad", V{1, 1, 1}}};
}

// x [2, 4, 9, 10, 11], 6 filters of 3x3x3, pad 1.
constexpr int64_t kN = 2, kC = 4, kK = 6, kTaps = 27;
const Shape kX = {kN, kC, 9, 10, 11};
constexpr uint32_t kSeed = 3301;

// The conv family at one stride: conv y = (S + 2 - 3)/s + 1 per dimension.
void CudaKernels3d::conv_family(int64_t stride) {
  std::printf("conv family, stride %lld\n", static_cast<long long>(stride));
  auto out = [&](int64_t s) { return (s - 1) / stride + 1; };
  const Shape y = {kN, kK, out(9), out(10), out(11)};
  const Shape w = {kK, kC, 3, 3, 3};
  const int64_t y_positions = kN * y[2] * y[3] * y[4];
  const Attrs a = conv_attrs(stride);
  compare({"conv", {kX, w, {kK}}, {y}, a}, kSeed, reduction_tolerance(kC * kTaps));
  Attrs bd = a;
  bd["input_shape"] = V(kX.begin(), kX.end());
  compare({"conv_bwd_data", {y, w}, {kX}, bd}, kSeed + 1, reduction_tolerance(kK * kTaps));
  Attrs bw = a;
  bw["weight_shape"] = V(w.begin(), w.end());
  bw["has_bias"] = int64_t{1};
  compare({"conv_bwd_weights", {kX, y}, {w, {kK}}, bw}, kSeed + 2,
          reduction_tolerance(y_positions));
}

// The deconv family at one stride: y = (S - 1)s - 2 + 3 per dimension.
void CudaKernels3d::deconv_family(int64_t stride) {
  std::printf("deconv family, stride %lld\n", static_cast<long long>(stride));
  auto out = [&](int64_t s) { return (s - 1) * stride + 1; };
  const Shape y = {kN, kK, out(9), out(10), out(11)};
  const Shape w = {kC, kK, 3, 3, 3};  // [C, K, k..]: transposed
  const int64_t x_positions = kN * kX[2] * kX[3] * kX[4];
  const int64_t y_positions = kN * y[2] * y[3] * y[4];
  const Attrs a = deconv_attrs(stride);
  compare({"deconv", {kX, w, {kK}}, {y}, a}, kSeed + 3, reduction_tolerance(kC * kTaps));
  Attrs bd = a;
  bd["input_shape"] = V(kX.begin(), kX.end());
  compare({"deconv_bwd_data", {y, w}, {kX}, bd}, kSeed + 4, reduction_tolerance(kK * kTaps));
  Attrs bw = a;
  bw["weight_shape"] = V(w.begin(), w.end());
  bw["has_bias"] = int64_t{1};
  // dw sums over the x positions, db over the (larger) y positions.
  compare({"deconv_bwd_weights", {kX, y}, {w, {kK}}, bw}, kSeed + 5,
          reduction_tolerance(std::max(x_positions, y_positions)));
}

TEST_F(CudaKernels3d, ConvAndDeconvStride1MatchCpu) {
  conv_family(1);
  deconv_family(1);
}

TEST_F(CudaKernels3d, ConvAndDeconvStride2MatchCpu) {
  conv_family(2);
  deconv_family(2);
}

TEST_F(CudaKernels3d, MaxPoolMatchesCpu) {
  // Overlapping windows with padding: (S + 2 - 3)/2 + 1 = 5, 5, 6; each x
  // gets the gradient of at most 2 windows per dimension.
  const Attrs overlap = {{"kernel", V{3, 3, 3}}, {"stride", V{2, 2, 2}}, {"pad", V{1, 1, 1}}};
  const Shape y = {kN, kC, 5, 5, 6};
  compare({"max_pool", {kX}, {y}, overlap}, kSeed + 10, kExact);
  compare({"max_pool_bwd", {kX, y}, {kX}, overlap}, kSeed + 11, reduction_tolerance(8));
  // Disjoint windows, odd sizes truncated: (S - 2)/2 + 1 = 4, 5, 5.
  const Attrs disjoint = {{"kernel", V{2, 2, 2}}, {"stride", V{2, 2, 2}}, {"pad", V{0, 0, 0}}};
  const Shape y2 = {kN, kC, 4, 5, 5};
  compare({"max_pool", {kX}, {y2}, disjoint}, kSeed + 12, kExact);
  compare({"max_pool_bwd", {kX, y2}, {kX}, disjoint}, kSeed + 13, kExact);
}

TEST_F(CudaKernels3d, UpsampleMatchesCpu) {
  const Shape x = {kN, kC, 5, 6, 7};
  for (std::string mode : {"nearest", "linear"}) {
    for (const V& scale : {V{2, 2, 2}, V{1, 2, 3}}) {
      const Shape y = {kN, kC, 5 * scale[0], 6 * scale[1], 7 * scale[2]};
      std::printf("upsample %s, scale %lld x %lld x %lld\n", mode.c_str(),
                  static_cast<long long>(scale[0]), static_cast<long long>(scale[1]),
                  static_cast<long long>(scale[2]));
      const Attrs u = {{"scale", scale}, {"mode", mode}};
      // Forward: a copy (nearest) or a blend of 8 neighbours (linear).
      compare({"upsample", {x}, {y}, u}, kSeed + 20,
              mode == "nearest" ? kExact : reduction_tolerance(8));
      Attrs ub = u;
      ub["input_shape"] = V(x.begin(), x.end());
      // Backward: each x collects at most 2*scale outputs per dimension.
      compare({"upsample_bwd", {y}, {x}, ub}, kSeed + 21, reduction_tolerance(64));
    }
  }
}

TEST_F(CudaKernels3d, NormalisationMatchesCpu) {
  // Statistics over S (instance) or N*S (batch) positions; the tolerance of
  // the larger serves both. The backward pass sums dgamma and dbeta over
  // those positions.
  const int64_t positions = kN * kX[2] * kX[3] * kX[4];
  for (std::string op : {"instance_norm", "batch_norm"}) {
    compare({op, {kX, {kC}, {kC}}, {kX}, {{"eps", 1e-5}}}, kSeed + 30,
            statistics_tolerance(positions));
    compare({op + "_bwd", {kX, {kC}, kX}, {kX, {kC}, {kC}}, {{"eps", 1e-5}}}, kSeed + 31,
            reduction_tolerance(positions));
  }
}

TEST_F(CudaKernels3d, SoftDiceLossMatchesCpu) {
  const Shape s = {kN, 3, 9, 10, 11};
  const std::vector<std::pair<float, float>> probs = {{0.f, 1.f}, {0.f, 1.f}, {1.f, 1.f}};
  // Sums of S = 990 non-negative terms per (n, c), no cancellation: the
  // relative error of each sum is at most about u*S; 8x that.
  const Tolerance tol = {.abs = 1e-6f, .rel = static_cast<float>(8 * std::ldexp(990.0, -24))};
  compare({"soft_dice_loss", {s, s}, {{}}, {{"eps", 1.0}}, probs}, kSeed + 40, tol);
  compare({"soft_dice_loss_bwd", {s, s, {}}, {s}, {{"eps", 1.0}}, probs}, kSeed + 41, tol);
}

// Two runs of `c` on the same inputs, the second with every buffer moved
// (testing::run_on's padding), give bit-identical outputs.
void expect_same_bits_at_other_addresses(Device& gpu, const Case& c, uint32_t seed) {
  constexpr uint64_t kPadBytes = 3 * 256;  // shifts buffer i by (i + 1) * 768 bytes
  std::printf("op %s, seed %u\n", c.op.c_str(), seed);
  const std::vector<Floats> in = testing::make_inputs(c, seed);
  auto first = testing::run_on(gpu, c, in);
  ASSERT_TRUE(first.ok()) << first.status();
  auto moved = testing::run_on(gpu, c, in, kPadBytes);
  ASSERT_TRUE(moved.ok()) << moved.status();
  ASSERT_EQ(first->addresses.size(), moved->addresses.size());
  for (size_t i = 0; i < first->addresses.size(); ++i) {
    EXPECT_NE(first->addresses[i], moved->addresses[i]) << c.op << ": buffer " << i << " stayed";
  }
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const Floats& a = first->outputs[i];
    const Floats& b = moved->outputs[i];
    ASSERT_EQ(a.size(), b.size());
    size_t differ = 0, first_diff = a.size();
    for (size_t j = 0; j < a.size(); ++j) {
      if (std::memcmp(&a[j], &b[j], sizeof(float)) != 0) {
        if (differ++ == 0) first_diff = j;
      }
    }
    EXPECT_EQ(differ, 0u) << c.op << " output " << i << ": " << differ << " of " << a.size()
                          << " elements differ, first [" << first_diff
                          << "]: " << (differ ? a[first_diff] : 0.f) << " vs "
                          << (differ ? b[first_diff] : 0.f);
  }
}

TEST_F(CudaKernels3d, BackwardPassesAreBitIdenticalAtOtherAddresses) {
  Attrs bw = conv_attrs(1);
  bw["weight_shape"] = V{16, 8, 3, 3, 3};
  bw["has_bias"] = int64_t{1};
  expect_same_bits_at_other_addresses(
      *gpu_,
      {"conv_bwd_weights", {{2, 8, 16, 16, 16}, {2, 16, 16, 16, 16}}, {{16, 8, 3, 3, 3}, {16}}, bw},
      kSeed + 50);
  const Shape x = {4, 16, 12, 12, 12};
  for (std::string op : {"batch_norm_bwd", "instance_norm_bwd"}) {
    expect_same_bits_at_other_addresses(*gpu_, {op, {x, {16}, x}, {x, {16}, {16}}, {{"eps", 1e-5}}},
                                        kSeed + 51);
  }
}

// ---------------------------------------------------------------------------
// Concat and slice with rows of 2 GiB and more.

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kMiB = uint64_t{1} << 20;
// Element i of the tensor tagged `tag` holds (i + tag * kTagShift) mod
// kPeriod: an integer below 2^24, so exact in float; a row read from the
// wrong place, input or offset (short of kPeriod elements) shows.
constexpr uint64_t kPeriod = 16777213;  // prime, below 2^24
constexpr uint64_t kTagShift = 4194301;
constexpr uint64_t kChunkFloats = 16 * kMiB;  // host staging: 64 MiB
// Device memory left to the CUDA context, cuDNN and cuBLAS next to the region.
constexpr uint64_t kContextReserveBytes = kGiB;
// Region bytes beyond the buffers: allocator rounding and a kernel workspace.
constexpr uint64_t kRegionSlackBytes = 256 * kMiB;

uint64_t pattern_start(int tag, uint64_t first_index) {
  return (first_index + static_cast<uint64_t>(tag) * kTagShift) % kPeriod;
}

// Uploads the pattern of `tag` into n floats at dst, 64 MiB at a time.
absl::Status upload_pattern(Device& dev, float* dst, uint64_t n, int tag) {
  std::vector<float> host(std::min(n, kChunkFloats));
  for (uint64_t done = 0; done < n;) {
    const uint64_t m = std::min(kChunkFloats, n - done);
    uint64_t v = pattern_start(tag, done);
    for (uint64_t j = 0; j < m; ++j) {
      host[j] = static_cast<float>(v);
      if (++v == kPeriod) v = 0;
    }
    LMS_RETURN_IF_ERROR(dev.upload(dst + done, host.data(), m * sizeof(float)));
    done += m;
  }
  return absl::OkStatus();
}

// Where one channel row of an output must come from: the pattern of `tag`
// from element `first_index` on.
struct RowSource {
  int tag = 0;
  uint64_t first_index = 0;
};

// Downloads each [n, c] row of y ([rows_n, rows_c, inner]) and compares it
// with the pattern source(n, c) says; reports the first few bad rows.
void expect_rows(Device& dev, const float* y, int64_t rows_n, int64_t rows_c, int64_t inner,
                 const std::function<RowSource(int64_t, int64_t)>& source,
                 const std::string& what) {
  std::vector<float> row(inner);
  int bad_rows = 0;
  for (int64_t n = 0; n < rows_n; ++n) {
    for (int64_t c = 0; c < rows_c; ++c) {
      const float* at = y + (n * rows_c + c) * inner;
      ASSERT_TRUE(dev.download(row.data(), at, inner * sizeof(float)).ok()) << what;
      const RowSource src = source(n, c);
      uint64_t v = pattern_start(src.tag, src.first_index), wrong = 0, first_wrong = 0;
      for (int64_t j = 0; j < inner; ++j) {
        if (row[j] != static_cast<float>(v) && wrong++ == 0) first_wrong = j;
        if (++v == kPeriod) v = 0;
      }
      if (wrong > 0 && bad_rows++ < 4) {
        ADD_FAILURE() << what << " row [" << n << ", " << c << "]: " << wrong << " of " << inner
                      << " elements wrong, first at " << first_wrong << ": got " << row[first_wrong]
                      << ", want " << pattern_start(src.tag, src.first_index + first_wrong);
      }
    }
  }
  EXPECT_EQ(bad_rows, 0) << what;
}

// Free device memory as a skip reason: empty when `need` bytes fit.
std::string memory_shortfall(uint64_t need) {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";  // let CudaDevice::create report it
  }
  if (need <= free_bytes) return "";
  return "out of memory: needs " + std::to_string(need) + " bytes, device has " +
         std::to_string(free_bytes) + " free";
}

// concat of inputs [n, channels[i], side^3] into y, then slice of
// [n, slice_size, side^3] from y at channel slice_begin.
struct LargeCase {
  int64_t n = 1;
  std::vector<int64_t> channels;  // of each concat input
  int64_t slice_begin = 0, slice_size = 1;
  int64_t side = 256;  // D = H = W

  int64_t inner() const { return side * side * side; }
  Shape shape(int64_t c) const { return {n, c, side, side, side}; }
  int64_t total_channels() const {
    int64_t total = 0;
    for (int64_t c : channels) total += c;
    return total;
  }
  // Every buffer: the inputs, y and the slice.
  uint64_t bytes() const { return shape_bytes(shape(2 * total_channels() + slice_size)); }
};

// Runs `spec` once with `args`, and a workspace when the kernel asks for one
// (it comes out of the region's slack).
absl::Status launch_and_wait(Device& dev, const KernelSpec& spec, KernelArgs args) {
  LMS_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, dev.compile(spec));
  if (kernel->workspace_bytes() > 0) {
    LMS_ASSIGN_OR_RETURN(args.workspace, dev.allocate(kernel->workspace_bytes()));
  }
  dev.launch(*kernel, args, spec.name, op_name(spec.op));
  absl::Status st = dev.synchronize();
  if (args.workspace != nullptr) dev.deallocate(args.workspace);
  return st;
}

// Runs the concat of `lc` on inputs filled with their patterns and checks
// y; then fills y with a pattern of its own, runs the slice and checks it.
void run_concat_and_slice(Device& dev, const LargeCase& lc) {
  const int64_t total_c = lc.total_channels();
  std::vector<Shape> in_shapes;
  KernelArgs concat_args;
  for (size_t i = 0; i < lc.channels.size(); ++i) {
    in_shapes.push_back(lc.shape(lc.channels[i]));
    auto p = dev.allocate(shape_bytes(in_shapes[i]));
    ASSERT_TRUE(p.ok()) << p.status();
    concat_args.inputs.push_back(static_cast<float*>(*p));
    ASSERT_TRUE(upload_pattern(dev, concat_args.inputs.back(), num_elements(in_shapes[i]),
                               static_cast<int>(i))
                    .ok());
  }
  const Shape y_shape = lc.shape(total_c), s_shape = lc.shape(lc.slice_size);
  auto y = dev.allocate(shape_bytes(y_shape));
  auto s = dev.allocate(shape_bytes(s_shape));
  ASSERT_TRUE(y.ok() && s.ok()) << y.status() << " " << s.status();
  float* y_data = static_cast<float*>(*y);
  concat_args.outputs = {y_data};
  const KernelSpec concat{{.name = "big_concat",
                           .op = OpKind::kConcat,
                           .input_shapes = in_shapes,
                           .output_shapes = {y_shape}}};
  absl::Status st = launch_and_wait(dev, concat, concat_args);
  ASSERT_TRUE(st.ok()) << st;
  expect_rows(
      dev, y_data, lc.n, total_c, lc.inner(),
      [&](int64_t n, int64_t c) {
        size_t k = 0;
        while (c >= lc.channels[k]) c -= lc.channels[k++];
        return RowSource{static_cast<int>(k),
                         static_cast<uint64_t>((n * lc.channels[k] + c) * lc.inner())};
      },
      "concat");

  const int slice_tag = static_cast<int>(lc.channels.size());
  ASSERT_TRUE(upload_pattern(dev, y_data, num_elements(y_shape), slice_tag).ok());
  const KernelSpec slice{{.name = "big_slice",
                          .op = OpKind::kSlice,
                          .attrs = {{"begin", lc.slice_begin}, {"size", lc.slice_size}},
                          .input_shapes = {y_shape},
                          .output_shapes = {s_shape}}};
  st = launch_and_wait(dev, slice, {.inputs = {y_data}, .outputs = {static_cast<float*>(*s)}});
  ASSERT_TRUE(st.ok()) << st;
  expect_rows(
      dev, static_cast<const float*>(*s), lc.n, lc.slice_size, lc.inner(),
      [&](int64_t n, int64_t c) {
        return RowSource{slice_tag,
                         static_cast<uint64_t>((n * total_c + lc.slice_begin + c) * lc.inner())};
      },
      "slice");
}

// On a CUDA device whose region holds the buffers of `lc` (plus slack); skips when the GPU has too
// little free memory.
void check_large_concat_and_slice(const LargeCase& lc) {
  LMS_SKIP_WITHOUT_CUDA();
  const uint64_t region = lc.bytes() + kRegionSlackBytes;
  std::printf("concat -> [%lld, %lld, %lld^3], per-sample row %llu bytes; region %llu bytes\n",
              static_cast<long long>(lc.n), static_cast<long long>(lc.total_channels()),
              static_cast<long long>(lc.side),
              static_cast<unsigned long long>(shape_bytes(lc.shape(lc.total_channels())) / lc.n),
              static_cast<unsigned long long>(region));
  LMS_SKIP_OR_FAIL(memory_shortfall(region + kContextReserveBytes));
  auto dev = CudaDevice::create({.capacity_bytes = region, .host_pool_bytes = kMiB});
  if (absl::IsResourceExhausted(dev.status())) {
    LMS_SKIP_OR_FAIL("out of memory: needs " + std::to_string(region + kContextReserveBytes) +
                     " bytes (" + dev.status().ToString() + ")");
  }
  ASSERT_TRUE(dev.ok()) << dev.status();
  run_concat_and_slice(**dev, lc);
}

// [1, 16, 256^3] + [1, 16, 256^3] (1 GiB each) -> [1, 32, 256^3]: the output
// row, the copy pitch, is 2^31 bytes; the slice reads 16 channels of it.
TEST(CudaLargeTensors, ConcatAndSliceOfOneSampleWithA2GiBRow) {
  check_large_concat_and_slice({.n = 1, .channels = {16, 16}, .slice_begin = 8, .slice_size = 16});
}

// Two samples, [2, 36, 256^3] + [2, 5, 256^3] -> [2, 41, 256^3]: rows of
// 2.25 GiB (input 0 and the slice) and 2.56 GiB (output); 14.75 GiB in all.
TEST(CudaLargeTensors, ConcatAndSliceOfTwoSamplesWithRowsOver2GiB) {
  check_large_concat_and_slice({.n = 2, .channels = {36, 5}, .slice_begin = 3, .slice_size = 36});
}

}  // namespace
}  // namespace lms::cuda
