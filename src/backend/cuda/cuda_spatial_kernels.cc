// instance_norm, batch_norm (+ _bwd, bn_stats_update), max_pool, avg_pool (+ _bwd) and upsample
// (+ _bwd) of docs/ops.md for the CUDA device, over the launchers of
// cuda_launch.h (deterministic gathers and tree sums; no cuDNN, so the
// semantics — biased variance, first-maximum routing, half-pixel linear
// taps — are exactly those the CPU device documents). Validation mirrors the
// CPU device's kernels.
#include <memory>
#include <string>
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

// ---- Normalisation ----

// Workspace, in doubles: mean, var (and, backward, sum_dy, sum_dyxmu), cv
// each, then the grouped sums' partials (two values per block; the stats
// and the backward sums use them in turn).
KernelOr make_norm(const KernelSpec& spec, const CudaKernelContext& ctx, bool instance,
                   bool backward) {
  LMS_ASSIGN_OR_RETURN(double eps, norm_eps(spec));
  const Shape& x = spec.input_shapes[0];
  const int64_t n = x[0], c = x[1], s = num_elements(x) / (x[0] * x[1]);
  const launch::NormView v{instance ? 1 : n, instance ? n * c : c, s, c, eps};
  const std::string what = node_label(spec);
  cudaStream_t st = ctx.stream;
  const int64_t per_group = backward ? 4 : 2;
  const int64_t partials = partial_count(plan_group_reduce(v.nv, v.cv, v.s), 2);
  const uint64_t ws = static_cast<uint64_t>(per_group * v.cv + partials) * sizeof(double);
  return make_fn_kernel(
      [=](const KernelArgs& a) {
        double* mean = static_cast<double*>(a.workspace);
        double* var = mean + v.cv;
        double* scratch = mean + per_group * v.cv;
        LMS_RETURN_IF_ERROR(
            cuda_status(launch::norm_stats(st, a.inputs[0], v, scratch, mean, var), what));
        if (!backward) {
          return cuda_status(launch::norm_forward(st, a.inputs[0], a.inputs[1], a.inputs[2], mean,
                                                  var, v, a.outputs[0]),
                             what);
        }
        double* sum_dy = var + v.cv;
        double* sum_dyxmu = sum_dy + v.cv;
        LMS_RETURN_IF_ERROR(cuda_status(launch::norm_bwd_sums(st, a.inputs[0], a.inputs[2], mean, v,
                                                              scratch, sum_dy, sum_dyxmu),
                                        what));
        LMS_RETURN_IF_ERROR(
            cuda_status(launch::norm_bwd_dx(st, a.inputs[0], a.inputs[2], a.inputs[1], mean, var,
                                            sum_dy, sum_dyxmu, v, a.outputs[0]),
                        what));
        return cuda_status(
            launch::norm_param_grads(st, var, sum_dy, sum_dyxmu, v, a.outputs[1], a.outputs[2]),
            what);
      },
      ws);
}

// batch_norm with running statistics (BatchNormMode): training saves the
// batch statistics as outputs 1 and 2 after computing them as make_norm
// does; eval converts the running statistics to the double workspace and
// normalises with them. Workspace: mean, var (doubles, C each), then the
// statistics' partials (training only).
KernelOr make_batch_norm(const KernelSpec& spec, const CudaKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(BatchNormDims d, batch_norm_dims(spec));
  if (d.mode == BatchNormMode::kTraining) return make_norm(spec, ctx, false, false);
  const Shape& x = spec.input_shapes[0];
  const int64_t n = x[0], c = x[1], s = num_elements(x) / (x[0] * x[1]);
  const launch::NormView v{n, c, s, c, d.eps};
  const bool eval = d.mode == BatchNormMode::kEval;
  const int64_t partials = eval ? 0 : partial_count(plan_group_reduce(v.nv, v.cv, v.s), 2);
  const uint64_t ws = static_cast<uint64_t>(2 * c + partials) * sizeof(double);
  const std::string what = node_label(spec);
  cudaStream_t st = ctx.stream;
  return make_fn_kernel(
      [=](const KernelArgs& a) {
        double* mean = static_cast<double*>(a.workspace);
        double* var = mean + c;
        if (eval) {
          LMS_RETURN_IF_ERROR(cuda_status(
              launch::stats_to_double(st, a.inputs[3], a.inputs[4], c, mean, var), what));
        } else {
          LMS_RETURN_IF_ERROR(
              cuda_status(launch::norm_stats(st, a.inputs[0], v, var + c, mean, var), what));
          LMS_RETURN_IF_ERROR(cuda_status(
              launch::stats_to_float(st, mean, var, c, a.outputs[1], a.outputs[2]), what));
        }
        return cuda_status(launch::norm_forward(st, a.inputs[0], a.inputs[1], a.inputs[2], mean,
                                                var, v, a.outputs[0]),
                           what);
      },
      ws);
}

