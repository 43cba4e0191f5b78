// Every CUDA kernel against the CPU device's kernel on the same random
// inputs (fixed, printed seeds), within float tolerance; mutated inputs
// (optimizer state) are compared too. Plus determinism (two runs are bit
// identical) and that both backends reject the same bad spec.
#include "backend/cuda/cuda_kernels.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernel_compare.h"
#include "lms/status.h"

namespace lms::cuda {
namespace {

using testing::Case;
using testing::Floats;
using testing::make_inputs;
using testing::run_on;

class CudaKernels : public testing::CpuReferenceTest {};

using V = std::vector<int64_t>;

Attrs conv_attrs(V stride, V pad, V dil) {
  return {{"stride", stride}, {"pad", pad}, {"dilation", dil}};
}

TEST_F(CudaKernels, Conv2dFamilyMatchesCpu) {
  Attrs a = conv_attrs({1, 1}, {1, 1}, {1, 1});
  compare({"conv", {{2, 3, 9, 8}, {4, 3, 3, 3}, {4}}, {{2, 4, 9, 8}}, a});
  Attrs bd = a;
  bd["input_shape"] = V{2, 3, 9, 8};
  compare({"conv_bwd_data", {{2, 4, 9, 8}, {4, 3, 3, 3}}, {{2, 3, 9, 8}}, bd});
  Attrs bw = a;
  bw["weight_shape"] = V{4, 3, 3, 3};
  bw["has_bias"] = int64_t{1};
  compare({"conv_bwd_weights", {{2, 3, 9, 8}, {2, 4, 9, 8}}, {{4, 3, 3, 3}, {4}}, bw});
  // Strided and dilated: (9 + 2 - 2*2 - 1)/2 + 1 = 4, (8 + 2 - 4 - 1)/2 + 1 = 3.
  compare(
      {"conv", {{1, 2, 9, 8}, {3, 2, 3, 3}}, {{1, 3, 4, 3}}, conv_attrs({2, 2}, {1, 1}, {2, 2})});
}

TEST_F(CudaKernels, Conv3dAndDeconvMatchCpu) {
  compare({"conv",
           {{1, 2, 5, 6, 4}, {3, 2, 3, 3, 3}, {3}},
           {{1, 3, 5, 6, 4}},
           conv_attrs({1, 1, 1}, {1, 1, 1}, {1, 1, 1})});
  // deconv: S' = (S-1)*2 - 0 + 2.
  Attrs d = {{"stride", V{2, 2}}, {"pad", V{0, 0}}};
  compare({"deconv", {{2, 3, 5, 4}, {3, 4, 2, 2}, {4}}, {{2, 4, 10, 8}}, d});
  Attrs dd = d;
  dd["input_shape"] = V{2, 3, 5, 4};
  compare({"deconv_bwd_data", {{2, 4, 10, 8}, {3, 4, 2, 2}}, {{2, 3, 5, 4}}, dd});
  Attrs dw = d;
  dw["weight_shape"] = V{3, 4, 2, 2};
  dw["has_bias"] = int64_t{1};
  compare({"deconv_bwd_weights", {{2, 3, 5, 4}, {2, 4, 10, 8}}, {{3, 4, 2, 2}, {4}}, dw});
}

// Bias gradients large enough that each channel's sum is split over
// several blocks (reduce_plan.h): 3 chunks per channel, float4 loads; then
// an odd spatial size (scalar loads).
TEST_F(CudaKernels, ConvBiasGradientOverSeveralBlocksMatchesCpu) {
  Attrs bw = conv_attrs({1, 1}, {1, 1}, {1, 1});
  bw["weight_shape"] = V{8, 3, 3, 3};
  bw["has_bias"] = int64_t{1};
  compare({"conv_bwd_weights", {{2, 3, 96, 96}, {2, 8, 96, 96}}, {{8, 3, 3, 3}, {8}}, bw});
  compare({"conv_bwd_weights", {{3, 3, 61, 59}, {3, 8, 61, 59}}, {{8, 3, 3, 3}, {8}}, bw});
}

TEST_F(CudaKernels, ElementwiseMatchCpu) {
  const Shape s = {2, 3, 7, 5};
  compare({"relu", {s}, {s}, {}});
  compare({"relu_bwd", {s, s}, {s}, {}});
  compare({"leaky_relu", {s}, {s}, {{"alpha", 0.01}}});
  compare({"leaky_relu_bwd", {s, s}, {s}, {{"alpha", 0.01}}});
  compare({"sigmoid", {s}, {s}, {}});
  compare({"sigmoid_bwd", {s, s}, {s}, {}});
  compare({"softmax", {s}, {s}, {}});
  compare({"softmax_bwd", {s, s}, {s}, {}, {{0.f, 1.f}, {-1.f, 1.f}}});
  compare({"add", {s, s}, {s}, {}});
  compare({"mul", {s, s}, {s}, {}});
  // Broadcast on either side (the squeeze-excitation gate), at lower rank,
  // and the gradient's sum over the broadcast dimensions.
  compare({"mul", {{2, 3, 1, 1}, s}, {s}, {}});
  compare({"add", {s, {3, 1, 5}}, {s}, {}});
  compare({"sum_to", {s}, {{2, 3, 1, 1}}, {{"shape", V{2, 3, 1, 1}}}});
  compare({"sum_to", {s}, {{3, 1, 5}}, {{"shape", V{3, 1, 5}}}});
  compare({"scale", {s}, {s}, {{"factor", -2.5}}});
  // The mask hash is shared with the CPU loop: a differing mask would be an
  // error of order 1, far above the tolerance.
  compare({"dropout", {s}, {s}, {{"ratio", 0.3}, {"seed", int64_t{7}}}});
  compare({"dropout_bwd", {s}, {s}, {{"ratio", 0.5}, {"seed", int64_t{-3}}}});
  compare({"dropout", {{3, 70000}}, {{3, 70000}}, {{"ratio", 0.9}, {"seed", int64_t{1}}}});
  compare({"concat", {{2, 1, 4, 3}, {2, 3, 4, 3}}, {{2, 4, 4, 3}}, {}});
  compare({"slice", {s}, {{2, 2, 7, 5}}, {{"begin", int64_t{1}}, {"size", int64_t{2}}}});
  compare({"fill", {}, {s}, {{"shape", V{2, 3, 7, 5}}, {"value", 0.75}}});
}

// concat, slice, softmax and reduce_mean along axes other than 1 (the
// [outer, axis, inner] view), ranks 1 to 6.
TEST_F(CudaKernels, AlongAnAxisMatchCpu) {
  const Shape s = {2, 3, 7, 5};
  const Shape r6 = {2, 1, 3, 2, 2, 5};
  const Attrs last = {{"axis", int64_t{-1}}};
  compare({"concat", {{2, 3, 7, 1}, s}, {{2, 3, 7, 6}}, last});
  compare({"concat", {{4}, {3}}, {{7}}, {{"axis", int64_t{0}}}});
  compare({"slice",
           {r6},
           {{2, 1, 3, 2, 2, 2}},
           {{"begin", int64_t{3}}, {"size", int64_t{2}}, {"axis", int64_t{5}}}});
  compare({"softmax", {s}, {s}, last});
  compare({"softmax", {r6}, {r6}, {{"axis", int64_t{-4}}}});
  compare({"softmax_bwd", {s, s}, {s}, last, {{0.f, 1.f}, {-1.f, 1.f}}});
  compare({"reduce_mean", {s}, {{2, 3, 1, 5}}, {{"axis", int64_t{2}}}});
  compare({"reduce_mean_bwd",
           {{2, 3, 1, 5}},
           {s},
           {{"input_shape", V{2, 3, 7, 5}}, {"axis", int64_t{-2}}}});
}

TEST_F(CudaKernels, PoolingAndUpsampleMatchCpu) {
  Attrs p = {{"kernel", V{3, 3}}, {"stride", V{2, 2}}, {"pad", V{1, 1}}};
  // (9 + 2 - 3)/2 + 1 = 5, (8 + 2 - 3)/2 + 1 = 4.
  compare({"max_pool", {{2, 3, 9, 8}}, {{2, 3, 5, 4}}, p});
  compare({"max_pool_bwd", {{2, 3, 9, 8}, {2, 3, 5, 4}}, {{2, 3, 9, 8}}, p});
  Attrs p3 = {{"kernel", V{2, 2, 2}}, {"stride", V{2, 2, 2}}, {"pad", V{0, 0, 0}}};
  compare({"max_pool_bwd", {{1, 2, 4, 6, 4}, {1, 2, 2, 3, 2}}, {{1, 2, 4, 6, 4}}, p3});
  for (std::string mode : {"nearest", "linear"}) {
    Attrs u = {{"scale", V{2, 3}}, {"mode", mode}};
    compare({"upsample", {{2, 3, 4, 5}}, {{2, 3, 8, 15}}, u});
    Attrs ub = u;
    ub["input_shape"] = V{2, 3, 4, 5};
    compare({"upsample_bwd", {{2, 3, 8, 15}}, {{2, 3, 4, 5}}, ub});
    Attrs u3 = {{"scale", V{2, 2, 2}}, {"mode", mode}, {"input_shape", V{1, 2, 3, 4, 5}}};
    compare({"upsample_bwd", {{1, 2, 6, 8, 10}}, {{1, 2, 3, 4, 5}}, u3});
  }
}

TEST_F(CudaKernels, NormalisationMatchCpu) {
  const Shape x = {2, 3, 4, 5, 6};
  for (std::string op : {"instance_norm", "batch_norm"}) {
    compare({op, {x, {3}, {3}}, {x}, {{"eps", 1e-5}}});
    compare({op + "_bwd", {x, {3}, x}, {x, {3}, {3}}, {{"eps", 1e-5}}});
  }
}

// layer_norm over the last axis: rows shorter and longer than a block of
// threads, more rows than one chunk of the dgamma / dbeta column sums, and
// ranks 2 to 4; two GPU runs of the backward give the same bits.
TEST_F(CudaKernels, LayerNormMatchesCpuAndIsDeterministic) {
  const Attrs eps = {{"eps", 1e-5}};
  for (const Shape& x :
       {Shape{4, 16}, Shape{3, 700}, Shape{130, 33}, Shape{2, 5, 64}, Shape{2, 3, 4, 300}}) {
    const Shape c = {x.back()};
    compare({"layer_norm", {x, c, c}, {x}, eps});
    compare({"layer_norm_bwd", {x, c, x}, {x, c, c}, eps});
  }
  Case bwd{"layer_norm_bwd", {{1000, 768}, {768}, {1000, 768}}, {{1000, 768}, {768}, {768}}, eps};
  const std::vector<Floats> in = make_inputs(bwd, 11);
  auto first = run_on(*gpu_, bwd, in);
  auto second = run_on(*gpu_, bwd, in);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->outputs, second->outputs);  // bitwise
}

// attention (+ _bwd): causal and not, T != S, rows longer than a block of
// threads and more rows than forward blocks; the backward reads random
// out / lse / dout (the same formula on both devices). Two GPU runs of the
// backward give the same bits.
TEST_F(CudaKernels, AttentionMatchesCpu) {
  struct Dims {
    int64_t n, h, t, s, d;
    bool causal;
  };
  for (const Dims& a : {Dims{2, 3, 7, 7, 4, true}, Dims{2, 3, 7, 5, 4, false},
                        Dims{1, 2, 300, 300, 16, true}, Dims{1, 8, 160, 40, 8, false}}) {
    const Shape q = {a.n, a.h, a.t, a.d}, k = {a.n, a.h, a.s, a.d}, lse = {a.n, a.h, a.t};
    const Attrs attrs = {{"softmax_scale", 0.5}, {"causal", int64_t{a.causal ? 1 : 0}}};
    compare({"attention", {q, k, k}, {q, lse}, attrs});
    compare({"attention_bwd", {q, k, k, q, lse, q}, {q, k, k}, attrs});
  }
  const Shape q = {2, 4, 64, 32}, lse = {2, 4, 64};
  Case bwd{"attention_bwd",
           {q, q, q, q, lse, q},
           {q, q, q},
           {{"softmax_scale", 0.25}, {"causal", int64_t{1}}}};
  const std::vector<Floats> in = make_inputs(bwd, 12);
  auto first = run_on(*gpu_, bwd, in);
  auto second = run_on(*gpu_, bwd, in);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->outputs, second->outputs);  // bitwise
}

