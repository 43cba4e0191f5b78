// Element-wise ops, activations, softmax (cuDNN, channel mode, over any
// axis), concat / slice along any axis (channel_copy_plan on the
// [outer, axis, inner] view), embedding and fill for the CUDA device. Validation is
// op_schema/spec_checks.h, shared with the CPU device, so both backends accept
// and reject the same specs with the same messages.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_fn_kernel.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/cuda_status.h"
#include "backend/cuda/large_tensor_plan.h"
#include "backend/dropout_hash.h"
#include "lms/status.h"
#include "op_schema/op_dims.h"
#include "op_schema/spec_checks.h"

namespace lms::cuda {
namespace {

using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

KernelOr make_unary(const KernelSpec& spec, const CudaKernelContext& ctx, launch::Unary op,
                    float alpha) {
  const int64_t n = num_elements(spec.input_shapes[0]);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    return cuda_status(launch::unary(s, op, a.inputs[0], a.outputs[0], n, alpha), what);
  });
}

// add / mul with one operand broadcast to the other's shape (the output's);
// the same numbers as the CPU device's oneDNN binary: each element is one
// rounded add or multiply, commutative bit for bit.
KernelOr make_broadcast_binary(const KernelSpec& spec, const CudaKernelContext& ctx,
                               launch::Binary op) {
  LMS_ASSIGN_OR_RETURN(const size_t full, check_broadcast_binary(spec));
  const Shape& y = spec.output_shapes[0];
  const std::optional<BroadcastIndex> index = broadcast_index(y, spec.input_shapes[1 - full]);
  if (!index) {  // not reached: check_broadcast_binary checked the shapes and the rank
    return invalid(spec, "the operands do not broadcast to the output");
  }
  const int64_t n = num_elements(y);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  const BroadcastIndex bi = *index;
  return make_fn_kernel([=](const KernelArgs& k) {
    return cuda_status(
        launch::broadcast_binary(s, op, k.inputs[full], k.inputs[1 - full], k.outputs[0], n, bi),
        what);
  });
}

// Two inputs of one shape (check_spec: add and mul broadcast when they differ).
KernelOr make_binary(const KernelSpec& spec, const CudaKernelContext& ctx, launch::Binary op,
                     float alpha) {
  if (spec.input_shapes[0] != spec.input_shapes[1]) return make_broadcast_binary(spec, ctx, op);
  const int64_t n = num_elements(spec.input_shapes[0]);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    return cuda_status(launch::binary(s, op, a.inputs[0], a.inputs[1], a.outputs[0], n, alpha),
                       what);
  });
}

// dropout (x) / dropout_bwd (dy): the mask of backend/dropout_hash.h, the
// same bits as the CPU loop.
KernelOr make_dropout(const KernelSpec& spec, const CudaKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const DropoutDims d, dropout_dims(spec));
  const double ratio = d.ratio;
  const int64_t seed = d.seed;
  const int64_t n = num_elements(spec.input_shapes[0]);
  const uint32_t threshold = lms::dropout_hash::threshold(ratio);
  const float scale = lms::dropout_hash::keep_scale(ratio);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    const uint64_t key = lms::dropout_hash::step_key(seed, a.step);
    return cuda_status(launch::dropout(s, a.inputs[0], a.outputs[0], n, key, threshold, scale),
                       what);
  });
}

// clip (x) or clip_bwd (x, dy) with attributes min <= max.
KernelOr make_clip(const KernelSpec& spec, const CudaKernelContext& ctx, bool backward) {
  LMS_ASSIGN_OR_RETURN(double lo, real_attr(spec, "min"));
  LMS_ASSIGN_OR_RETURN(double hi, real_attr(spec, "max"));
  const int64_t n = num_elements(spec.input_shapes[0]);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  const auto l = static_cast<float>(lo), h = static_cast<float>(hi);
  return make_fn_kernel([=](const KernelArgs& a) {
    return cuda_status(backward
                           ? launch::clip_bwd(s, a.inputs[0], a.inputs[1], a.outputs[0], n, l, h)
                           : launch::clip(s, a.inputs[0], a.outputs[0], n, l, h),
                       what);
  });
}

