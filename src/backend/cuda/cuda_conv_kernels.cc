// conv, conv_bwd_data, conv_bwd_weights, deconv, deconv_bwd_data,
// deconv_bwd_weights (docs/ops.md) on cuDNN's legacy convolution API.
//
// Every op is one cuDNN convolution pass over a "conv problem" ci -> co with
// filter [co channels, ci channels, k..]: for conv, ci = x and co = y; for a
// transposed conv (deconv) the roles swap, ci = y and co = x, and the deconv
// weights [C,K,k..] are exactly that filter. So:
//   conv               forward      (x  -> y)       + bias
//   deconv             backward data (x as dco -> y as dci) + bias
//   conv_bwd_data      backward data (dy -> dx)
//   deconv_bwd_data    forward      (dy as ci -> dx as co)
//   conv_bwd_weights   backward filter (ci = x,  dco = dy)  + db
//   deconv_bwd_weights backward filter (ci = dy, dco = x)   + db
// Bias gradients are a deterministic per-channel sum (cuda_launch.h), not
// cudnnConvolutionBackwardBias.
//
// A batch whose tensors exceed cuDNN's 32-bit descriptors runs in pieces
// along N (Note [Large tensors]).
//
// Math is CUDNN_FMA_MATH: no TF32 tensor-core rounding, so results stay within
// float rounding of the CPU device (Note [CUDA kernel determinism]).
#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cuda/conv_algo_choice.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/cuda_status.h"
#include "backend/cuda/large_tensor_plan.h"
#include "common/align.h"
#include "lms/status.h"
#include "lms/types.h"
#include "op_schema/op_dims.h"
#include "op_schema/spec_checks.h"

namespace lms::cuda {
namespace {

enum class Pass { kForward, kBackwardData, kBackwardFilter };

// Owns the cuDNN descriptors of one problem.
struct ConvDescs {
  cudnnTensorDescriptor_t ci = nullptr, co = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ConvDescs() = default;
  ConvDescs(const ConvDescs&) = delete;
  ConvDescs& operator=(const ConvDescs&) = delete;
  ~ConvDescs() {
    for (cudnnTensorDescriptor_t t : {ci, co, bias})
      if (t != nullptr) (void)cudnnDestroyTensorDescriptor(t);
    if (filter != nullptr) (void)cudnnDestroyFilterDescriptor(filter);
    if (conv != nullptr) (void)cudnnDestroyConvolutionDescriptor(conv);
  }
};

absl::StatusOr<std::vector<int>> to_int(const std::vector<int64_t>& v, const std::string& what) {
  std::vector<int> out;
  for (int64_t x : v) {
    LMS_ASSIGN_OR_RETURN(int i, checked_int(x, what));
    out.push_back(i);
  }
  return out;
}

// A dense NC.. descriptor of `shape` with its N replaced by `samples`;
// dimensions and strides are checked into int (Note [Large tensors]).
absl::Status set_tensor(cudnnTensorDescriptor_t* desc, Shape shape, int64_t samples,
                        const std::string& what) {
  shape[0] = samples;
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  LMS_ASSIGN_OR_RETURN(std::vector<int> dims32, to_int(shape, std::string(what) + " dimension"));
  LMS_ASSIGN_OR_RETURN(std::vector<int> strides32, to_int(strides, std::string(what) + " stride"));
  LMS_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(desc), "cudnnCreateTensorDescriptor");
  return cudnn_status(
      cudnnSetTensorNdDescriptor(*desc, CUDNN_DATA_FLOAT, static_cast<int>(dims32.size()),
                                 dims32.data(), strides32.data()),
      "cudnnSetTensorNdDescriptor");
}

// The descriptors of `p` for a piece of `samples` samples.
absl::Status make_descs(const ConvProblem& p, int64_t samples, const std::string& label,
                        ConvDescs* d) {
  const Shape& ci = p.transposed ? p.y : p.x;
  const Shape& co = p.transposed ? p.x : p.y;
  LMS_RETURN_IF_ERROR(set_tensor(&d->ci, ci, samples, label + ": input tensor"));
  LMS_RETURN_IF_ERROR(set_tensor(&d->co, co, samples, label + ": output tensor"));
  Shape bias_shape(p.y.size(), 1);
  bias_shape[1] = p.y[1];
  LMS_RETURN_IF_ERROR(set_tensor(&d->bias, bias_shape, 1, label + ": bias"));
  LMS_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&d->filter), "cudnnCreateFilterDescriptor");
  LMS_ASSIGN_OR_RETURN(std::vector<int> w, to_int(p.w, label + ": filter dimension"));
  LMS_CUDNN_RETURN_IF_ERROR(
      cudnnSetFilterNdDescriptor(d->filter, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                 static_cast<int>(w.size()), w.data()),
      "cudnnSetFilterNdDescriptor");
  LMS_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&d->conv),
                            "cudnnCreateConvolutionDescriptor");
  LMS_ASSIGN_OR_RETURN(std::vector<int> pad, to_int(p.pad, label + ": pad"));
  LMS_ASSIGN_OR_RETURN(std::vector<int> stride, to_int(p.stride, label + ": stride"));
  LMS_ASSIGN_OR_RETURN(std::vector<int> dil, to_int(p.dilation, label + ": dilation"));
  LMS_CUDNN_RETURN_IF_ERROR(
      cudnnSetConvolutionNdDescriptor(d->conv, p.rank, pad.data(), stride.data(), dil.data(),
                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
      "cudnnSetConvolutionNdDescriptor");
  if (p.groups > 1) {
    // The filter is [K, C/groups, k..] as cuDNN's grouped convolution wants.
    LMS_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionGroupCount(d->conv, static_cast<int>(p.groups)),
                              "cudnnSetConvolutionGroupCount");
  }
  return cudnn_status(cudnnSetConvolutionMathType(d->conv, CUDNN_FMA_MATH),
                      "cudnnSetConvolutionMathType");
}

