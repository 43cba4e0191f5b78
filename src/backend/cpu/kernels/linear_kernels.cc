// linear and linear_bwd_weights of docs/ops.md on oneDNN matmul. A transposed
// operand is the same bytes read through swapped strides, so neither op copies
// a matrix; db is oneDNN's sum reduction over the rows of dy. matmul is the
// same primitive with batch dimensions, a broadcast operand holding 1 there.
#include <cstring>

#include "backend/cpu/kernels/pointwise_common.h"
#include "lms/status.h"

namespace lms::cpu::pointwise {
namespace {

using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;
using dnnl::memory;

// The f32 matrix [rows, cols] of a row-major buffer, or, when `transposed`,
// the transpose of the row-major [cols, rows] buffer.
memory::desc matrix_desc(int64_t rows, int64_t cols, bool transposed) {
  const memory::dims strides = transposed ? memory::dims{1, rows} : memory::dims{cols, 1};
  return memory::desc({rows, cols}, memory::data_type::f32, strides);
}

// y[N,K] = x[N,C] · W + b with W = wᵀ (w[K,C], trans_b) or w (w[C,K]).
KernelOr make_linear(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(LinearDims d, linear_dims(spec));
  const memory::desc x_md = matrix_desc(d.n, d.c, false);
  const memory::desc w_md = matrix_desc(d.c, d.k, d.trans_b);
  const memory::desc y_md = matrix_desc(d.n, d.k, false);
  const memory::desc b_md = d.bias ? matrix_desc(1, d.k, false) : memory::desc();
  dnnl::matmul::desc desc(x_md, w_md, b_md, y_md);
  dnnl::matmul::primitive_desc pd(desc, user_scratchpad_attr(), ctx.engine);
  std::vector<Binding> bindings = {
      {DNNL_ARG_SRC, in(0), x_md}, {DNNL_ARG_WEIGHTS, in(1), w_md}, {DNNL_ARG_DST, out(0), y_md}};
  if (d.bias) bindings.push_back({DNNL_ARG_BIAS, in(2), b_md});
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_primitive(pd, dnnl::matmul(pd), bindings);
  return k;
}

// dw = dyᵀ · x ([K,C], trans_b) or xᵀ · dy ([C,K]); db[K] = Σ_n dy[n,:].
KernelOr make_linear_bwd_weights(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(LinearDims d, linear_dims(spec));
  const memory::desc x_md = matrix_desc(d.n, d.c, false);
  const memory::desc dy_md = matrix_desc(d.n, d.k, false);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  const dnnl::primitive_attr attr = user_scratchpad_attr();
  // The left factor is the transpose of a row-major [N, rows] buffer.
  const int64_t rows = d.trans_b ? d.k : d.c;
  const int64_t cols = d.trans_b ? d.c : d.k;
  const memory::desc lhs_md = matrix_desc(rows, d.n, true);
  const memory::desc rhs_md = d.trans_b ? x_md : dy_md;
  const memory::desc dw_md = matrix_desc(rows, cols, false);
  dnnl::matmul::desc mm(lhs_md, rhs_md, dw_md);
  dnnl::matmul::primitive_desc mm_pd(mm, attr, ctx.engine);
  k->add_primitive(mm_pd, dnnl::matmul(mm_pd),
                   {{DNNL_ARG_SRC, in(d.trans_b ? 1 : 0), lhs_md},
                    {DNNL_ARG_WEIGHTS, in(d.trans_b ? 0 : 1), rhs_md},
                    {DNNL_ARG_DST, out(0), dw_md}});
  if (d.bias && d.n == 1) {
    // oneDNN refuses a reduction that reduces nothing: db is dy's one row.
    const int64_t k_out = d.k;
    k->add_loop([k_out](const KernelArgs& a) {
      std::memcpy(a.outputs[1], a.inputs[1], static_cast<size_t>(k_out) * sizeof(float));
      return absl::OkStatus();
    });
  } else if (d.bias) {
    const memory::desc db_md = matrix_desc(1, d.k, false);
    dnnl::reduction::desc sum(dnnl::algorithm::reduction_sum, dy_md, db_md, 0.f, 0.f);
    dnnl::reduction::primitive_desc sum_pd(sum, attr, ctx.engine);
    k->add_primitive(sum_pd, dnnl::reduction(sum_pd),
                     {{DNNL_ARG_SRC, in(1), dy_md}, {DNNL_ARG_DST, out(1), db_md}});
  }
  return k;
}

// An operand of matmul, batch dims (padded to y's) + [rows, cols], stored
// row-major with its last two dimensions swapped when `transposed`.
memory::desc batched_desc(const std::vector<int64_t>& batch, int64_t rows, int64_t cols,
                          bool transposed) {
  memory::dims dims(batch.begin(), batch.end());
  dims.push_back(rows);
  dims.push_back(cols);
  memory::dims strides(dims.size());
  strides[dims.size() - 2] = transposed ? 1 : cols;
  strides[dims.size() - 1] = transposed ? rows : 1;
  int64_t step = rows * cols;
  for (size_t i = batch.size(); i-- > 0;) {
    strides[i] = step;
    step *= batch[i];
  }
  return memory::desc(dims, memory::data_type::f32, strides);
}

// y[batch..., M, N] = op(a) · op(b); a batch dimension of 1 in a or b is
// broadcast by oneDNN itself.
KernelOr make_matmul(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(MatMulShape d, matmul_dims(spec));
  const memory::desc a_md = batched_desc(d.a_batch, d.m, d.k, d.trans_a);
  const memory::desc b_md = batched_desc(d.b_batch, d.k, d.n, d.trans_b);
  const memory::desc y_md = batched_desc(d.batch, d.m, d.n, false);
  dnnl::matmul::desc desc(a_md, b_md, y_md);
  dnnl::matmul::primitive_desc pd(desc, user_scratchpad_attr(), ctx.engine);
  auto k = std::make_unique<StepKernel>(spec, ctx);
  k->add_primitive(
      pd, dnnl::matmul(pd),
      {{DNNL_ARG_SRC, in(0), a_md}, {DNNL_ARG_WEIGHTS, in(1), b_md}, {DNNL_ARG_DST, out(0), y_md}});
  return k;
}

}  // namespace

KernelOr create_linear_kernel(const KernelSpec& spec, const CpuKernelContext& ctx) {
  if (spec.op == OpKind::kLinear) return make_linear(spec, ctx);
  if (spec.op == OpKind::kLinearBwdWeights) return make_linear_bwd_weights(spec, ctx);
  if (spec.op == OpKind::kMatMul) return make_matmul(spec, ctx);
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cpu::pointwise