// batch_norm with running statistics: training saves the batch mean and
// biased variance, eval normalises with the running statistics (positive
// variances), and bn_stats_update mutates the running statistics.
TEST_F(CudaKernels, BatchNormRunningStatisticsMatchCpu) {
  const std::vector<std::pair<float, float>> ranges = {
      {-1.f, 1.f}, {-1.f, 1.f}, {-1.f, 1.f}, {-1.f, 1.f}, {0.5f, 2.f}};
  for (const Shape& x : {Shape{2, 3, 4, 5, 6}, Shape{2, 16, 24, 24, 24}}) {
    const Shape c = {x[1]};
    compare({"batch_norm", {x, c, c, c, c}, {x, c, c}, {{"eps", 1e-5}, {"momentum", 0.1}}, ranges});
    compare(
        {"batch_norm", {x, c, c, c, c}, {x}, {{"eps", 1e-5}, {"training", int64_t{0}}}, ranges});
  }
  compare({"bn_stats_update",
           {{7}, {7}, {7}, {7}},
           {},
           {{"momentum", 0.1}, {"count", int64_t{120}}},
           {{-1.f, 1.f}, {0.5f, 2.f}, {-1.f, 1.f}, {0.f, 2.f}}});
}

// Groups split over several blocks (reduce_plan.h): [2, 16, 24^3] gives 4
// chunks per channel for batch norm and 2 per instance; [4, 8, 45, 47] has
// an odd spatial size (scalar loads); x offset to [4, 6] checks the shifted
// variance.
TEST_F(CudaKernels, NormalisationOverSeveralBlocksMatchCpu) {
  const Attrs eps = {{"eps", 1e-5}};
  for (std::string op : {"instance_norm", "batch_norm"}) {
    for (const Shape& x : {Shape{2, 16, 24, 24, 24}, Shape{4, 8, 45, 47}}) {
      const Shape c = {x[1]};
      compare({op, {x, c, c}, {x}, eps});
      compare({op + "_bwd", {x, c, x}, {x, c, c}, eps});
    }
  }
  const Shape x = {2, 16, 24, 24, 24}, c = {16};
  compare({"batch_norm", {x, c, c}, {x}, eps, {{4.f, 6.f}, {-1.f, 1.f}, {-1.f, 1.f}}});
}