absl::StatusOr<std::pair<int, uint64_t>> choose_algorithm(const KernelSpec& spec,
                                                          const CudaKernelContext& ctx,
                                                          const ConvDescs& d, Pass pass) {
  constexpr int kMax = 16;
  int n = 0;
  const uint64_t ws = ctx.max_conv_workspace_bytes;
  auto attr = spec.attrs.find(kWorkspaceAttr);
  const bool least = attr != spec.attrs.end() &&
                     std::holds_alternative<std::string>(attr->second) &&
                     std::get<std::string>(attr->second) == kWorkspaceLeast;
  const std::string what = absl::StrCat("node '", spec.name, "' (op ", op_name(spec.op), ")");
  if (pass == Pass::kForward) {
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    LMS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(ctx.cudnn, d.ci, d.filter,
                                                                     d.conv, d.co, kMax, &n, perf),
                              "cudnnGetConvolutionForwardAlgorithm_v7");
    return choose_conv_algorithm(what, perf, n, ws, least);
  }
  if (pass == Pass::kBackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
    LMS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                  ctx.cudnn, d.filter, d.co, d.conv, d.ci, kMax, &n, perf),
                              "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    return choose_conv_algorithm(what, perf, n, ws, least);
  }
  cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
  LMS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                                ctx.cudnn, d.ci, d.co, d.conv, d.filter, kMax, &n, perf),
                            "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
  return choose_conv_algorithm(what, perf, n, ws, least);
}

// Per Note [Large tensors], the batch runs in pieces within cuDNN's descriptor
// limit (conv_split_plan); almost always one piece. Each distinct piece size
// (the full chunk, a shorter last piece) has its descriptors and algorithm.
class CudnnConvKernel final : public Kernel {
 public:
  CudnnConvKernel(const KernelSpec& spec, const CudaKernelContext& ctx, ConvProblem p, Pass pass)
      : name_(spec.name),
        op_(spec.op),
        ctx_(ctx),
        p_(std::move(p)),
        pass_(pass),
        relu_(spec.op == OpKind::kConv && spec.attrs.contains(kActivationAttr)) {}

