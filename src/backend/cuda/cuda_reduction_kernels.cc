// Losses (mse, soft Dice, softmax cross-entropy), reductions and optimizer
// updates (docs/ops.md) for the CUDA device, over the launchers of cuda_launch.h. Sums use the
// deterministic partials in KernelArgs::workspace (Note [CUDA kernel determinism]). Validation
// mirrors the CPU device's kernels.
//
// Limitation: adam_update with step < 1 (increment did not run first) is a
// FailedPrecondition on the CPU device; here the step lives in device memory,
// so the kernel leaves param, m and v unchanged instead of failing.
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
#include "lms/status.h"
#include "op_schema/op_dims.h"
#include "op_schema/spec_checks.h"

namespace lms::cuda {
namespace {

using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

double* ws_doubles(const KernelArgs& a, int64_t offset = 0) {
  return static_cast<double*>(a.workspace) + offset;
}

uint64_t doubles_bytes(int64_t n) { return static_cast<uint64_t>(n) * sizeof(double); }

// out[] = scale * sum (or sqrt of it) of op over inputs 0 (and 1).
KernelOr make_sum(const KernelSpec& spec, const CudaKernelContext& ctx, launch::Reduce op,
                  int64_t n, double scale) {
  const int blocks = launch::reduce_blocks(n);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel(
      [=](const KernelArgs& a) {
        const float* b = a.inputs.size() > 1 ? a.inputs[1] : nullptr;
        LMS_RETURN_IF_ERROR(
            cuda_status(launch::reduce_partials(s, op, a.inputs[0], b, n, ws_doubles(a)), what));
        return cuda_status(launch::finish_sum(s, ws_doubles(a), blocks, scale, false, a.outputs[0]),
                           what);
      },
      doubles_bytes(blocks));
}

KernelOr make_mse(const KernelSpec& spec, const CudaKernelContext& ctx, bool backward) {
  const int64_t n = num_elements(spec.input_shapes[0]);
  if (!backward) {
    return make_sum(spec, ctx, launch::Reduce::kSumSquaredDiff, n, 1.0 / static_cast<double>(n));
  }
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    return cuda_status(launch::mse_bwd(s, a.inputs[0], a.inputs[1], a.inputs[2], a.outputs[0], n),
                       what);
  });
}

// Workspace, in doubles: the 3 sums of each slice, then the grouped sums'
// partials (three values per block).
KernelOr make_dice(const KernelSpec& spec, const CudaKernelContext& ctx, bool backward) {
  LMS_ASSIGN_OR_RETURN(double eps, real_attr(spec, "eps"));
  const Shape& x = spec.input_shapes[0];
  const int64_t slices = x[0] * x[1];
  const int64_t inner = num_elements(x) / slices;
  const int64_t partials = partial_count(plan_group_reduce(1, slices, inner), 3);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel(
      [=](const KernelArgs& a) {
        double* sums = ws_doubles(a);
        LMS_RETURN_IF_ERROR(cuda_status(launch::dice_sums(s, a.inputs[0], a.inputs[1], slices,
                                                          inner, ws_doubles(a, 3 * slices), sums),
                                        what));
        if (!backward) {
          return cuda_status(launch::dice_loss(s, sums, slices, eps, a.outputs[0]), what);
        }
        return cuda_status(
            launch::dice_bwd(s, a.inputs[1], sums, a.inputs[2], slices, inner, eps, a.outputs[0]),
            what);
      },
      doubles_bytes(3 * slices + partials));
}

