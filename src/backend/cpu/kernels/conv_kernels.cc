// conv, conv_bwd_data, conv_bwd_weights, deconv, deconv_bwd_data,
// deconv_bwd_weights on oneDNN (de)convolution primitives.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/blocked_layout.h"
#include "backend/cpu/kernels/spatial_kernels.h"
#include "backend/cpu/kernels/spatial_plan.h"
#include "backend/cpu/kernels/winograd.h"
#include "lms/status.h"
#include "lms/types.h"
#include "op_schema/op_dims.h"
#include "op_schema/spec_checks.h"

namespace lms::cpu {
namespace {

using dnnl::memory;

struct ConvFamily {
  using Fwd = dnnl::convolution_forward;
  using BwdData = dnnl::convolution_backward_data;
  using BwdWeights = dnnl::convolution_backward_weights;
};

struct DeconvFamily {
  using Fwd = dnnl::deconvolution_forward;
  using BwdData = dnnl::deconvolution_backward_data;
  using BwdWeights = dnnl::deconvolution_backward_weights;
};

// oneDNN descriptors of a ConvProblem. oneDNN's weights are always
// {OC, IC, k..}: for conv that is the op's [K,C,k..] (plain oihw); for deconv
// the op stores [C,K,k..], i.e. oneDNN's iohw / iodhw.
struct ConvDescs {
  memory::desc x_user, w_user, y_user, bias;
  memory::desc x, w, y;  // what the primitives are created with
  memory::dims strides, dilates, pad;
  dnnl::algorithm alg;
};

// Note [Conv layouts]: the blocked layouts pay off when the primitive has
// enough channels to fill 16-wide blocks; with 1 channel on one side the
// reorders of the other side can cost more than the primitive saves. Measured
// on the VDSR shapes (bench/conv_bench.cc: 64to64, 1to64, 64to1): forward is
// faster blocked only with >= 16 channels on both sides, backward data only
// with >= 16 channels in dx, and backward weights always (its plain-layout
// gemm implementation is 5-10x slower than any reorder).
constexpr int64_t kMinBlockedChannels = 16;

bool use_blocked(const ConvProblem& p, ConvLayout layout, OpKind op) {
  if (layout != ConvLayout::kAuto) return layout == ConvLayout::kBlocked;
  if (conv_pass(op) == ConvPass::kBackwardWeights) return true;
  if (conv_pass(op) == ConvPass::kBackwardData) return p.x[1] >= kMinBlockedChannels;
  return std::min(p.x[1], p.y[1]) >= kMinBlockedChannels;
}

// Which of x and y (dx, dy) the node's tensors hold in the blocked layout
// (kLayoutAttr; Note [Blocked layouts]).
struct ConvTensorLayouts {
  bool x_blocked = false;
  bool y_blocked = false;
};

absl::StatusOr<ConvTensorLayouts> conv_tensor_layouts(const KernelSpec& spec,
                                                      const ConvProblem& p) {
  // The attribute's form (one 'p' or 'b' per input, ':', one per output)
  // is the op schema's (check_spec); which tensors may be blocked is ours.
  auto it = spec.attrs.find(kLayoutAttr);
  if (it == spec.attrs.end()) return ConvTensorLayouts{};
  const std::string* s = std::get_if<std::string>(&it->second);
  if (s == nullptr) return invalid(spec, "attribute 'layout' must be a string");
  const size_t n_in = spec.input_shapes.size();
  auto in = [&](size_t i) { return (*s)[i] == kLayoutBlocked; };
  auto out = [&](size_t i) { return (*s)[n_in + 1 + i] == kLayoutBlocked; };
  ConvTensorLayouts l;
  if (conv_pass(spec.op) == ConvPass::kBackwardData) {
    l = {.x_blocked = out(0), .y_blocked = in(0)};
  } else if (conv_pass(spec.op) == ConvPass::kBackwardWeights) {
    l = {.x_blocked = in(0), .y_blocked = in(1)};
  } else {
    l = {.x_blocked = in(0), .y_blocked = out(0)};
  }
  const auto blocked = static_cast<size_t>(std::count(s->begin(), s->end(), kLayoutBlocked));
  if (blocked != static_cast<size_t>(l.x_blocked) + static_cast<size_t>(l.y_blocked)) {
    return invalid(spec, "only the activations (x, y, dx, dy) of a convolution can be blocked");
  }
  // Blocking must not pad: the planner counts the plain byte size.
  for (auto [on, shape] : {std::pair{l.x_blocked, &p.x}, std::pair{l.y_blocked, &p.y}}) {
    if (on && !tensor_may_be_blocked(*shape, DType::kFloat32)) {
      return invalid(spec, absl::StrCat("a blocked tensor's channels must fill whole blocks (",
                                        kBlockChannels, ")"));
    }
  }
  return l;
}

ConvDescs conv_descs(const ConvProblem& p, const ConvTensorLayouts& layouts,
                     const SpatialKernelOptions& options, OpKind op) {
  ConvDescs d;
  // Note [Conv algorithm]: convolution_auto lets oneDNN pick Winograd (3x3,
  // stride 1, blocked layouts, large enough problems) where its heuristic
  // expects it to be faster; pick_pd falls back to direct otherwise. Deconv
  // stays direct.
  bool automatic = options.conv_algorithm == ConvAlgorithm::kAuto;
  d.alg = p.transposed ? dnnl::algorithm::deconvolution_direct
          : automatic  ? dnnl::algorithm::convolution_auto
                       : dnnl::algorithm::convolution_direct;
  Shape w_dims = p.w;
  if (p.transposed) std::swap(w_dims[0], w_dims[1]);
  if (p.groups > 1) {
    // oneDNN's grouped weights {G, K/G, C/G, k..} (goihw / goidhw): the
    // same bytes as the op's [K, C/G, k..].
    w_dims[0] /= p.groups;
    w_dims.insert(w_dims.begin(), p.groups);
  }
  d.x_user = layouts.x_blocked ? blocked_desc(p.x) : plain_desc(p.x);
  d.y_user = layouts.y_blocked ? blocked_desc(p.y) : plain_desc(p.y);
  if (p.transposed) {
    auto tag = p.rank == 2 ? memory::format_tag::iohw : memory::format_tag::iodhw;
    d.w_user =
        memory::desc(memory::dims(w_dims.begin(), w_dims.end()), memory::data_type::f32, tag);
  } else {
    d.w_user = plain_desc(w_dims);
  }
  d.bias = plain_desc({p.y[1]});
  bool blocked = use_blocked(p, options.conv_layout, op);
  // The primitive is chosen as for plain tensors whatever the tensors'
  // layouts, so blocking them changes no result (Note [Blocked layouts]).
  d.x = blocked ? any_desc(p.x) : plain_desc(p.x);
  d.w = blocked ? any_desc(w_dims) : d.w_user;
  d.y = blocked ? any_desc(p.y) : plain_desc(p.y);
  d.strides.assign(p.stride.begin(), p.stride.end());
  d.pad.assign(p.pad.begin(), p.pad.end());
  for (int64_t dil : p.dilation) d.dilates.push_back(dil - 1);  // oneDNN: 0 = dense
  return d;
}

template <class F>
typename F::Fwd::primitive_desc forward_pd(const ConvProblem& p, const ConvDescs& d,
                                           dnnl::algorithm alg, const dnnl::engine& engine,
                                           const dnnl::primitive_attr& attr) {
  auto prop = dnnl::prop_kind::forward_training;
  auto desc =
      p.bias ? typename F::Fwd::desc(prop, alg, d.x, d.w, d.bias, d.y, d.strides, d.dilates, d.pad,
                                     d.pad)
             : typename F::Fwd::desc(prop, alg, d.x, d.w, d.y, d.strides, d.dilates, d.pad, d.pad);
  return typename F::Fwd::primitive_desc(desc, attr, engine);
}

// make(alg) -> primitive_desc. With convolution_auto, keeps oneDNN's choice
// only when it is Winograd (Note [Conv algorithm]): its other choices can be
// slower than the direct implementation.
//
// Note [Workspace bound]: a kernel's scratchpad is device memory in every
// working set the swap planner must fit, so a Winograd choice whose
// scratchpad exceeds kMaxWinogradScratchRatio times the bytes of the plain
// input and output is refused (oneDNN's single-thread Winograd asks for ~16
// activations at some sizes, which would cap LMS at a fraction of its reach).
constexpr double kMaxWinogradScratchRatio = 1.0;

template <class MakePd>
auto pick_pd(const ConvDescs& d, MakePd make) {
  auto pd = make(d.alg);
  if (d.alg != dnnl::algorithm::convolution_auto) return pd;
  const double io_bytes = static_cast<double>(d.x_user.get_size() + d.y_user.get_size());
  const bool winograd = std::string(pd.impl_info_str()).find("wino") != std::string::npos;
  const double scratch = static_cast<double>(pd.scratchpad_desc().get_size());
  if (winograd && scratch <= kMaxWinogradScratchRatio * io_bytes) return pd;
  return make(dnnl::algorithm::convolution_direct);
}

bool has_relu(const KernelSpec& spec) {
  auto it = spec.attrs.find(kActivationAttr);
  if (it == spec.attrs.end()) return false;
  const std::string* v = std::get_if<std::string>(&it->second);
  return v != nullptr && *v == kActivationRelu;
}

bool same_primitive(const dnnl::convolution_forward::primitive_desc& a,
                    const dnnl::convolution_forward::primitive_desc& b) {
  return std::string(a.impl_info_str()) == b.impl_info_str() && a.src_desc() == b.src_desc() &&
         a.weights_desc() == b.weights_desc() && a.dst_desc() == b.dst_desc();
}

// Inputs x, w, b?; output y. With activation = "relu" (conv only;
// Note [Conv + ReLU fusion]) the relu runs as the primitive's eltwise
// post-op when oneDNN then picks the same implementation and layouts as
// for the plain conv, so the bits cannot differ from conv followed by
// relu; otherwise the plain conv runs and the relu after it, in place on
// its output.
template <class F>
std::unique_ptr<Kernel> make_forward(const KernelSpec& spec, const CpuKernelContext& ctx,
                                     const ConvProblem& p, const ConvDescs& d) {
  auto pd = pick_pd(d, [&](dnnl::algorithm alg) {
    return forward_pd<F>(p, d, alg, ctx.engine, user_scratchpad_attr());
  });
  bool relu_after = false;
  if constexpr (std::is_same_v<F, ConvFamily>) {
    if (has_relu(spec)) {
      dnnl::primitive_attr attr = user_scratchpad_attr();
      dnnl::post_ops ops;
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      attr.set_post_ops(ops);
      relu_after = true;
      for (dnnl::algorithm alg : {d.alg, dnnl::algorithm::convolution_direct}) {
        auto fused = forward_pd<F>(p, d, alg, ctx.engine, attr);
        if (same_primitive(fused, pd)) {
          pd = fused;
          relu_after = false;
          break;
        }
      }
    }
  }
  PlanBuilder b(spec.name, ctx);
  const BufferRef x = b.bind_input(0, d.x_user, pd.src_desc());
  const BufferRef w = b.bind_input(1, d.w_user, pd.weights_desc());
  const BufferRef y = b.bind_output(0, d.y_user, pd.dst_desc());
  std::vector<StepArg> args = {{DNNL_ARG_SRC, x, pd.src_desc()},
                               {DNNL_ARG_WEIGHTS, w, pd.weights_desc()},
                               {DNNL_ARG_DST, y, pd.dst_desc()}};
  if (p.bias) {
    args.push_back({DNNL_ARG_BIAS, b.bind_input(2, d.bias, pd.bias_desc()), pd.bias_desc()});
  }
  b.add_step(typename F::Fwd(pd), std::move(args), pd.scratchpad_desc());
  if (relu_after) {
    dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_training,
                                     dnnl::algorithm::eltwise_relu, pd.dst_desc(), 0.f, 0.f);
    dnnl::eltwise_forward::primitive_desc epd(desc, user_scratchpad_attr(), ctx.engine);
    b.add_step(dnnl::eltwise_forward(epd),
               {{DNNL_ARG_SRC, y, pd.dst_desc()}, {DNNL_ARG_DST, y, pd.dst_desc()}},
               epd.scratchpad_desc());
  }
  return b.finish();
}

// Inputs dy, w; output dx.
template <class F>
std::unique_ptr<Kernel> make_backward_data(const KernelSpec& spec, const CpuKernelContext& ctx,
                                           const ConvProblem& p, const ConvDescs& d) {
  ConvProblem no_bias = p;
  no_bias.bias = false;
  auto pd = pick_pd(d, [&](dnnl::algorithm alg) {
    auto hint = forward_pd<F>(no_bias, d, alg, ctx.engine, dnnl::primitive_attr());
    typename F::BwdData::desc desc(alg, d.x, d.w, d.y, d.strides, d.dilates, d.pad, d.pad);
    return typename F::BwdData::primitive_desc(desc, user_scratchpad_attr(), ctx.engine, hint);
  });
  PlanBuilder b(spec.name, ctx);
  std::vector<StepArg> args = {
      {DNNL_ARG_DIFF_DST, b.bind_input(0, d.y_user, pd.diff_dst_desc()), pd.diff_dst_desc()},
      {DNNL_ARG_WEIGHTS, b.bind_input(1, d.w_user, pd.weights_desc()), pd.weights_desc()},
      {DNNL_ARG_DIFF_SRC, b.bind_output(0, d.x_user, pd.diff_src_desc()), pd.diff_src_desc()}};
  b.add_step(typename F::BwdData(pd), std::move(args), pd.scratchpad_desc());
  return b.finish();
}

// Inputs x, dy; outputs dw, db?.
template <class F>
std::unique_ptr<Kernel> make_backward_weights(const KernelSpec& spec, const CpuKernelContext& ctx,
                                              const ConvProblem& p, const ConvDescs& d) {
  auto pd = pick_pd(d, [&](dnnl::algorithm alg) {
    auto hint = forward_pd<F>(p, d, alg, ctx.engine, dnnl::primitive_attr());
    auto desc = p.bias ? typename F::BwdWeights::desc(alg, d.x, d.w, d.bias, d.y, d.strides,
                                                      d.dilates, d.pad, d.pad)
                       : typename F::BwdWeights::desc(alg, d.x, d.w, d.y, d.strides, d.dilates,
                                                      d.pad, d.pad);
    return typename F::BwdWeights::primitive_desc(desc, user_scratchpad_attr(), ctx.engine, hint);
  });
  PlanBuilder b(spec.name, ctx);
  auto dw_md = pd.diff_weights_desc();
  std::vector<StepArg> args = {
      {DNNL_ARG_SRC, b.bind_input(0, d.x_user, pd.src_desc()), pd.src_desc()},
      {DNNL_ARG_DIFF_DST, b.bind_input(1, d.y_user, pd.diff_dst_desc()), pd.diff_dst_desc()},
      {DNNL_ARG_DIFF_WEIGHTS, b.bind_output(0, d.w_user, dw_md), dw_md}};
  if (p.bias) {
    auto db_md = pd.diff_bias_desc();
    args.push_back({DNNL_ARG_DIFF_BIAS, b.bind_output(1, d.bias, db_md), db_md});
  }
  b.add_step(typename F::BwdWeights(pd), std::move(args), pd.scratchpad_desc());
  return b.finish();
}

// Note [lms Winograd]: oneDNN 2.6 has Winograd convolutions only for
// AVX-512; below it every 3x3 layer would run oneDNN's direct kernel, which
// is the work PyTorch does too. There all three passes of a 2-D 3x3
// stride-1 conv run winograd.h's F(4x4, 3x3) instead: its matrix products
// are oneDNN's matmul, its transforms ours. It applies where both
// activations fill whole blocks of the device's blocked layout, have at
// least kMinBlockedChannels channels (fewer give the matmul too little work
// per transformed value), the pad is at most 2 (backward data pads by
// 2 - pad), and its workspace stays within kMaxWinogradScratchRatio times
// the plain input and output, as oneDNN's Winograd must
// (ConvAlgorithm::kWinograd waives that bound, so that small test problems
// run it too).

// The pass in forward terms (WinogradShape), or nullopt where lms's
// Winograd does not apply.
std::optional<WinogradShape> lms_winograd_shape(const KernelSpec& spec, const ConvProblem& p,
                                                const SpatialKernelOptions& options) {
  const bool wanted = options.conv_algorithm == ConvAlgorithm::kWinograd ||
                      (options.conv_algorithm == ConvAlgorithm::kAuto && !onednn_avx512());
  if (!wanted || p.transposed || p.groups > 1 || p.rank != 2 || !winograd_cpu_supported())
    return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    if (p.w[2 + i] != 3 || p.stride[i] != 1 || p.dilation[i] != 1 || p.pad[i] > 2) {
      return std::nullopt;
    }
  }
  for (const Shape* shape : {&p.x, &p.y}) {
    if (blocked_desc(*shape).get_size() != plain_desc(*shape).get_size()) return std::nullopt;
  }
  if (std::min(p.x[1], p.y[1]) < kMinBlockedChannels) return std::nullopt;
  WinogradShape shape{.n = p.x[0],
                      .c = p.x[1],
                      .k = p.y[1],
                      .h = p.x[2],
                      .w = p.x[3],
                      .ho = p.y[2],
                      .wo = p.y[3],
                      .pad_h = p.pad[0],
                      .pad_w = p.pad[1],
                      .block = blocked_channels()};
  if (spec.op == OpKind::kConvBwdData) {  // dy -> dx, padded by 2 - pad
    std::swap(shape.c, shape.k);
    std::swap(shape.h, shape.ho);
    std::swap(shape.w, shape.wo);
    shape.pad_h = 2 - shape.pad_h;
    shape.pad_w = 2 - shape.pad_w;
  }
  return shape;
}