  absl::Status init(const KernelSpec& spec) {
    const Shape& ci = p_.transposed ? p_.y : p_.x;
    const Shape& co = p_.transposed ? p_.x : p_.y;
    ci_sample_ = num_elements(ci) / ci[0];
    co_sample_ = num_elements(co) / co[0];
    LMS_ASSIGN_OR_RETURN(split_,
                         conv_split_plan(spec.name, ci[0], std::max(ci_sample_, co_sample_)));
    const std::string label = absl::StrCat("node '", spec.name, "' (op ", op_name(spec.op), ")");
    for (const auto& piece : split_.pieces) {
      if (setup_for(piece.second) != nullptr) continue;
      auto setup = std::make_unique<PieceSetup>();
      setup->samples = piece.second;
      LMS_RETURN_IF_ERROR(make_descs(p_, piece.second, label, &setup->d));
      LMS_ASSIGN_OR_RETURN(auto algo, choose_algorithm(spec, ctx_, setup->d, pass_));
      setup->algo = algo.first;
      setup->workspace_bytes = algo.second;
      workspace_bytes_ = std::max(workspace_bytes_, algo.second);
      setups_.push_back(std::move(setup));
    }
    bias_count_ = p_.y[1];
    bias_inner_ = num_elements(p_.y) / p_.y[0] / p_.y[1];
    if (pass_ == Pass::kBackwardFilter && p_.bias) {
      // The bias gradient's partial sums follow cuDNN's workspace.
      bias_scratch_offset_ = align_up(workspace_bytes_, kScratchAlignment);
      workspace_bytes_ = bias_scratch_offset_ +
                         partial_bytes(plan_group_reduce(p_.y[0], bias_count_, bias_inner_), 1);
    }
    return absl::OkStatus();
  }

  uint64_t workspace_bytes() const override { return workspace_bytes_; }

  absl::Status run(const KernelArgs& a) override {
    const std::string what = absl::StrCat("node '", name_, "' (op ", op_name(op_), ")");
    for (size_t k = 0; k < split_.pieces.size(); ++k) {
      const auto [first, samples] = split_.pieces[k];
      LMS_RETURN_IF_ERROR(run_piece(a, *setup_for(samples), first, k == 0, what));
    }
    if (relu_) {
      // activation = "relu" (lms/types.h): the same element-wise kernel as a
      // relu node, in place on the output, so the bits are the same.
      return cuda_status(launch::unary(ctx_.stream, launch::Unary::kRelu, a.outputs[0],
                                       a.outputs[0], num_elements(p_.y), 0.f),
                         what + ": relu");
    }
    if (pass_ == Pass::kBackwardFilter && p_.bias) {
      // db[K] = sum of dy (input 1, [N,K,S']) over N and S', the whole batch.
      double* scratch =
          reinterpret_cast<double*>(static_cast<char*>(a.workspace) + bias_scratch_offset_);
      return cuda_status(launch::channel_sum(ctx_.stream, a.inputs[1], p_.y[0], bias_count_,
                                             bias_inner_, scratch, a.outputs[1]),
                         what + ": bias gradient");
    }
    return absl::OkStatus();
  }

 private:
  struct PieceSetup {
    int64_t samples = 0;
    ConvDescs d;
    int algo = 0;
    uint64_t workspace_bytes = 0;
  };

  const PieceSetup* setup_for(int64_t samples) const {
    for (const auto& s : setups_)
      if (s->samples == samples) return s.get();
    return nullptr;
  }