KernelOr make_bn_stats_update(const KernelSpec& spec, const CudaKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(BnStatsUpdateDims d, bn_stats_update_dims(spec));
  const double unbias = static_cast<double>(d.count) / static_cast<double>(d.count - 1);
  const std::string what = node_label(spec);
  cudaStream_t st = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    return cuda_status(launch::bn_stats_update(st, a.inputs[0], a.inputs[1], a.inputs[2],
                                               a.inputs[3], d.channels, d.momentum, unbias),
                       what);
  });
}

// ---- Geometry shared by pooling and upsampling ----

// x [N,C,S] (rank 2 or 3 spatial) as a 3-D problem with depth 1 for 2-D.
launch::Geom3 geom_of(const Shape& x, int rank) {
  launch::Geom3 g{};
  g.nc = x[0] * x[1];
  for (int d = 0; d < 3; ++d) {
    g.in[d] = g.out[d] = 1;
    g.k[d] = g.s[d] = 1;
    g.p[d] = 0;
  }
  for (int i = 0; i < rank; ++i) g.in[3 - rank + i] = x[2 + i];
  return g;
}

// The launch geometry of a pool (pool_dims, op_dims.h).
launch::Geom3 pool_geometry(const PoolDims& d) {
  const int rank = static_cast<int>(d.x.size()) - 2;
  launch::Geom3 g = geom_of(d.x, rank);
  for (int i = 0; i < rank; ++i) {
    const int k = 3 - rank + i;
    g.k[k] = d.kernel[i];
    g.s[k] = d.stride[i];
    g.p[k] = d.pad[i];
    g.out[k] = d.y[2 + i];
  }
  return g;
}

KernelOr make_max_pool(const KernelSpec& spec, const CudaKernelContext& ctx, bool backward) {
  LMS_ASSIGN_OR_RETURN(const PoolDims d, pool_dims(spec));
  const launch::Geom3 g = pool_geometry(d);
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    if (!backward) return cuda_status(launch::max_pool_fwd(s, a.inputs[0], g, a.outputs[0]), what);
    return cuda_status(launch::max_pool_bwd(s, a.inputs[0], a.inputs[1], g, a.outputs[0]), what);
  });
}

// avg_pool (x) or avg_pool_bwd (dy, with input_shape).
KernelOr make_avg_pool(const KernelSpec& spec, const CudaKernelContext& ctx, bool backward) {
  LMS_ASSIGN_OR_RETURN(const PoolDims d, pool_dims(spec));
  const launch::Geom3 g = pool_geometry(d);
  const bool include_pad = d.count_include_pad;
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    return cuda_status(backward
                           ? launch::avg_pool_bwd(s, a.inputs[0], g, include_pad, a.outputs[0])
                           : launch::avg_pool_fwd(s, a.inputs[0], g, include_pad, a.outputs[0]),
                       what);
  });
}

KernelOr make_upsample(const KernelSpec& spec, const CudaKernelContext& ctx, bool backward) {
  LMS_ASSIGN_OR_RETURN(const UpsampleDims d, upsample_dims(spec));
  const int rank = static_cast<int>(d.x.size()) - 2;
  launch::Geom3 g = geom_of(d.x, rank);
  for (int i = 0; i < rank; ++i) {
    g.k[3 - rank + i] = d.scale[i];
    g.out[3 - rank + i] = d.y[2 + i];
  }
  const bool linear = d.linear;
  const std::string what = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) {
    if (!backward) {
      return cuda_status(launch::upsample_fwd(s, a.inputs[0], g, linear, a.outputs[0]), what);
    }
    return cuda_status(launch::upsample_bwd(s, a.inputs[0], g, linear, a.outputs[0]), what);
  });
}

}  // namespace

KernelOr create_cuda_spatial_kernel(const KernelSpec& spec, const CudaKernelContext& ctx) {
  const OpKind op = spec.op;
  if (op == OpKind::kInstanceNorm || op == OpKind::kInstanceNormBwd) {
    return make_norm(spec, ctx, true, op == OpKind::kInstanceNormBwd);
  }
  if (op == OpKind::kBatchNorm) return make_batch_norm(spec, ctx);
  if (op == OpKind::kBatchNormBwd) return make_norm(spec, ctx, false, true);
  if (op == OpKind::kBnStatsUpdate) return make_bn_stats_update(spec, ctx);
  if (op == OpKind::kMaxPool || op == OpKind::kMaxPoolBwd)
    return make_max_pool(spec, ctx, op == OpKind::kMaxPoolBwd);
  if (op == OpKind::kAvgPool || op == OpKind::kAvgPoolBwd)
    return make_avg_pool(spec, ctx, op == OpKind::kAvgPoolBwd);
  if (op == OpKind::kUpsample || op == OpKind::kUpsampleBwd)
    return make_upsample(spec, ctx, op == OpKind::kUpsampleBwd);
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cuda