// The lms Winograd kernel of a conv, conv_bwd_data or conv_bwd_weights node
// on the device's blocked layout (plain tensors are reordered in and out),
// or null where its workspace is refused. Inputs and outputs as the op's:
// x, w, b? -> y; dy, w -> dx; x, dy -> dw, db?.
std::unique_ptr<Kernel> make_lms_winograd(const KernelSpec& spec, const CpuKernelContext& ctx,
                                          const ConvProblem& p, const ConvDescs& d,
                                          const WinogradShape& shape,
                                          const SpatialKernelOptions& options) {
  using Kind = BufferRef::Kind;
  const bool backward_data = spec.op == OpKind::kConvBwdData;
  const bool backward_weights = spec.op == OpKind::kConvBwdWeights;
  std::shared_ptr<const WinogradConv> conv;
  std::shared_ptr<const WinogradConvBackwardWeights> weights;
  uint64_t workspace = 0;
  if (backward_weights) {
    weights = std::make_shared<WinogradConvBackwardWeights>(shape, p.bias, ctx.engine,
                                                            /*threads=*/0);
    workspace = weights->workspace_bytes();
  } else {
    conv = std::make_shared<WinogradConv>(shape, backward_data, !backward_data && p.bias,
                                          !backward_data && has_relu(spec), ctx.engine,
                                          /*threads=*/0);
    workspace = conv->workspace_bytes();
  }
  const double io_bytes =
      static_cast<double>(plain_desc(p.x).get_size() + plain_desc(p.y).get_size());
  if (options.conv_algorithm == ConvAlgorithm::kAuto &&
      static_cast<double>(workspace) > kMaxWinogradScratchRatio * io_bytes) {
    return nullptr;
  }
  PlanBuilder b(spec.name, ctx);
  if (backward_weights) {
    const BufferRef x = b.bind_input(0, d.x_user, blocked_desc(p.x));
    const BufferRef dy = b.bind_input(1, d.y_user, blocked_desc(p.y));
    const BufferRef dw{Kind::kOutput, 0};
    const BufferRef db = p.bias ? BufferRef{Kind::kOutput, 1} : dw;
    const BufferRef scratch = b.reserve(workspace);
    b.add_custom_step(
        [weights](const std::vector<void*>& ptrs) {
          return weights->run(static_cast<const float*>(ptrs[0]),
                              static_cast<const float*>(ptrs[1]), static_cast<float*>(ptrs[2]),
                              static_cast<float*>(ptrs[3]), ptrs[4]);
        },
        {x, dy, dw, db, scratch});
    return b.finish();
  }
  const BufferRef in =
      b.bind_input(0, backward_data ? d.y_user : d.x_user, blocked_desc(backward_data ? p.y : p.x));
  const BufferRef w{Kind::kInput, 1};
  const BufferRef bias = !backward_data && p.bias ? BufferRef{Kind::kInput, 2} : w;
  const BufferRef out = b.bind_output(0, backward_data ? d.x_user : d.y_user,
                                      blocked_desc(backward_data ? p.x : p.y));
  const BufferRef scratch = b.reserve(workspace);
  b.add_custom_step(
      [conv](const std::vector<void*>& ptrs) {
        return conv->run(static_cast<const float*>(ptrs[0]), static_cast<const float*>(ptrs[1]),
                         static_cast<const float*>(ptrs[2]), static_cast<float*>(ptrs[3]), ptrs[4]);
      },
      {in, w, bias, out, scratch});
  return b.finish();
}