// softmax_cross_entropy (+ _bwd): logits[N,C], int64 labels[N] in a buffer
// passed as float*. Workspace, in 8-byte words: lse[N], row_loss[N], the
// count of rows that count, the bad-label flag. A label outside [0, C)
// that is not ignore_index is reported as the CPU device does, at run time
// (bad_class_label), through the flag: the kernel waits for the compute
// stream after its launches (a synchronisation per node, as embedding), and
// copies the bad label back when there is one. Unlike the CPU device, the
// output is written before the error is found; the step fails either way.
KernelOr make_cross_entropy(const KernelSpec& spec, const CudaKernelContext& ctx, bool backward) {
  LMS_ASSIGN_OR_RETURN(const CrossEntropyDims d, cross_entropy_dims(spec));
  const launch::CrossEntropyView v{d.n, d.c, d.ignore_index};
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel(
      [=](const KernelArgs& a) -> absl::Status {
        const auto* labels = reinterpret_cast<const int64_t*>(a.inputs[1]);
        double* lse = ws_doubles(a);
        double* count = ws_doubles(a, 2 * d.n);
        auto* bad = reinterpret_cast<unsigned long long*>(ws_doubles(a, 2 * d.n + 1));
        LMS_RETURN_IF_ERROR(cuda_status(
            launch::cross_entropy_rows(s, a.inputs[0], labels, v, lse, ws_doubles(a, d.n), count,
                                       backward ? nullptr : a.outputs[0], bad),
            what));
        if (backward) {
          LMS_RETURN_IF_ERROR(
              cuda_status(launch::cross_entropy_bwd(s, a.inputs[0], labels, v, lse, count,
                                                    a.inputs[2], a.outputs[0]),
                          what));
        }
        LMS_ASSIGN_OR_RETURN(const unsigned long long first_bad, read_back(s, bad, what));
        if (first_bad >= static_cast<unsigned long long>(d.n)) return absl::OkStatus();
        const auto position = static_cast<int64_t>(first_bad);
        LMS_ASSIGN_OR_RETURN(const int64_t label,
                             read_back(s, labels + position, what + " (the bad label)"));
        return bad_class_label(spec, position, label, d);
      },
      doubles_bytes(2 * d.n + 2));
}

// reduce_mean / reduce_mean_bwd with an axis: one thread per output element
// over the [outer, axis, inner] view.
KernelOr make_axis_mean(const KernelSpec& spec, const CudaKernelContext& ctx, bool backward) {
  // x, or dx = input_shape for the backward (check_spec).
  const Shape x = backward ? Shape(spec.output_shapes[0]) : spec.input_shapes[0];
  LMS_ASSIGN_OR_RETURN(const size_t axis, axis_attr(spec, x, backward ? "input_shape" : "x"));
  const AxisView v = axis_view(x, axis);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    return cuda_status(
        backward ? launch::axis_mean_bwd(s, a.inputs[0], v.outer, v.axis, v.inner, a.outputs[0])
                 : launch::axis_mean(s, a.inputs[0], v.outer, v.axis, v.inner, a.outputs[0]),
        what);
  });
}

KernelOr make_reduce_mean(const KernelSpec& spec, const CudaKernelContext& ctx, bool backward) {
  if (has_axis_attr(spec)) return make_axis_mean(spec, ctx, backward);
  if (!backward) {
    const int64_t n = num_elements(spec.input_shapes[0]);
    return make_sum(spec, ctx, launch::Reduce::kSum, n, 1.0 / static_cast<double>(n));
  }
  const int64_t n = num_elements(spec.output_shapes[0]);  // input_shape (check_spec)
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    return cuda_status(
        launch::fill_from_scalar(s, a.inputs[0], static_cast<double>(n), a.outputs[0], n), what);
  });
}

// sum_to: one thread per output element, each summing its x elements in
// double in x's order (SumToPlan), as the CPU loop does.
KernelOr make_sum_to(const KernelSpec& spec, const CudaKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const SumToPlan p, check_sum_to(spec));
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    return cuda_status(launch::sum_to(s, a.inputs[0], a.outputs[0], p), what);
  });
}

// norm[] = sqrt(sum over every input of g^2): partials of each input in turn,
// then one sum over all of them in order.
KernelOr make_global_norm(const KernelSpec& spec, const CudaKernelContext& ctx) {
  std::vector<int64_t> sizes, offsets;
  int64_t total = 0;
  for (const Shape& shape : spec.input_shapes) {
    sizes.push_back(num_elements(shape));
    offsets.push_back(total);
    total += launch::reduce_blocks(sizes.back());
  }
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel(
      [=](const KernelArgs& a) {
        for (size_t j = 0; j < sizes.size(); ++j) {
          LMS_RETURN_IF_ERROR(
              cuda_status(launch::reduce_partials(s, launch::Reduce::kSumSquares, a.inputs[j],
                                                  nullptr, sizes[j], ws_doubles(a, offsets[j])),
                          what));
        }
        return cuda_status(launch::finish_sum(s, ws_doubles(a), total, 1.0, true, a.outputs[0]),
                           what);
      },
      doubles_bytes(total));
}