TEST_F(CudaKernels, LossesAndReductionsMatchCpu) {
  const Shape s = {2, 3, 6, 7};
  compare({"mse_loss", {s, s}, {{}}, {}});
  compare({"mse_loss_bwd", {s, s, {}}, {s}, {}});
  const std::vector<std::pair<float, float>> probs = {{0.f, 1.f}, {0.f, 1.f}, {1.f, 1.f}};
  compare({"soft_dice_loss", {s, s}, {{}}, {{"eps", 1.0}}, probs});
  compare({"soft_dice_loss_bwd", {s, s, {}}, {s}, {{"eps", 1.0}}, probs});
  // Slices of 40^3 = 64000 elements: 8 blocks per slice.
  const Shape big = {2, 3, 40, 40, 40};
  compare({"soft_dice_loss", {big, big}, {{}}, {{"eps", 1.0}}, probs});
  compare({"soft_dice_loss_bwd", {big, big, {}}, {big}, {{"eps", 1.0}}, probs});
  compare({"reduce_mean", {{100000}}, {{}}, {}});
  compare({"reduce_mean_bwd", {{}}, {s}, {{"input_shape", V{2, 3, 6, 7}}}});
  compare({"global_norm", {{300000}, {5}, {3, 4}}, {{}}, {}});
}