template <class F>
std::unique_ptr<Kernel> make_conv(const KernelSpec& spec, const CpuKernelContext& ctx,
                                  const ConvProblem& p, const ConvTensorLayouts& layouts,
                                  const SpatialKernelOptions& options) {
  ConvDescs d = conv_descs(p, layouts, options, spec.op);
  if constexpr (std::is_same_v<F, ConvFamily>) {
    if (std::optional<WinogradShape> shape = lms_winograd_shape(spec, p, options)) {
      if (std::unique_ptr<Kernel> k = make_lms_winograd(spec, ctx, p, d, *shape, options)) return k;
    }
  }
  if (conv_pass(spec.op) == ConvPass::kBackwardData) return make_backward_data<F>(spec, ctx, p, d);
  if (conv_pass(spec.op) == ConvPass::kBackwardWeights) {
    return make_backward_weights<F>(spec, ctx, p, d);
  }
  return make_forward<F>(spec, ctx, p, d);
}

bool wants_least_workspace(const KernelSpec& spec) {
  auto it = spec.attrs.find(kWorkspaceAttr);
  if (it == spec.attrs.end()) return false;
  const std::string* v = std::get_if<std::string>(&it->second);
  return v != nullptr && *v == kWorkspaceLeast;
}

}  // namespace