// hard_sigmoid (alpha, beta) and hard_swish, with their backward ops
// (cuda_elementwise.cu; the formulas of the CPU device's kernels).
KernelOr make_hard_activation(const KernelSpec& spec, const CudaKernelContext& ctx) {
  const bool sigmoid = spec.op == OpKind::kHardSigmoid || spec.op == OpKind::kHardSigmoidBwd;
  const bool backward = spec.op == OpKind::kHardSigmoidBwd || spec.op == OpKind::kHardSwishBwd;
  float alpha = 1.f / 6, beta = 0.5f;
  if (sigmoid) {
    LMS_ASSIGN_OR_RETURN(double a, real_attr(spec, "alpha"));
    LMS_ASSIGN_OR_RETURN(double b, real_attr(spec, "beta"));
    alpha = static_cast<float>(a);
    beta = static_cast<float>(b);
  }
  const int64_t n = num_elements(spec.input_shapes[0]);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    const float* dy = backward ? a.inputs[1] : nullptr;
    return cuda_status(sigmoid
                           ? launch::hard_sigmoid(s, a.inputs[0], dy, a.outputs[0], n, alpha, beta)
                           : launch::hard_swish(s, a.inputs[0], dy, a.outputs[0], n),
                       what);
  });
}

// y = transpose(x, perm): one gather (cuda_axis.cu), the CPU device's copy.
KernelOr make_transpose(const KernelSpec& spec, const CudaKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const BroadcastIndex t, check_transpose(spec));
  const int64_t n = num_elements(spec.input_shapes[0]);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    return cuda_status(launch::gather_strided(s, a.inputs[0], a.outputs[0], n, t), what);
  });
}

// gelu (x) or gelu_bwd (x, dy).
KernelOr make_gelu(const KernelSpec& spec, const CudaKernelContext& ctx, bool backward) {
  const int64_t n = num_elements(spec.input_shapes[0]);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    return cuda_status(backward ? launch::gelu_bwd(s, a.inputs[0], a.inputs[1], a.outputs[0], n)
                                : launch::gelu(s, a.inputs[0], a.outputs[0], n),
                       what);
  });
}

// y = x's bytes under another shape: a device-to-device copy.
KernelOr make_reshape(const KernelSpec& spec, const CudaKernelContext& ctx) {
  const int64_t n = num_elements(spec.input_shapes[0]);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    return cuda_status(
        cudaMemcpyAsync(a.outputs[0], a.inputs[0], static_cast<size_t>(n) * sizeof(float),
                        cudaMemcpyDeviceToDevice, s),
        what);
  });
}

// cuDNN tensor descriptors [n, A, inner, 1] of a dense tensor seen as
// [outer, A, inner] around the softmax axis (for axis 1 of [N, C, S..]:
// [N, C, S]), split along outer within the descriptor limit (Note [Large
// tensors]): one for the full pieces and one for a shorter last piece.
// cuDNN's channel mode then normalises over A, whatever the axis was.
class SoftmaxDescs {
 public:
  ~SoftmaxDescs() {
    for (cudnnTensorDescriptor_t d : {full_, last_})
      if (d != nullptr) (void)cudnnDestroyTensorDescriptor(d);
  }
  absl::Status init(const KernelSpec& spec, const AxisView& x) {
    inner_ = x.inner;
    sample_ = x.axis * inner_;
    LMS_ASSIGN_OR_RETURN(split_, conv_split_plan(spec.name, x.outer, sample_));
    LMS_RETURN_IF_ERROR(make(spec, x.axis, split_.chunk, &full_));
    const int64_t last = split_.pieces.back().second;
    if (last != split_.chunk) LMS_RETURN_IF_ERROR(make(spec, x.axis, last, &last_));
    return absl::OkStatus();
  }
  const ConvSplit& split() const { return split_; }
  int64_t sample_elements() const { return sample_; }
  cudnnTensorDescriptor_t get(int64_t samples) const {
    return samples == split_.chunk ? full_ : last_;
  }

