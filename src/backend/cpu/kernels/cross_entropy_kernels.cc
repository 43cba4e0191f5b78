// softmax_cross_entropy and softmax_cross_entropy_bwd of docs/ops.md as
// plain loops on the compute thread. The labels are int64 (8 bytes each) in
// a buffer the executor passes as float*, as embedding's ids.
//
// Each row's log-sum-exp is taken around the row's maximum (so exp never
// overflows), its exponentials summed in double in column order, and the
// rows' losses summed in double in row order: the result depends on the
// values alone, not on threads or the CPU.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/kernels/pointwise_common.h"
#include "lms/status.h"

namespace lms::cpu::pointwise {
namespace {

using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

const int64_t* labels_of(const KernelArgs& a) {
  return reinterpret_cast<const int64_t*>(a.inputs[1]);
}

// log Σ_c exp(x[c]) of one row of c logits.
double log_sum_exp(const float* x, int64_t c) {
  float max = x[0];
  for (int64_t j = 1; j < c; ++j) max = std::max(max, x[j]);
  double sum = 0.0;
  for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(x[j]) - max);
  return static_cast<double>(max) + std::log(sum);
}

// loss[] = (1/M) Σ over counted rows of (lse(x[n,:]) - x[n, label]); NaN
// when M = 0 (PyTorch's 0/0).
KernelOr make_cross_entropy(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const CrossEntropyDims d, cross_entropy_dims(spec));
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    const int64_t* labels = labels_of(a);
    LMS_ASSIGN_OR_RETURN(const int64_t rows, count_labelled_rows(spec, labels, d));
    double acc = 0.0;
    for (int64_t n = 0; n < d.n; ++n) {
      if (labels[n] == d.ignore_index) continue;
      const float* x = a.inputs[0] + n * d.c;
      acc += log_sum_exp(x, d.c) - static_cast<double>(x[labels[n]]);
    }
    a.outputs[0][0] = rows == 0 ? std::numeric_limits<float>::quiet_NaN()
                                : static_cast<float>(acc / static_cast<double>(rows));
    return absl::OkStatus();
  });
  return k;
}

// dlogits[n,c] = (softmax(x[n,:])[c] - [c == label]) · dloss / M, zero on
// ignored rows (and everywhere when M = 0, as PyTorch).
KernelOr make_cross_entropy_bwd(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const CrossEntropyDims d, cross_entropy_dims(spec));
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    const int64_t* labels = labels_of(a);
    LMS_ASSIGN_OR_RETURN(const int64_t rows, count_labelled_rows(spec, labels, d));
    const double scale =
        rows == 0 ? 0.0 : static_cast<double>(a.inputs[2][0]) / static_cast<double>(rows);
    for (int64_t n = 0; n < d.n; ++n) {
      const float* x = a.inputs[0] + n * d.c;
      float* g = a.outputs[0] + n * d.c;
      if (labels[n] == d.ignore_index) {
        std::fill(g, g + d.c, 0.0f);
        continue;
      }
      const double lse = log_sum_exp(x, d.c);
      for (int64_t j = 0; j < d.c; ++j) {
        const double p = std::exp(static_cast<double>(x[j]) - lse);
        g[j] = static_cast<float>((p - (j == labels[n] ? 1.0 : 0.0)) * scale);
      }
    }
    return absl::OkStatus();
  });
  return k;
}

}  // namespace

KernelOr create_cross_entropy_kernel(const KernelSpec& spec, const CpuKernelContext& ctx) {
  if (spec.op == OpKind::kSoftmaxCrossEntropy) return make_cross_entropy(spec, ctx);
  if (spec.op == OpKind::kSoftmaxCrossEntropyBwd) return make_cross_entropy_bwd(spec, ctx);
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cpu::pointwise