KernelOr make_increment(const KernelSpec& spec, const CudaKernelContext& ctx) {
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    const float* norm = a.inputs.size() > 1 ? a.inputs[1] : nullptr;
    return cuda_status(launch::increment(s, a.inputs[0], norm), what);
  });
}

KernelOr make_amp_update_scale(const KernelSpec& spec, const CudaKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const AmpScaleAttrs h, amp_scale_attrs(spec));
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    return cuda_status(
        launch::amp_update_scale(s, a.inputs[0], a.inputs[1], a.inputs[2], h.growth_factor,
                                 h.backoff_factor, static_cast<float>(h.growth_interval)),
        what);
  });
}

// The scale and norm inputs of an update whose loss-scaling inputs start at
// `first` (docs/ops.md); null where absent.
std::pair<const float*, const float*> scale_and_norm(const KernelArgs& a, bool loss_scaling,
                                                     size_t first) {
  if (loss_scaling) return {a.inputs[first], a.inputs[first + 1]};
  return {nullptr, a.inputs.size() > first ? a.inputs[first] : nullptr};
}

KernelOr make_sgd(const KernelSpec& spec, const CudaKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const UpdateAttrs c, update_attrs(spec));
  const double momentum = c.momentum;
  const launch::SgdParams h{static_cast<float>(c.lr), static_cast<float>(momentum),
                            static_cast<float>(c.weight_decay), static_cast<float>(c.clip_norm)};
  const int64_t n = num_elements(spec.input_shapes[0]);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  const bool loss_scaling = c.loss_scaling;
  return make_fn_kernel([=](const KernelArgs& a) {
    const auto [scale, norm] = scale_and_norm(a, loss_scaling, 3);
    return cuda_status(
        launch::sgd_update(s, a.inputs[0], a.inputs[1], a.inputs[2], scale, norm, n, h), what);
  });
}

KernelOr make_adam(const KernelSpec& spec, const CudaKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const UpdateAttrs c, update_attrs(spec));
  const double b1 = c.beta1, b2 = c.beta2, eps = c.eps;
  const auto decay_steps = static_cast<double>(c.decay_steps);
  const double decay_power = c.decay_power;
  const launch::AdamParams h{static_cast<float>(c.lr),
                             static_cast<float>(b1),
                             static_cast<float>(b2),
                             static_cast<float>(eps),
                             static_cast<float>(c.weight_decay),
                             static_cast<float>(c.clip_norm),
                             decay_steps,
                             decay_power};
  const int64_t n = num_elements(spec.input_shapes[0]);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  const bool loss_scaling = c.loss_scaling;
  return make_fn_kernel([=](const KernelArgs& a) {
    const auto [scale, norm] = scale_and_norm(a, loss_scaling, 5);
    return cuda_status(launch::adam_update(s, a.inputs[0], a.inputs[1], a.inputs[2], a.inputs[3],
                                           a.inputs[4], scale, norm, n, h),
                       what);
  });
}

}  // namespace

KernelOr create_cuda_reduction_kernel(const KernelSpec& spec, const CudaKernelContext& ctx) {
  const OpKind op = spec.op;
  if (op == OpKind::kMseLoss || op == OpKind::kMseLossBwd)
    return make_mse(spec, ctx, op == OpKind::kMseLossBwd);
  if (op == OpKind::kSoftDiceLoss || op == OpKind::kSoftDiceLossBwd) {
    return make_dice(spec, ctx, op == OpKind::kSoftDiceLossBwd);
  }
  if (op == OpKind::kSoftmaxCrossEntropy || op == OpKind::kSoftmaxCrossEntropyBwd) {
    return make_cross_entropy(spec, ctx, op == OpKind::kSoftmaxCrossEntropyBwd);
  }
  if (op == OpKind::kReduceMean || op == OpKind::kReduceMeanBwd) {
    return make_reduce_mean(spec, ctx, op == OpKind::kReduceMeanBwd);
  }
  if (op == OpKind::kSumTo) return make_sum_to(spec, ctx);
  if (op == OpKind::kGlobalNorm) return make_global_norm(spec, ctx);
  if (op == OpKind::kIncrement) return make_increment(spec, ctx);
  if (op == OpKind::kSgdUpdate) return make_sgd(spec, ctx);
  if (op == OpKind::kAdamUpdate) return make_adam(spec, ctx);
  if (op == OpKind::kAmpUpdateScale) return make_amp_update_scale(spec, ctx);
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cuda
