// Element-wise ops, activations, softmax, concat / slice / fill of
// docs/ops.md. Activations, scale, add and mul are oneDNN eltwise / binary
// primitives on a flat view of the tensor (a broadcasting add / mul on the
// plain shapes); softmax is oneDNN softmax over
// the node's axis (1 unless set: the same primitive and algorithm on every
// axis, so axis 1 gives the bits it always gave); concat is oneDNN concat
// along the axis. Slice and fill are plain copies.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "backend/cpu/kernels/pointwise_common.h"
#include "backend/dropout_hash.h"
#include "common/broadcast.h"
#include "common/float16.h"
#include "lms/status.h"

namespace lms::cpu::pointwise {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;
using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

// oneDNN's memory descriptors have at most 12 dimensions (DNNL_MAX_NDIMS).
constexpr size_t kMaxDnnlRank = DNNL_MAX_NDIMS;

// y = f(x), f a oneDNN eltwise algorithm with parameters alpha, beta.
KernelOr make_eltwise_fwd(const KernelSpec& spec, const CpuKernelContext& ctx, algorithm alg,
                          float alpha, float beta) {
  const dnnl::memory::desc md = flat_desc(num_elements(spec.input_shapes[0]));
  dnnl::eltwise_forward::desc d(prop_kind::forward_training, alg, md, alpha, beta);
  dnnl::eltwise_forward::primitive_desc pd(d, user_scratchpad_attr(), ctx.engine);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_primitive(pd, dnnl::eltwise_forward(pd),
                   {{DNNL_ARG_SRC, in(0), md}, {DNNL_ARG_DST, out(0), md}});
  return k;
}

// dx = f'(data) * dy with inputs (data, dy); data is the forward output y
// when use_dst (the *_use_dst_for_bwd algorithms), else the forward input x.
KernelOr make_eltwise_bwd(const KernelSpec& spec, const CpuKernelContext& ctx, algorithm alg,
                          float alpha, bool use_dst, float beta = 0.f) {
  const dnnl::memory::desc md = flat_desc(num_elements(spec.input_shapes[0]));
  const dnnl::primitive_attr attr = user_scratchpad_attr();
  dnnl::eltwise_forward::desc fwd_d(prop_kind::forward_training, alg, md, alpha, beta);
  dnnl::eltwise_forward::primitive_desc fwd_pd(fwd_d, attr, ctx.engine);
  dnnl::eltwise_backward::desc d(alg, md, md, alpha, beta);
  dnnl::eltwise_backward::primitive_desc pd(d, attr, ctx.engine, fwd_pd);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_primitive(pd, dnnl::eltwise_backward(pd),
                   {{use_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, in(0), md},
                    {DNNL_ARG_DIFF_DST, in(1), md},
                    {DNNL_ARG_DIFF_SRC, out(0), md}});
  return k;
}

// y = a + b or a * b, a and b broadcast (src/common/broadcast.h) to the
// output's shape, which one of them has: oneDNN binary broadcasts only its
// second source, so the operand with the output's shape goes first. a + b
// and a * b are single rounded operations, commutative bit for bit, so the
// order gives the same result.
KernelOr make_broadcast_binary(const KernelSpec& spec, const CpuKernelContext& ctx, algorithm alg) {
  LMS_ASSIGN_OR_RETURN(const size_t full, check_broadcast_binary(spec));
  // Plain tensors only: check_blocked_layout refuses a blocked broadcast.
  const Shape& y = spec.output_shapes[0];
  const dnnl::memory::desc md = plain_desc(y);
  const dnnl::memory::desc small = plain_desc(with_rank(spec.input_shapes[1 - full], y.size()));
  dnnl::binary::desc d(alg, md, small, md);
  dnnl::binary::primitive_desc pd(d, user_scratchpad_attr(), ctx.engine);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_primitive(pd, dnnl::binary(pd),
                   {{DNNL_ARG_SRC_0, in(full), md},
                    {DNNL_ARG_SRC_1, in(1 - full), small},
                    {DNNL_ARG_DST, out(0), md}});
  return k;
}

KernelOr make_binary(const KernelSpec& spec, const CpuKernelContext& ctx, algorithm alg) {
  if (spec.input_shapes[0] != spec.input_shapes[1]) return make_broadcast_binary(spec, ctx, alg);
  const dnnl::memory::desc md = flat_desc(num_elements(spec.input_shapes[0]));
  dnnl::binary::desc d(alg, md, md, md);
  dnnl::binary::primitive_desc pd(d, user_scratchpad_attr(), ctx.engine);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_primitive(
      pd, dnnl::binary(pd),
      {{DNNL_ARG_SRC_0, in(0), md}, {DNNL_ARG_SRC_1, in(1), md}, {DNNL_ARG_DST, out(0), md}});
  return k;
}

KernelOr make_softmax(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_RETURN_IF_ERROR(check_rank(spec, spec.input_shapes[0], 1, kMaxDnnlRank, "input x"));
  LMS_ASSIGN_OR_RETURN(const size_t axis, axis_attr(spec, spec.input_shapes[0], "input x"));
  const dnnl::memory::desc md = plain_desc(spec.input_shapes[0]);
  dnnl::softmax_forward::desc d(prop_kind::forward_training, md, static_cast<int>(axis));
  dnnl::softmax_forward::primitive_desc pd(d, user_scratchpad_attr(), ctx.engine);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_primitive(pd, dnnl::softmax_forward(pd),
                   {{DNNL_ARG_SRC, in(0), md}, {DNNL_ARG_DST, out(0), md}});
  return k;
}

// dx = y * (dy - sum_axis(dy * y)), from the forward output y.
KernelOr make_softmax_bwd(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_RETURN_IF_ERROR(check_rank(spec, spec.input_shapes[0], 1, kMaxDnnlRank, "input y"));
  LMS_ASSIGN_OR_RETURN(const size_t axis_dim, axis_attr(spec, spec.input_shapes[0], "input y"));
  const int axis = static_cast<int>(axis_dim);
  const dnnl::memory::desc md = plain_desc(spec.input_shapes[0]);
  const dnnl::primitive_attr attr = user_scratchpad_attr();
  dnnl::softmax_forward::desc fwd_d(prop_kind::forward_training, md, axis);
  dnnl::softmax_forward::primitive_desc fwd_pd(fwd_d, attr, ctx.engine);
  dnnl::softmax_backward::desc d(md, md, axis);
  dnnl::softmax_backward::primitive_desc pd(d, attr, ctx.engine, fwd_pd);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_primitive(
      pd, dnnl::softmax_backward(pd),
      {{DNNL_ARG_DST, in(0), md}, {DNNL_ARG_DIFF_DST, in(1), md}, {DNNL_ARG_DIFF_SRC, out(0), md}});
  return k;
}

KernelOr make_concat(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_RETURN_IF_ERROR(check_rank(spec, spec.input_shapes[0], 1, kMaxDnnlRank, "input 0"));
  LMS_ASSIGN_OR_RETURN(const size_t axis, concat_axis(spec));
  std::vector<dnnl::memory::desc> srcs;
  std::vector<Binding> bindings;
  for (size_t i = 0; i < spec.input_shapes.size(); ++i) {
    srcs.push_back(plain_desc(spec.input_shapes[i]));
    bindings.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), in(i), srcs.back()});
  }
  const dnnl::memory::desc dst = plain_desc(spec.output_shapes[0]);
  bindings.push_back({DNNL_ARG_DST, out(0), dst});
  dnnl::concat::primitive_desc pd(dst, static_cast<int>(axis), srcs, ctx.engine,
                                  user_scratchpad_attr());
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_primitive(pd, dnnl::concat(pd), bindings);
  return k;
}