TEST_F(CudaKernels, OptimizersMatchCpu) {
  const Shape p = {64, 3, 3, 3};
  Attrs sgd = {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 1e-4}, {"clip_norm", 0.5}};
  compare({"sgd_update", {p, p, p, {}}, {}, sgd, {{-1, 1}, {-1, 1}, {-1, 1}, {2.f, 2.f}}});
  Attrs adam = {{"lr", 1e-3},  {"beta1", 0.9},         {"beta2", 0.999},
                {"eps", 1e-8}, {"weight_decay", 1e-4}, {"clip_norm", 0.0}};
  compare({"adam_update",
           {p, p, p, p, {}},
           {},
           adam,
           {{-1, 1}, {-1, 1}, {-1, 1}, {0.f, 1.f}, {3.f, 3.f}}});
  Attrs poly = adam;  // the poly schedule at step 3 of 5
  poly["decay_steps"] = int64_t{5};
  poly["decay_power"] = 0.9;
  compare({"adam_update",
           {p, p, p, p, {}},
           {},
           poly,
           {{-1, 1}, {-1, 1}, {-1, 1}, {0.f, 1.f}, {3.f, 3.f}}});
  compare({"increment", {{}}, {}, {}, {{4.f, 4.f}}});
}

TEST_F(CudaKernels, ConvBackwardWeightsIsDeterministic) {
  Attrs bw = conv_attrs({1, 1}, {1, 1}, {1, 1});
  bw["weight_shape"] = V{16, 8, 3, 3};
  bw["has_bias"] = int64_t{1};
  Case c{"conv_bwd_weights", {{4, 8, 32, 32}, {4, 16, 32, 32}}, {{16, 8, 3, 3}, {16}}, bw};
  const std::vector<Floats> in = make_inputs(c, 99);
  auto first = run_on(*gpu_, c, in);
  auto second = run_on(*gpu_, c, in);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->outputs, second->outputs);  // bitwise
}

