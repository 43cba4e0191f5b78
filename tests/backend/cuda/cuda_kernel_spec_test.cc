// Compile-time behaviour of the CUDA kernels that needs no GPU: every op the
// backend covers compiles from a valid spec without touching the device
// (except the cuDNN ones), a spec with a wrong output shape is rejected with
// exactly the CPU device's InvalidArgument, and workspace sizes follow the
// documented layouts. Runs everywhere, with or without a CUDA device.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/cpu_device.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.h"

namespace lms::cuda {
namespace {

using V = std::vector<int64_t>;

KernelSpec make(OpKind op, std::vector<Shape> in, std::vector<Shape> out, Attrs attrs = {}) {
  KernelSpec s;
  s.name = std::string(op_name(op)) + "_node";
  s.op = op;
  s.attrs = std::move(attrs);
  s.input_shapes = std::move(in);
  s.output_shapes = std::move(out);
  return s;
}

// Valid specs of every op whose CUDA kernel needs no library call to compile.
std::vector<KernelSpec> valid_specs() {
  const Shape s = {2, 3, 7, 5};
  const Shape x3 = {2, 3, 4, 5, 6};
  const Shape p = {64, 3, 3, 3};
  Attrs adam = {{"lr", 1e-3},  {"beta1", 0.9},         {"beta2", 0.999},
                {"eps", 1e-8}, {"weight_decay", 1e-4}, {"clip_norm", 1.0}};
  return {
      make(OpKind::kRelu, {s}, {s}),
      make(OpKind::kReluBwd, {s, s}, {s}),
      make(OpKind::kLeakyRelu, {s}, {s}, {{"alpha", 0.01}}),
      make(OpKind::kLeakyReluBwd, {s, s}, {s}, {{"alpha", 0.01}}),
      make(OpKind::kSigmoid, {s}, {s}),
      make(OpKind::kSigmoidBwd, {s, s}, {s}),
      make(OpKind::kGelu, {s}, {s}),
      make(OpKind::kGeluBwd, {s, s}, {s}),
      make(OpKind::kTanh, {s}, {s}),
      make(OpKind::kTanhBwd, {s, s}, {s}),
      make(OpKind::kHardSigmoid, {s}, {s}, {{"alpha", 0.2}, {"beta", 0.5}}),
      make(OpKind::kHardSigmoidBwd, {s, s}, {s}, {{"alpha", 0.2}, {"beta", 0.5}}),
      make(OpKind::kHardSwish, {s}, {s}),
      make(OpKind::kHardSwishBwd, {s, s}, {s}),
      make(OpKind::kAdd, {s, s}, {s}),
      make(OpKind::kMul, {s, s}, {s}),
      make(OpKind::kMul, {{2, 3, 1, 1}, s}, {s}),  // broadcast: a squeeze-excitation gate
      make(OpKind::kAdd, {s, {3, 1, 5}}, {s}),
      make(OpKind::kSumTo, {s}, {{2, 3, 1, 1}}, {{"shape", V{2, 3, 1, 1}}}),
      make(OpKind::kScale, {s}, {s}, {{"factor", 2.0}}),
      make(OpKind::kConcat, {{2, 1, 7, 5}, s}, {{2, 4, 7, 5}}),
      make(OpKind::kSlice, {s}, {{2, 1, 7, 5}}, {{"begin", int64_t{2}}, {"size", int64_t{1}}}),
      make(OpKind::kFill, {}, {s}, {{"shape", V{2, 3, 7, 5}}, {"value", 1.0}}),
      make(OpKind::kMaxPool, {s}, {{2, 3, 3, 2}},
           {{"kernel", V{2, 2}}, {"stride", V{2, 2}}, {"pad", V{0, 0}}}),
      make(OpKind::kMaxPoolBwd, {s, {2, 3, 3, 2}}, {s},
           {{"kernel", V{2, 2}}, {"stride", V{2, 2}}, {"pad", V{0, 0}}}),
      make(OpKind::kUpsample, {s}, {{2, 3, 14, 10}},
           {{"scale", V{2, 2}}, {"mode", std::string("linear")}}),
      make(OpKind::kUpsampleBwd, {{2, 3, 14, 10}}, {s},
           {{"scale", V{2, 2}}, {"mode", std::string("nearest")}, {"input_shape", V{2, 3, 7, 5}}}),
      make(OpKind::kInstanceNorm, {x3, {3}, {3}}, {x3}, {{"eps", 1e-5}}),
      make(OpKind::kInstanceNormBwd, {x3, {3}, x3}, {x3, {3}, {3}}, {{"eps", 1e-5}}),
      make(OpKind::kBatchNorm, {x3, {3}, {3}}, {x3}, {{"eps", 1e-5}}),
      make(OpKind::kBatchNormBwd, {x3, {3}, x3}, {x3, {3}, {3}}, {{"eps", 1e-5}}),
      make(OpKind::kAttention, {{2, 3, 7, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}},
           {{2, 3, 7, 4}, {2, 3, 7}}, {{"softmax_scale", 0.5}, {"causal", int64_t{0}}}),
      make(OpKind::kAttentionBwd,
           {{2, 3, 7, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7}, {2, 3, 7, 4}},
           {{2, 3, 7, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}},
           {{"softmax_scale", 0.5}, {"causal", int64_t{0}}}),
      make(OpKind::kMseLoss, {s, s}, {{}}),
      make(OpKind::kMseLossBwd, {s, s, {}}, {s}),
      make(OpKind::kSoftDiceLoss, {s, s}, {{}}, {{"eps", 1.0}}),
      make(OpKind::kSoftDiceLossBwd, {s, s, {}}, {s}, {{"eps", 1.0}}),
      make(OpKind::kReduceMean, {s}, {{}}),
      make(OpKind::kReduceMeanBwd, {{}}, {s}, {{"input_shape", V{2, 3, 7, 5}}}),
      make(OpKind::kGlobalNorm, {s, p}, {{}}),
      make(OpKind::kIncrement, {{}}, {}),
      make(OpKind::kSgdUpdate, {p, p, p}, {},
           {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.0}, {"clip_norm", 0.0}}),
      make(OpKind::kAdamUpdate, {p, p, p, p, {}, {}}, {}, adam),
      // Along an axis other than 1, and embedding (int64 ids).
      make(OpKind::kConcat, {{2, 3, 7, 1}, s}, {{2, 3, 7, 6}}, {{"axis", int64_t{-1}}}),
      make(OpKind::kSlice, {s}, {{2, 3, 2, 5}},
           {{"begin", int64_t{1}}, {"size", int64_t{2}}, {"axis", int64_t{2}}}),
      make(OpKind::kReduceMean, {s}, {{2, 3, 1, 5}}, {{"axis", int64_t{-2}}}),
      make(OpKind::kReduceMeanBwd, {{2, 3, 1, 5}}, {s},
           {{"input_shape", V{2, 3, 7, 5}}, {"axis", int64_t{-2}}}),
      make(OpKind::kEmbedding, {{2, 3}, {10, 4}}, {{2, 3, 4}}),
      make(OpKind::kEmbeddingBwd, {{2, 3}, {2, 3, 4}}, {{10, 4}}, {{"weight_shape", V{10, 4}}}),
      // softmax cross-entropy (int64 labels), with and without ignore_index.
      make(OpKind::kSoftmaxCrossEntropy, {{6, 10}, {6}}, {{}}),
      make(OpKind::kSoftmaxCrossEntropyBwd, {{6, 10}, {6}, {}}, {{6, 10}},
           {{"ignore_index", int64_t{3}}}),
  };
}

TEST(CudaKernelSpec, EveryNonCudnnOpCompilesWithoutADevice) {
  const CudaKernelContext ctx;  // null stream and handles: compile must not use them
  for (const KernelSpec& spec : valid_specs()) {
    auto k = create_cuda_kernel(spec, ctx);
    EXPECT_TRUE(k.ok()) << op_name(spec.op) << ": " << k.status();
  }
}

TEST(CudaKernelSpec, WrongOutputShapeRejectedExactlyLikeCpu) {
  auto cpu = cpu::CpuDevice::create({.capacity_bytes = 16 << 20, .host_pool_bytes = 1 << 20});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const CudaKernelContext ctx;
  for (KernelSpec spec : valid_specs()) {
    if (spec.output_shapes.empty()) {
      spec.input_shapes[0].push_back(2);  // updates: param no longer matches grad
    } else {
      spec.output_shapes[0].push_back(2);
    }
    auto want = (*cpu)->compile(spec);
    auto got = create_cuda_kernel(spec, ctx);
    ASSERT_FALSE(want.ok()) << op_name(spec.op);
    ASSERT_FALSE(got.ok()) << op_name(spec.op);
    EXPECT_EQ(got.status(), want.status()) << op_name(spec.op);
  }
}

TEST(CudaKernelSpec, BadConvSpecRejectedBeforeCudnn) {
  auto cpu = cpu::CpuDevice::create({.capacity_bytes = 16 << 20, .host_pool_bytes = 1 << 20});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  // Weights expect 5 input channels, x has 3.
  KernelSpec spec = make(OpKind::kConv, {{2, 3, 9, 8}, {4, 5, 3, 3}}, {{2, 4, 9, 8}},
                         {{"stride", V{1, 1}}, {"pad", V{1, 1}}, {"dilation", V{1, 1}}});
  auto got = create_cuda_kernel(spec, CudaKernelContext{});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status(), (*cpu)->compile(spec).status());
}