// y = x[..., begin:begin+size, ...] along the axis: with x seen as
// [outer, A, inner], `outer` contiguous runs of size*inner floats.
KernelOr make_slice(const KernelSpec& spec, const CpuKernelContext& ctx) {
  const Shape& x = spec.input_shapes[0];
  LMS_ASSIGN_OR_RETURN(const SliceDims d, slice_dims(spec));
  const int64_t begin = d.begin, size = d.size;
  const AxisView v = axis_view(x, d.axis);
  const int64_t in_stride = v.axis * v.inner;
  const int64_t run = size * v.inner;
  const int64_t inner = v.inner;
  const int64_t n = v.outer;
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(a.outputs[0] + i * run, a.inputs[0] + i * in_stride + begin * inner,
                  static_cast<size_t>(run) * sizeof(float));
    }
    return absl::OkStatus();
  });
  return k;
}

// y = x's bytes under another shape of the same element count: a copy
// (the executor gives every output a buffer of its own).
KernelOr make_reshape(const KernelSpec& spec, const CpuKernelContext& ctx) {
  const int64_t n = num_elements(spec.input_shapes[0]);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    std::memcpy(a.outputs[0], a.inputs[0], static_cast<size_t>(n) * sizeof(float));
    return absl::OkStatus();
  });
  return k;
}

