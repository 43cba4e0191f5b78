// embedding and embedding_bwd of docs/ops.md as plain loops. The ids are
// int64 (8 bytes each) in a buffer the executor passes as float*.
#include <algorithm>
#include <cstring>

#include "backend/cpu/kernels/pointwise_common.h"
#include "lms/status.h"

namespace lms::cpu::pointwise {
namespace {

using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

const int64_t* ids_of(const KernelArgs& a) { return reinterpret_cast<const int64_t*>(a.inputs[0]); }

// The ids are read at run time: every one in [0, rows), else the error
// naming the first that is not, its position and the range.
absl::Status check_ids(const KernelSpec& spec, const int64_t* ids, int64_t n, int64_t rows) {
  for (int64_t p = 0; p < n; ++p) {
    if (ids[p] < 0 || ids[p] >= rows) return bad_embedding_id(spec, p, ids[p], rows);
  }
  return absl::OkStatus();
}

// y[p, :] = table[ids[p], :]; every id is checked before anything is
// written.
KernelOr make_embedding(const KernelSpec& spec, const CpuKernelContext& ctx) {
  const int64_t rows = spec.input_shapes[1][0], dim = spec.input_shapes[1][1];
  const int64_t n = num_elements(spec.input_shapes[0]);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    const int64_t* ids = ids_of(a);
    LMS_RETURN_IF_ERROR(check_ids(spec, ids, n, rows));
    for (int64_t p = 0; p < n; ++p) {
      std::memcpy(a.outputs[0] + p * dim, a.inputs[1] + ids[p] * dim,
                  static_cast<size_t>(dim) * sizeof(float));
    }
    return absl::OkStatus();
  });
  return k;
}

// dtable[v, :] = sum of dy[p, :] over the positions p with ids[p] = v, in
// increasing p (so the result does not depend on threads); zero rows for
// ids that do not occur. Every id is checked before anything is written.
KernelOr make_embedding_bwd(const KernelSpec& spec, const CpuKernelContext& ctx) {
  const Shape& table = spec.output_shapes[0];  // weight_shape, [V,D] (check_spec)
  const int64_t rows = table[0], dim = table[1];
  const int64_t n = num_elements(spec.input_shapes[0]);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_loop([=](const KernelArgs& a) {
    const int64_t* ids = ids_of(a);
    LMS_RETURN_IF_ERROR(check_ids(spec, ids, n, rows));
    float* dtable = a.outputs[0];
    std::fill(dtable, dtable + rows * dim, 0.0f);
    for (int64_t p = 0; p < n; ++p) {
      const float* dy = a.inputs[1] + p * dim;
      float* row = dtable + ids[p] * dim;
      for (int64_t d = 0; d < dim; ++d) row[d] += dy[d];
    }
    return absl::OkStatus();
  });
  return k;
}

}  // namespace

KernelOr create_embedding_kernel(const KernelSpec& spec, const CpuKernelContext& ctx) {
  if (spec.op == OpKind::kEmbedding) return make_embedding(spec, ctx);
  if (spec.op == OpKind::kEmbeddingBwd) return make_embedding_bwd(spec, ctx);
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cpu::pointwise