// Note [Least workspace]: a node with workspace = "least" (lms/ops.h) gets,
// of the device's options and the two layouts with the direct algorithm,
// the kernel with the smallest workspace (the first on a tie, so the
// choice is deterministic). Plain layouts need no reorder buffers, so that
// is usually plain + direct, slower by the reorders' gain (Note [Conv
// layouts]).
absl::StatusOr<std::unique_ptr<Kernel>> create_conv_kernel(const KernelSpec& spec,
                                                           const CpuKernelContext& ctx,
                                                           const SpatialKernelOptions& options) {
  if (!is_conv_family(spec.op)) return std::unique_ptr<Kernel>();
  LMS_ASSIGN_OR_RETURN(ConvProblem p, conv_problem(spec));
  LMS_ASSIGN_OR_RETURN(ConvTensorLayouts layouts, conv_tensor_layouts(spec, p));
  auto make = [&](const SpatialKernelOptions& o) {
    return p.transposed ? make_conv<DeconvFamily>(spec, ctx, p, layouts, o)
                        : make_conv<ConvFamily>(spec, ctx, p, layouts, o);
  };
  std::unique_ptr<Kernel> best = make(options);
  if (!wants_least_workspace(spec)) return best;
  for (ConvLayout layout : {ConvLayout::kPlain, ConvLayout::kBlocked}) {
    std::unique_ptr<Kernel> k =
        make({.conv_layout = layout, .conv_algorithm = ConvAlgorithm::kDirect});
    if (k->workspace_bytes() < best->workspace_bytes()) best = std::move(k);
  }
  return best;
}

}  // namespace lms::cpu