// y = transpose(x, perm): a oneDNN reorder from x seen with y's dimensions
// and x's strides permuted (common/broadcast.h, transpose_index) to y's
// plain layout. A copy of every element, so the result is exact.
KernelOr make_transpose(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const BroadcastIndex t, check_transpose(spec));
  const Shape y(t.dims, t.dims + t.rank);
  const dnnl::memory::desc dst = plain_desc(y);
  const dnnl::memory::desc src(dnnl::memory::dims(y.begin(), y.end()), dnnl::memory::data_type::f32,
                               dnnl::memory::dims(t.strides, t.strides + t.rank));
  dnnl::reorder::primitive_desc pd(ctx.engine, src, ctx.engine, dst, user_scratchpad_attr());
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_primitive(pd, dnnl::reorder(pd),
                   {{DNNL_ARG_FROM, in(0), src}, {DNNL_ARG_TO, out(0), dst}});
  return k;
}

// cast (x) -> y in the dtype `to` names: a plain loop over PyTorch's own
// conversions (common/float16.h), not a oneDNN reorder. The reorder drops
// the sign of -0 and flushes f32 subnormals to zero (Cast.RoundsAsPyTorch-
// BitForBit), and which kernel it picks depends on the CPU (AVX512-BF16's
// vcvtneps2bf16 treats subnormal inputs as zero); this loop gives PyTorch's
// bits on every CPU, and the CUDA kernel's.
KernelOr make_cast(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const std::string to_name, str_attr(spec, "to"));
  const DType from = spec.input_dtypes.empty() ? DType::kFloat32 : spec.input_dtypes[0];
  const DType to = parse_dtype(to_name).value_or(DType::kFloat32);
  const int64_t n = num_elements(spec.input_shapes[0]);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    const void* in = a.inputs[0];
    void* out = a.outputs[0];
    if (from == to) {
      std::memcpy(out, in, static_cast<size_t>(n) * dtype_bytes(from));
    } else if (from == DType::kFloat32) {
      floats_to_half(static_cast<const float*>(in), n, to, static_cast<uint16_t*>(out));
    } else if (to == DType::kFloat32) {
      half_to_floats(static_cast<const uint16_t*>(in), n, from, static_cast<float*>(out));
    } else {  // bf16 <-> f16: through float32, which holds both exactly
      const auto* src = static_cast<const uint16_t*>(in);
      auto* dst = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) {
        float wide;
        half_to_floats(src + i, 1, from, &wide);
        floats_to_half(&wide, 1, to, dst + i);
      }
    }
    return absl::OkStatus();
  });
  return k;
}