// The grouped sums split over several blocks give the same bits every run.
TEST_F(CudaKernels, GroupedReductionsAreDeterministic) {
  const Shape x = {2, 16, 24, 24, 24}, c = {16}, d = {2, 3, 40, 40, 40};
  const Attrs eps = {{"eps", 1e-5}};
  const std::vector<Case> cases = {
      {"batch_norm", {x, c, c}, {x}, eps},
      {"instance_norm_bwd", {x, c, x}, {x, c, c}, eps},
      {"soft_dice_loss", {d, d}, {{}}, {{"eps", 1.0}}, {{0.f, 1.f}, {0.f, 1.f}}},
  };
  for (const Case& k : cases) {
    const std::vector<Floats> in = make_inputs(k, 7);
    auto first = run_on(*gpu_, k, in);
    auto second = run_on(*gpu_, k, in);
    ASSERT_TRUE(first.ok() && second.ok()) << k.op;
    EXPECT_EQ(first->outputs, second->outputs) << k.op;  // bitwise
  }
}

// Grouped (4 groups) and depthwise convolutions and their two gradients:
// cuDNN's group count against oneDNN's grouped weights.
TEST_F(CudaKernels, GroupedConvMatchesCpu) {
  struct G {
    int64_t c, k, group;
  };
  for (const G& g : {G{12, 8, 4}, G{16, 16, 16}, G{6, 12, 6}}) {
    Attrs a = conv_attrs({1, 1}, {1, 1}, {1, 1});
    a["group"] = g.group;
    const Shape x = {2, g.c, 9, 8}, w = {g.k, g.c / g.group, 3, 3}, y = {2, g.k, 9, 8};
    compare({"conv", {x, w, {g.k}}, {y}, a}, 2401);
    Attrs bd = a;
    bd["input_shape"] = x;
    compare({"conv_bwd_data", {y, w}, {x}, bd}, 2402);
    Attrs bw = a;
    bw["weight_shape"] = w;
    bw["has_bias"] = int64_t{1};
    compare({"conv_bwd_weights", {x, y}, {w, {g.k}}, bw}, 2403);
  }
}