 private:
  absl::Status make(const KernelSpec& spec, int64_t c, int64_t n, cudnnTensorDescriptor_t* d) {
    LMS_ASSIGN_OR_RETURN(int n32, checked_int(n, node_label(spec) + ": softmax samples"));
    LMS_ASSIGN_OR_RETURN(int c32, checked_int(c, node_label(spec) + ": softmax channels"));
    LMS_ASSIGN_OR_RETURN(int s32, checked_int(inner_, node_label(spec) + ": softmax spatial size"));
    LMS_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(d), "cudnnCreateTensorDescriptor");
    return cudnn_status(
        cudnnSetTensor4dDescriptor(*d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n32, c32, s32, 1),
        "cudnnSetTensor4dDescriptor");
  }

  int64_t inner_ = 0, sample_ = 0;
  ConvSplit split_;
  cudnnTensorDescriptor_t full_ = nullptr, last_ = nullptr;
};

KernelOr make_softmax(const KernelSpec& spec, const CudaKernelContext& ctx, bool backward) {
  LMS_ASSIGN_OR_RETURN(const size_t axis, axis_attr(spec, spec.input_shapes[0], "x"));
  auto descs = std::make_shared<SoftmaxDescs>();
  LMS_RETURN_IF_ERROR(descs->init(spec, axis_view(spec.input_shapes[0], axis)));
  const std::string what = node_label(spec);
  cudnnHandle_t h = ctx.cudnn;
  return make_fn_kernel([=](const KernelArgs& a) -> absl::Status {
    const float one = 1.0f, zero = 0.0f;
    for (const auto& [first, samples] : descs->split().pieces) {
      const int64_t at = first * descs->sample_elements();
      cudnnTensorDescriptor_t d = descs->get(samples);
      if (!backward) {
        LMS_CUDNN_RETURN_IF_ERROR(
            cudnnSoftmaxForward(h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, d,
                                a.inputs[0] + at, &zero, d, a.outputs[0] + at),
            what + ": cudnnSoftmaxForward");
      } else {
        LMS_CUDNN_RETURN_IF_ERROR(
            cudnnSoftmaxBackward(h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, d,
                                 a.inputs[0] + at, d, a.inputs[1] + at, &zero, d,
                                 a.outputs[0] + at),
            what + ": cudnnSoftmaxBackward");
      }
    }
    return absl::OkStatus();
  });
}

// Copies a [N, c, inner] block between tensors of `src_c` and `dst_c`
// channels, starting at channels src_c0 / dst_c0, by channel_copy_plan
// (Note [Large tensors]): no pitch over cudaMemcpy2DAsync's limit.
absl::Status copy_channels(cudaStream_t s, const float* src, int64_t src_c, int64_t src_c0,
                           float* dst, int64_t dst_c, int64_t dst_c0, int64_t n, int64_t c,
                           int64_t inner, const std::string& what) {
  const auto* from = reinterpret_cast<const char*>(src);
  auto* to = reinterpret_cast<char*>(dst);
  for (const CopyStep& step :
       channel_copy_plan(n, src_c, src_c0, dst_c, dst_c0, c, inner, sizeof(float))) {
    if (step.kind == CopyStep::Kind::kContiguous) {
      LMS_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(to + step.dst_offset, from + step.src_offset,
                          static_cast<size_t>(step.row_bytes), cudaMemcpyDeviceToDevice, s),
          what + ": cudaMemcpyAsync");
      continue;
    }
    LMS_CUDA_RETURN_IF_ERROR(
        cudaMemcpy2DAsync(to + step.dst_offset, static_cast<size_t>(step.dst_pitch),
                          from + step.src_offset, static_cast<size_t>(step.src_pitch),
                          static_cast<size_t>(step.row_bytes), static_cast<size_t>(step.rows),
                          cudaMemcpyDeviceToDevice, s),
        what + ": cudaMemcpy2DAsync");
  }
  return absl::OkStatus();
}