  // One piece of samples [first, first + setup.samples). Backward-weights
  // accumulates every piece after the first (beta = 1), in piece order.
  absl::Status run_piece(const KernelArgs& a, const PieceSetup& s, int64_t first, bool first_piece,
                         const std::string& what) {
    const float one = 1.0f, zero = 0.0f;
    const ConvDescs& d = s.d;
    const int64_t ci_at = first * ci_sample_, co_at = first * co_sample_;
    if (pass_ == Pass::kForward) {
      LMS_CUDNN_RETURN_IF_ERROR(
          cudnnConvolutionForward(ctx_.cudnn, &one, d.ci, a.inputs[0] + ci_at, d.filter,
                                  a.inputs[1], d.conv,
                                  static_cast<cudnnConvolutionFwdAlgo_t>(s.algo), a.workspace,
                                  s.workspace_bytes, &zero, d.co, a.outputs[0] + co_at),
          what + ": cudnnConvolutionForward");
    } else if (pass_ == Pass::kBackwardData) {
      LMS_CUDNN_RETURN_IF_ERROR(
          cudnnConvolutionBackwardData(
              ctx_.cudnn, &one, d.filter, a.inputs[1], d.co, a.inputs[0] + co_at, d.conv,
              static_cast<cudnnConvolutionBwdDataAlgo_t>(s.algo), a.workspace, s.workspace_bytes,
              &zero, d.ci, a.outputs[0] + ci_at),
          what + ": cudnnConvolutionBackwardData");
    } else {
      // conv: ci = x (input 0), dco = dy (input 1); deconv: ci = dy (1), dco = x (0).
      const float* ci = (p_.transposed ? a.inputs[1] : a.inputs[0]) + ci_at;
      const float* dco = (p_.transposed ? a.inputs[0] : a.inputs[1]) + co_at;
      LMS_CUDNN_RETURN_IF_ERROR(
          cudnnConvolutionBackwardFilter(ctx_.cudnn, &one, d.ci, ci, d.co, dco, d.conv,
                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(s.algo),
                                         a.workspace, s.workspace_bytes, first_piece ? &zero : &one,
                                         d.filter, a.outputs[0]),
          what + ": cudnnConvolutionBackwardFilter");
      return absl::OkStatus();
    }
    if (p_.bias && (op_ == OpKind::kConv || op_ == OpKind::kDeconv)) {
      // The output is co for conv (forward) and ci for deconv (backward data).
      float* y = p_.transposed ? a.outputs[0] + ci_at : a.outputs[0] + co_at;
      LMS_CUDNN_RETURN_IF_ERROR(cudnnAddTensor(ctx_.cudnn, &one, d.bias, a.inputs[2], &one,
                                               p_.transposed ? d.ci : d.co, y),
                                what + ": cudnnAddTensor (bias)");
    }
    return absl::OkStatus();
  }

  // cuDNN's workspace keeps the alignment of the block it starts; the bias
  // scratch after it starts at the next multiple of this (bytes).
  static constexpr uint64_t kScratchAlignment = 256;

  std::string name_;
  OpKind op_;
  CudaKernelContext ctx_;
  ConvProblem p_;
  Pass pass_;
  bool relu_ = false;  // conv with activation = "relu"
  ConvSplit split_;
  std::vector<std::unique_ptr<PieceSetup>> setups_;
  int64_t ci_sample_ = 0, co_sample_ = 0;
  uint64_t workspace_bytes_ = 0;  // the largest piece's cuDNN workspace, then the bias scratch
  uint64_t bias_scratch_offset_ = 0;
  int64_t bias_count_ = 0, bias_inner_ = 0;
};

Pass pass_of(OpKind op) {
  if (op == OpKind::kConv || op == OpKind::kDeconvBwdData) return Pass::kForward;
  if (op == OpKind::kDeconv || op == OpKind::kConvBwdData) return Pass::kBackwardData;
  return Pass::kBackwardFilter;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> create_cuda_conv_kernel(const KernelSpec& spec,
                                                                const CudaKernelContext& ctx) {
  if (!is_conv_family(spec.op)) return std::unique_ptr<Kernel>();
  LMS_ASSIGN_OR_RETURN(ConvProblem p, conv_problem(spec));
  auto kernel = std::make_unique<CudnnConvKernel>(spec, ctx, std::move(p), pass_of(spec.op));
  LMS_RETURN_IF_ERROR(kernel->init(spec));
  return kernel;
}

}  // namespace lms::cuda