// clip (ReLU6 and other bounds), its gradient and reshape (a copy: bitwise).
TEST_F(CudaKernels, ClipAndReshapeMatchCpu) {
  const Attrs relu6 = {{"min", 0.0}, {"max", 6.0}}, narrow = {{"min", -0.5}, {"max", 0.25}};
  for (const Attrs& a : {relu6, narrow}) {
    compare({"clip", {{2, 3, 9, 8}}, {{2, 3, 9, 8}}, a, {{-8.f, 8.f}}}, 2301);
    compare({"clip_bwd", {{2, 3, 9, 8}, {2, 3, 9, 8}}, {{2, 3, 9, 8}}, a, {{-8.f, 8.f}}}, 2302);
  }
  compare({"reshape", {{2, 3, 4, 5}}, {{6, 20}}, {{"shape", V{6, 20}}}}, 2303, {0.f, 0.f});
}

// transpose (a copy: bitwise) at ranks 2, 4 and 6.
TEST_F(CudaKernels, TransposeMatchesCpu) {
  compare({"transpose", {{7, 5}}, {{5, 7}}, {{"perm", V{1, 0}}}}, 2311, {0.f, 0.f});
  compare({"transpose", {{2, 3, 4, 5}}, {{2, 4, 3, 5}}, {{"perm", V{0, 2, 1, 3}}}}, 2312,
          {0.f, 0.f});
  compare(
      {"transpose", {{2, 3, 2, 4, 3, 2}}, {{2, 3, 4, 2, 2, 3}}, {{"perm", V{5, 4, 3, 0, 2, 1}}}},
      2313, {0.f, 0.f});
}

// gelu and its gradient on x in [-6, 6], past both tails of erf (the CPU
// device runs oneDNN's eltwise_gelu_erf, these own kernels erff / expf).
TEST_F(CudaKernels, GeluMatchesCpu) {
  const Shape s = {2, 3, 9, 8};
  compare({"gelu", {s}, {s}, {}, {{-6.f, 6.f}}}, 2501);
  compare({"gelu_bwd", {s, s}, {s}, {}, {{-6.f, 6.f}, {-1.f, 1.f}}}, 2502);
  compare({"gelu", {{3, 70001}}, {{3, 70001}}, {}, {{-6.f, 6.f}}}, 2503);
}

// tanh, hard_sigmoid and hard_swish with their gradients, on x in [-5, 5]
// across the bends at -3 and 3 (the CPU device runs oneDNN's eltwise_tanh
// and eltwise_hardswish and a loop for hard_sigmoid).
TEST_F(CudaKernels, TanhAndHardActivationsMatchCpu) {
  const Shape s = {2, 3, 9, 8};
  const Attrs hs = {{"alpha", 1.0 / 6}, {"beta", 0.5}};
  compare({"tanh", {s}, {s}, {}, {{-5.f, 5.f}}}, 2511);
  compare({"tanh_bwd", {s, s}, {s}, {}, {{-1.f, 1.f}, {-1.f, 1.f}}}, 2512);
  compare({"hard_sigmoid", {s}, {s}, hs, {{-5.f, 5.f}}}, 2513);
  compare({"hard_sigmoid_bwd", {s, s}, {s}, hs, {{-5.f, 5.f}, {-1.f, 1.f}}}, 2514);
  compare({"hard_swish", {s}, {s}, {}, {{-5.f, 5.f}}}, 2515);
  compare({"hard_swish_bwd", {s, s}, {s}, {}, {{-5.f, 5.f}, {-1.f, 1.f}}}, 2516);
}