// swap_out runs on a copy stream: the dispatch table has no kernel for it.
TEST(CudaKernelSpec, OpWithoutKernelIsUnimplementedNamingIt) {
  auto got = create_cuda_kernel(make(OpKind::kSwapOut, {{1}}, {{1}}), CudaKernelContext{});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(got.status().message()).find("swap_out"), std::string::npos);
}

// Workspaces: reductions keep reduce_blocks(n) double partials; global_norm
// one set per input; norms 2 (forward) or 4 (backward) doubles per group,
// then two partials per block of their grouped sums (reduce_plan.h; one
// block per group at these sizes).
// The first of valid_specs() for `op`.
KernelSpec spec_of(OpKind op) {
  for (const KernelSpec& s : valid_specs()) {
    if (s.op == op) return s;
  }
  ADD_FAILURE() << "no valid spec of " << op_name(op);
  return {};
}

TEST(CudaKernelSpec, WorkspaceSizesFollowLayouts) {
  const CudaKernelContext ctx;
  const int64_t n = 2 * 3 * 7 * 5;
  auto mse = create_cuda_kernel(spec_of(OpKind::kMseLoss), ctx);
  ASSERT_TRUE(mse.ok());
  EXPECT_EQ((*mse)->workspace_bytes(), launch::reduce_blocks(n) * sizeof(double));
  auto gn = create_cuda_kernel(spec_of(OpKind::kGlobalNorm), ctx);
  ASSERT_TRUE(gn.ok());
  EXPECT_EQ((*gn)->workspace_bytes(),
            (launch::reduce_blocks(n) + launch::reduce_blocks(64 * 27)) * sizeof(double));
  auto in_bwd = create_cuda_kernel(spec_of(OpKind::kInstanceNormBwd), ctx);  // 6 groups
  ASSERT_TRUE(in_bwd.ok());
  EXPECT_EQ((*in_bwd)->workspace_bytes(), (4 * 6 + 2 * 6) * sizeof(double));
  auto bn = create_cuda_kernel(spec_of(OpKind::kBatchNorm), ctx);  // 3 groups
  ASSERT_TRUE(bn.ok());
  EXPECT_EQ((*bn)->workspace_bytes(), (2 * 3 + 2 * 3) * sizeof(double));
  // attention: one score row of S doubles per (head, query) row (42 rows,
  // fewer than the forward's block cap); the backward P and dS of one head,
  // [T,S] floats each.
  auto attn = create_cuda_kernel(spec_of(OpKind::kAttention), ctx);
  ASSERT_TRUE(attn.ok()) << attn.status();
  EXPECT_EQ((*attn)->workspace_bytes(), 2 * 3 * 7 * 5 * sizeof(double));
  auto attn_bwd = create_cuda_kernel(spec_of(OpKind::kAttentionBwd), ctx);
  ASSERT_TRUE(attn_bwd.ok()) << attn_bwd.status();
  EXPECT_EQ((*attn_bwd)->workspace_bytes(), 2 * 7 * 5 * sizeof(float));
  // softmax cross-entropy: lse[N], row_loss[N], the count and the bad-label
  // flag, 8 bytes each.
  for (size_t i = valid_specs().size() - 2; i < valid_specs().size(); ++i) {
    auto xent = create_cuda_kernel(valid_specs()[i], ctx);
    ASSERT_TRUE(xent.ok()) << xent.status();
    EXPECT_EQ((*xent)->workspace_bytes(), (2 * 6 + 2) * sizeof(double));
  }
  // reduce_blocks depends on n only and grows with it up to its cap.
  EXPECT_EQ(launch::reduce_blocks(1), 1);
  EXPECT_LE(launch::reduce_blocks(int64_t{1} << 40), 1024);
  EXPECT_GE(launch::reduce_blocks(int64_t{1} << 24), launch::reduce_blocks(int64_t{1} << 20));
}

}  // namespace
}  // namespace lms::cuda