// dropout (x) / dropout_bwd (dy): out = in * keep * scale, the mask
// regenerated from (seed, step, index) (backend/dropout_hash.h). A plain
// loop: each element depends only on its index, so the result does not
// depend on threads.
KernelOr make_dropout(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const DropoutDims d, dropout_dims(spec));
  const double ratio = d.ratio;
  const int64_t seed = d.seed;
  const int64_t n = num_elements(spec.input_shapes[0]);
  const uint32_t threshold = dropout_hash::threshold(ratio);
  const float scale = dropout_hash::keep_scale(ratio);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    const float* in = a.inputs[0];
    float* out = a.outputs[0];
    const uint64_t key = dropout_hash::step_key(seed, a.step);
    for (int64_t i = 0; i < n; ++i) {
      out[i] = dropout_hash::bits24(key, i) >= threshold ? in[i] * scale : 0.0f;
    }
    return absl::OkStatus();
  });
  return k;
}

// hard_sigmoid: y = min(max(alpha x + beta, 0), 1); hard_sigmoid_bwd (x,
// dy): dx = alpha dy where 0 < alpha x + beta < 1, else 0 (PyTorch's
// hardsigmoid_backward). oneDNN 2.6 has no hard sigmoid.
KernelOr make_hard_sigmoid(const KernelSpec& spec, const CpuKernelContext& ctx, bool backward) {
  LMS_ASSIGN_OR_RETURN(double alpha_attr, real_attr(spec, "alpha"));
  LMS_ASSIGN_OR_RETURN(double beta_attr, real_attr(spec, "beta"));
  const auto alpha = static_cast<float>(alpha_attr), beta = static_cast<float>(beta_attr);
  const int64_t n = num_elements(spec.input_shapes[0]);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    const float* x = a.inputs[0];
    float* out = a.outputs[0];
    if (!backward) {
      for (int64_t i = 0; i < n; ++i) out[i] = std::min(std::max(alpha * x[i] + beta, 0.f), 1.f);
      return absl::OkStatus();
    }
    const float* dy = a.inputs[1];
    for (int64_t i = 0; i < n; ++i) {
      const float v = alpha * x[i] + beta;
      out[i] = v > 0.f && v < 1.f ? alpha * dy[i] : 0.f;
    }
    return absl::OkStatus();
  });
  return k;
}

KernelOr make_fill(const KernelSpec& spec, const CpuKernelContext& ctx) {
  const Shape& shape = spec.output_shapes[0];
  LMS_ASSIGN_OR_RETURN(double value, real_attr(spec, "value"));
  const int64_t n = num_elements(shape);
  const float v = static_cast<float>(value);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    std::fill(a.outputs[0], a.outputs[0] + n, v);
    return absl::OkStatus();
  });
  return k;
}

}  // namespace