// max_pool and avg_pool (count_include_pad 0) with ceil_mode: a last window
// that runs off the input (9 -> 5 where floor mode gives 4).
TEST_F(CudaKernels, CeilModePoolingMatchesCpu) {
  Attrs a = {{"kernel", V{2, 2}}, {"stride", V{2, 2}}, {"pad", V{0, 0}}, {"ceil_mode", int64_t{1}}};
  compare({"max_pool", {{2, 3, 9, 9}}, {{2, 3, 5, 5}}, a}, 2521);
  compare({"max_pool_bwd", {{2, 3, 9, 9}, {2, 3, 5, 5}}, {{2, 3, 9, 9}}, a}, 2522);
  a["count_include_pad"] = int64_t{0};
  compare({"avg_pool", {{2, 3, 9, 9}}, {{2, 3, 5, 5}}, a}, 2523);
  a["input_shape"] = V{2, 3, 9, 9};
  compare({"avg_pool_bwd", {{2, 3, 5, 5}}, {{2, 3, 9, 9}}, a}, 2524);
}

// avg_pool (+ _bwd), padding counted or not, 2-D and 3-D, and the global
// pool (the window is all of S).
TEST_F(CudaKernels, AvgPoolMatchesCpu) {
  const Attrs a = {{"kernel", V{3, 3}}, {"stride", V{2, 2}}, {"pad", V{1, 1}}};
  Attrs ex = a;
  ex["count_include_pad"] = int64_t{0};
  for (const Attrs& p : {a, ex}) {
    compare({"avg_pool", {{2, 3, 9, 8}}, {{2, 3, 5, 4}}, p}, 2201);
    Attrs b = p;
    b["input_shape"] = V{2, 3, 9, 8};
    compare({"avg_pool_bwd", {{2, 3, 5, 4}}, {{2, 3, 9, 8}}, b}, 2202);
  }
  const Attrs a3 = {{"kernel", V{2, 3, 2}}, {"stride", V{1, 2, 2}}, {"pad", V{1, 1, 0}}};
  compare({"avg_pool", {{1, 2, 5, 6, 4}}, {{1, 2, 6, 3, 2}}, a3}, 2203);
  Attrs b3 = a3;
  b3["input_shape"] = V{1, 2, 5, 6, 4};
  compare({"avg_pool_bwd", {{1, 2, 6, 3, 2}}, {{1, 2, 5, 6, 4}}, b3}, 2204);
  const Attrs global = {{"kernel", V{7, 7}}, {"stride", V{7, 7}}, {"pad", V{0, 0}}};
  compare({"avg_pool", {{4, 64, 7, 7}}, {{4, 64, 1, 1}}, global}, 2205);
}

// linear with and without bias, both weight layouts, and its weight
// gradient (cuBLAS against oneDNN matmul; sums of up to 300 products).
TEST_F(CudaKernels, LinearMatchesCpu) {
  const Attrs t1 = {{"trans_b", int64_t{1}}}, t0 = {{"trans_b", int64_t{0}}};
  compare({"linear", {{6, 37}, {11, 37}, {11}}, {{6, 11}}, t1}, 2101);
  compare({"linear", {{5, 300}, {300, 9}}, {{5, 9}}, t0}, 2102);
  Attrs bw1 = t1, bw0 = t0;
  bw1["has_bias"] = int64_t{1};
  bw0["has_bias"] = int64_t{0};
  compare({"linear_bwd_weights", {{70, 13}, {70, 8}}, {{8, 13}, {8}}, bw1}, 2103);
  compare({"linear_bwd_weights", {{70, 13}, {70, 8}}, {{13, 8}}, bw0}, 2104);
}