// y seen as [outer, ΣA_i, inner] around the axis; each input is a block of
// A_i "channels" of copy_channels.
KernelOr make_concat(const KernelSpec& spec, const CudaKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const size_t axis, concat_axis(spec));
  const AxisView y = axis_view(spec.output_shapes[0], axis);
  const int64_t n = y.outer, total_c = y.axis, inner = y.inner;
  std::vector<int64_t> channels;
  for (const Shape& s : spec.input_shapes) channels.push_back(s[axis]);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    int64_t c0 = 0;
    for (size_t i = 0; i < channels.size(); ++i) {
      LMS_RETURN_IF_ERROR(copy_channels(s, a.inputs[i], channels[i], 0, a.outputs[0], total_c, c0,
                                        n, channels[i], inner, what));
      c0 += channels[i];
    }
    return absl::OkStatus();
  });
}

KernelOr make_slice(const KernelSpec& spec, const CudaKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const SliceDims d, slice_dims(spec));
  const int64_t begin = d.begin, size = d.size;
  const AxisView v = axis_view(spec.input_shapes[0], d.axis);
  const int64_t n = v.outer, c = v.axis, inner = v.inner;
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    return copy_channels(s, a.inputs[0], c, begin, a.outputs[0], size, 0, n, size, inner, what);
  });
}

// embedding (ids, table[V,D]) and embedding_bwd (ids, dy) with weight_shape
// [V,D]. The ids are int64 in a buffer passed as float*. An id outside
// [0, V) is reported as the CPU device does, at run time (bad_embedding_id);
// finding it needs the flag the launcher writes in the workspace, so the
// kernel waits for the compute stream after each launch (a synchronisation
// per embedding node), and copies the bad id back when there is one.
KernelOr make_embedding(const KernelSpec& spec, const CudaKernelContext& ctx, bool backward) {
  // The table [V,D]: input 1, or dtable = weight_shape (check_spec).
  const Shape& table = backward ? spec.output_shapes[0] : spec.input_shapes[1];
  const int64_t n = num_elements(spec.input_shapes[0]), rows = table[0], dim = table[1];
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel(
      [=](const KernelArgs& a) -> absl::Status {
        const auto* ids = reinterpret_cast<const int64_t*>(a.inputs[0]);
        auto* bad = static_cast<unsigned long long*>(a.workspace);
        LMS_RETURN_IF_ERROR(cuda_status(
            backward ? launch::embedding_bwd(s, ids, a.inputs[1], n, rows, dim, a.outputs[0], bad)
                     : launch::embedding(s, ids, a.inputs[1], n, rows, dim, a.outputs[0], bad),
            what));
        LMS_ASSIGN_OR_RETURN(const unsigned long long first_bad, read_back(s, bad, what));
        if (first_bad >= static_cast<unsigned long long>(n)) return absl::OkStatus();
        const auto position = static_cast<int64_t>(first_bad);
        LMS_ASSIGN_OR_RETURN(const int64_t id,
                             read_back(s, ids + position, what + " (the bad id)"));
        return bad_embedding_id(spec, position, id, rows);
      },
      sizeof(unsigned long long));
}

KernelOr make_fill(const KernelSpec& spec, const CudaKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(double value, real_attr(spec, "value"));
  const int64_t n = num_elements(spec.output_shapes[0]);
  const float v = static_cast<float>(value);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel(
      [=](const KernelArgs& a) { return cuda_status(launch::fill(s, a.outputs[0], n, v), what); });
}