KernelOr create_elementwise_kernel(const KernelSpec& spec, const CpuKernelContext& ctx) {
  const OpKind op = spec.op;
  if (op == OpKind::kRelu) return make_eltwise_fwd(spec, ctx, algorithm::eltwise_relu, 0.f, 0.f);
  if (op == OpKind::kReluBwd) {
    return make_eltwise_bwd(spec, ctx, algorithm::eltwise_relu_use_dst_for_bwd, 0.f, true);
  }
  if (op == OpKind::kLeakyRelu || op == OpKind::kLeakyReluBwd) {
    LMS_ASSIGN_OR_RETURN(double alpha, real_attr(spec, "alpha"));
    if (op == OpKind::kLeakyRelu) {
      return make_eltwise_fwd(spec, ctx, algorithm::eltwise_relu, static_cast<float>(alpha), 0.f);
    }
    return make_eltwise_bwd(spec, ctx, algorithm::eltwise_relu, static_cast<float>(alpha), false);
  }
  if (op == OpKind::kSigmoid)
    return make_eltwise_fwd(spec, ctx, algorithm::eltwise_logistic, 0.f, 0.f);
  if (op == OpKind::kSigmoidBwd) {
    return make_eltwise_bwd(spec, ctx, algorithm::eltwise_logistic_use_dst_for_bwd, 0.f, true);
  }
  if (op == OpKind::kTanh) return make_eltwise_fwd(spec, ctx, algorithm::eltwise_tanh, 0.f, 0.f);
  if (op == OpKind::kTanhBwd) {
    return make_eltwise_bwd(spec, ctx, algorithm::eltwise_tanh_use_dst_for_bwd, 0.f, true);
  }
  if (op == OpKind::kSoftmax) return make_softmax(spec, ctx);
  if (op == OpKind::kSoftmaxBwd) return make_softmax_bwd(spec, ctx);
  if (op == OpKind::kAdd) return make_binary(spec, ctx, algorithm::binary_add);
  if (op == OpKind::kMul) return make_binary(spec, ctx, algorithm::binary_mul);
  if (op == OpKind::kScale) {
    LMS_ASSIGN_OR_RETURN(double factor, real_attr(spec, "factor"));
    return make_eltwise_fwd(spec, ctx, algorithm::eltwise_linear, static_cast<float>(factor), 0.f);
  }
  if (op == OpKind::kConcat) return make_concat(spec, ctx);
  if (op == OpKind::kReshape) return make_reshape(spec, ctx);
  if (op == OpKind::kTranspose) return make_transpose(spec, ctx);
  if (op == OpKind::kClip || op == OpKind::kClipBwd) {
    // clip_v2: the gradient passes where min < x < max (PyTorch's hardtanh).
    LMS_ASSIGN_OR_RETURN(double lo, real_attr(spec, "min"));
    LMS_ASSIGN_OR_RETURN(double hi, real_attr(spec, "max"));
    const auto alpha = static_cast<float>(lo), beta = static_cast<float>(hi);
    if (op == OpKind::kClip)
      return make_eltwise_fwd(spec, ctx, algorithm::eltwise_clip_v2, alpha, beta);
    return make_eltwise_bwd(spec, ctx, algorithm::eltwise_clip_v2, alpha, false, beta);
  }
  if (op == OpKind::kGelu)
    return make_eltwise_fwd(spec, ctx, algorithm::eltwise_gelu_erf, 0.f, 0.f);
  if (op == OpKind::kGeluBwd) {
    return make_eltwise_bwd(spec, ctx, algorithm::eltwise_gelu_erf, 0.f, false);
  }
  if (op == OpKind::kHardSigmoid || op == OpKind::kHardSigmoidBwd) {
    return make_hard_sigmoid(spec, ctx, op == OpKind::kHardSigmoidBwd);
  }
  // hard_swish: x * min(max(x + 3, 0), 6) / 6 (oneDNN 2.6 takes no
  // parameters for it; later versions read alpha = 1/6, beta = 1/2).
  if (op == OpKind::kHardSwish) {
    return make_eltwise_fwd(spec, ctx, algorithm::eltwise_hardswish, 1.f / 6, 0.5f);
  }
  if (op == OpKind::kHardSwishBwd) {
    return make_eltwise_bwd(spec, ctx, algorithm::eltwise_hardswish, 1.f / 6, false, 0.5f);
  }
  if (op == OpKind::kSlice) return make_slice(spec, ctx);
  if (op == OpKind::kFill) return make_fill(spec, ctx);
  if (op == OpKind::kCast) return make_cast(spec, ctx);
  if (op == OpKind::kDropout || op == OpKind::kDropoutBwd) return make_dropout(spec, ctx);
  if (op == OpKind::kEmbedding || op == OpKind::kEmbeddingBwd) {
    return create_embedding_kernel(spec, ctx);
  }
  if (op == OpKind::kLinear || op == OpKind::kLinearBwdWeights || op == OpKind::kMatMul) {
    return create_linear_kernel(spec, ctx);
  }
  if (op == OpKind::kAttention || op == OpKind::kAttentionBwd) {
    return create_attention_kernel(spec, ctx);
  }
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cpu::pointwise