// Two runs of a linear and its weight gradient give the same bits.
TEST_F(CudaKernels, LinearIsDeterministic) {
  const std::vector<Case> cases = {
      {"linear", {{64, 512}, {1000, 512}, {1000}}, {{64, 1000}}, {{"trans_b", int64_t{1}}}},
      {"linear_bwd_weights",
       {{64, 512}, {64, 1000}},
       {{1000, 512}, {1000}},
       {{"trans_b", int64_t{1}}, {"has_bias", int64_t{1}}}},
  };
  for (const Case& k : cases) {
    const std::vector<Floats> in = make_inputs(k, 2105);
    auto first = run_on(*gpu_, k, in);
    auto second = run_on(*gpu_, k, in);
    ASSERT_TRUE(first.ok() && second.ok()) << k.op;
    EXPECT_EQ(first->outputs, second->outputs) << k.op;  // bitwise
  }
}

// matmul: batched, both transposes, a shared rank-2 operand on either side,
// broadcast over one of two batch dims, and the rank-2 product (cuBLAS
// strided-batched against oneDNN matmul); two GPU runs give the same bits.
TEST_F(CudaKernels, MatMulMatchesCpu) {
  auto mm = [](int64_t ta, int64_t tb) -> Attrs { return {{"trans_a", ta}, {"trans_b", tb}}; };
  compare({"matmul", {{2, 3, 5, 40}, {2, 3, 40, 6}}, {{2, 3, 5, 6}}, mm(0, 0)}, 2111);
  compare({"matmul", {{2, 3, 40, 5}, {2, 3, 6, 40}}, {{2, 3, 5, 6}}, mm(1, 1)}, 2112);
  compare({"matmul", {{4, 17, 33}, {33, 9}}, {{4, 17, 9}}, mm(0, 0)}, 2113);
  compare({"matmul", {{4, 17, 33}, {9, 33}}, {{4, 17, 9}}, mm(0, 1)}, 2114);
  compare({"matmul", {{33, 17}, {2, 3, 33, 9}}, {{2, 3, 17, 9}}, mm(1, 0)}, 2115);
  compare({"matmul", {{2, 1, 5, 12}, {3, 12, 7}}, {{2, 3, 5, 7}}, mm(0, 0)}, 2116);
  compare({"matmul", {{3, 1, 5, 12}, {1, 4, 12, 7}}, {{3, 4, 5, 7}}, mm(0, 0)}, 2117);
  compare({"matmul", {{64, 300}, {300, 50}}, {{64, 50}}, mm(0, 0)}, 2118);
  const Case big{"matmul", {{8, 128, 256}, {8, 256, 128}}, {{8, 128, 128}}, mm(0, 0)};
  const std::vector<Floats> in = make_inputs(big, 2119);
  auto first = run_on(*gpu_, big, in);
  auto second = run_on(*gpu_, big, in);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->outputs, second->outputs);  // bitwise
}

TEST_F(CudaKernels, BadSpecRejectedLikeCpu) {
  Case c{"conv", {{2, 3, 9, 8}, {4, 5, 3, 3}}, {{2, 4, 9, 8}}, conv_attrs({1, 1}, {1, 1}, {1, 1})};
  auto got = run_on(*gpu_, c, make_inputs(c, 1));
  auto want = run_on(*cpu_, c, make_inputs(c, 1));
  ASSERT_FALSE(got.ok());
  ASSERT_FALSE(want.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status(), want.status());
}

}  // namespace
}  // namespace lms::cuda