// cast (x) -> y in the dtype `to` names, rounding to nearest even.
KernelOr make_cast(const KernelSpec& spec, const CudaKernelContext& ctx) {
  auto type_of = [](DType d) {
    switch (d) {
      case DType::kBFloat16:
        return launch::FloatType::kBF16;
      case DType::kFloat16:
        return launch::FloatType::kF16;
      case DType::kFloat32:
      case DType::kInt64:
        break;
    }
    return launch::FloatType::kF32;
  };
  LMS_ASSIGN_OR_RETURN(const std::string to, str_attr(spec, "to"));
  const launch::FloatType from =
      type_of(spec.input_dtypes.empty() ? DType::kFloat32 : spec.input_dtypes[0]);
  const launch::FloatType into = type_of(parse_dtype(to).value_or(DType::kFloat32));
  const int64_t n = num_elements(spec.input_shapes[0]);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    return cuda_status(launch::cast(s, a.inputs[0], from, a.outputs[0], into, n), what);
  });
}

}  // namespace

KernelOr create_cuda_elementwise_kernel(const KernelSpec& spec, const CudaKernelContext& ctx) {
  using launch::Binary;
  using launch::Unary;
  const OpKind op = spec.op;
  if (op == OpKind::kRelu) return make_unary(spec, ctx, Unary::kRelu, 0.f);
  if (op == OpKind::kReluBwd) return make_binary(spec, ctx, Binary::kReluBwd, 0.f);
  if (op == OpKind::kLeakyRelu || op == OpKind::kLeakyReluBwd) {
    LMS_ASSIGN_OR_RETURN(double alpha, real_attr(spec, "alpha"));
    const float a = static_cast<float>(alpha);
    if (op == OpKind::kLeakyRelu) return make_unary(spec, ctx, Unary::kLeakyRelu, a);
    return make_binary(spec, ctx, Binary::kLeakyReluBwd, a);
  }
  if (op == OpKind::kSigmoid) return make_unary(spec, ctx, Unary::kSigmoid, 0.f);
  if (op == OpKind::kSigmoidBwd) return make_binary(spec, ctx, Binary::kSigmoidBwd, 0.f);
  if (op == OpKind::kTanh) return make_unary(spec, ctx, Unary::kTanh, 0.f);
  if (op == OpKind::kTanhBwd) return make_binary(spec, ctx, Binary::kTanhBwd, 0.f);
  if (op == OpKind::kSoftmax) return make_softmax(spec, ctx, false);
  if (op == OpKind::kSoftmaxBwd) return make_softmax(spec, ctx, true);
  if (op == OpKind::kClip || op == OpKind::kClipBwd) {
    return make_clip(spec, ctx, op == OpKind::kClipBwd);
  }
  if (op == OpKind::kGelu || op == OpKind::kGeluBwd) {
    return make_gelu(spec, ctx, op == OpKind::kGeluBwd);
  }
  if (op == OpKind::kHardSigmoid || op == OpKind::kHardSigmoidBwd || op == OpKind::kHardSwish ||
      op == OpKind::kHardSwishBwd) {
    return make_hard_activation(spec, ctx);
  }
  if (op == OpKind::kReshape) return make_reshape(spec, ctx);
  if (op == OpKind::kTranspose) return make_transpose(spec, ctx);
  if (op == OpKind::kAdd) return make_binary(spec, ctx, Binary::kAdd, 0.f);
  if (op == OpKind::kMul) return make_binary(spec, ctx, Binary::kMul, 0.f);
  if (op == OpKind::kScale) {
    LMS_ASSIGN_OR_RETURN(double factor, real_attr(spec, "factor"));
    return make_unary(spec, ctx, Unary::kScale, static_cast<float>(factor));
  }
  if (op == OpKind::kConcat) return make_concat(spec, ctx);
  if (op == OpKind::kSlice) return make_slice(spec, ctx);
  if (op == OpKind::kFill) return make_fill(spec, ctx);
  if (op == OpKind::kCast) return make_cast(spec, ctx);
  if (op == OpKind::kDropout || op == OpKind::kDropoutBwd) return make_dropout(spec, ctx);
  if (op == OpKind::kEmbedding) return make_embedding(spec, ctx, false);
  if (op == OpKind::kEmbeddingBwd) return make_embedding(spec, ctx, true);
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cuda
