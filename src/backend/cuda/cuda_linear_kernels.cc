// linear, linear_bwd_weights and matmul of docs/ops.md for the CUDA device:
// cuBLAS SGEMM (strided-batched for matmul), the bias through cuda_linear.cu.
// cuBLAS is column-major, so a row-major [R,C] buffer is read as its
// transpose [C,R] with leading dimension C, and each product below is
// written for the transposes.
//
// Each kernel owns a cuBLAS handle bound to the compute stream, with no
// workspace (cublasSetWorkspace with 0 bytes), so cuBLAS allocates nothing
// the device allocator does not see, and in the default (non-TF32) math
// mode, so the products are float32 and deterministic (Note [CUDA kernel
// determinism]).
#include <memory>
#include <vector>

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
using Handle = std::shared_ptr<std::remove_pointer_t<cublasHandle_t>>;

absl::StatusOr<Handle> make_handle(cudaStream_t stream) {
  cublasHandle_t raw = nullptr;
  LMS_CUBLAS_RETURN_IF_ERROR(cublasCreate(&raw), "cublasCreate");
  Handle h(raw, [](cublasHandle_t p) { cublasDestroy(p); });
  LMS_CUBLAS_RETURN_IF_ERROR(cublasSetStream(raw, stream), "cublasSetStream");
  LMS_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(raw, nullptr, 0), "cublasSetWorkspace");
  LMS_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(raw, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  return h;
}

// One column-major product C[m,n] = op(A)·op(B) + beta·C.
struct Gemm {
  cublasOperation_t op_a = CUBLAS_OP_N;
  cublasOperation_t op_b = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
};

absl::Status run_gemm(cublasHandle_t h, const Gemm& g, const float* a, const float* b, float beta,
                      float* c, const std::string& label) {
  const float one = 1.0f;
  return cublas_status(
      cublasSgemm_64(h, g.op_a, g.op_b, g.m, g.n, g.k, &one, a, g.lda, b, g.ldb, &beta, c, g.ldc),
      label + ": cublasSgemm");
}

// yᵀ[K,N] = op(w)·xᵀ: w[K,C] row-major is [C,K] column-major (transposed
// back when trans_b); w[C,K] row-major is [K,C] column-major as it is.
KernelOr make_linear(const KernelSpec& spec, const CudaKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(LinearDims d, linear_dims(spec));
  LMS_ASSIGN_OR_RETURN(Handle h, make_handle(ctx.stream));
  Gemm g{d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
         CUBLAS_OP_N,
         d.k,
         d.n,
         d.c,
         d.trans_b ? d.c : d.k,
         d.c,
         d.k};
  const std::string label = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) -> absl::Status {
    float beta = 0.0f;
    if (d.bias) {
      LMS_CUDA_RETURN_IF_ERROR(launch::broadcast_rows(s, a.inputs[2], d.n, d.k, a.outputs[0]),
                               label + ": bias");
      beta = 1.0f;
    }
    return run_gemm(h.get(), g, a.inputs[1], a.inputs[0], beta, a.outputs[0], label);
  });
}

// trans_b: dwᵀ[C,K] = xᵀ[C,N]·dy[N,K]; else dwᵀ[K,C] = dyᵀ[K,N]·x[N,C]
// (column-major views); db[K] = column sums of dy.
KernelOr make_linear_bwd_weights(const KernelSpec& spec, const CudaKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(LinearDims d, linear_dims(spec));
  LMS_ASSIGN_OR_RETURN(Handle h, make_handle(ctx.stream));
  const Gemm g = d.trans_b ? Gemm{CUBLAS_OP_N, CUBLAS_OP_T, d.c, d.k, d.n, d.c, d.k, d.c}
                           : Gemm{CUBLAS_OP_N, CUBLAS_OP_T, d.k, d.c, d.n, d.k, d.c, d.k};
  const std::string label = node_label(spec);
  cudaStream_t s = ctx.stream;
  return make_fn_kernel([=](const KernelArgs& a) -> absl::Status {
    const float* x = a.inputs[0];
    const float* dy = a.inputs[1];
    LMS_RETURN_IF_ERROR(d.trans_b ? run_gemm(h.get(), g, x, dy, 0.0f, a.outputs[0], label)
                                  : run_gemm(h.get(), g, dy, x, 0.0f, a.outputs[0], label));
    if (!d.bias) return absl::OkStatus();
    return cuda_status(launch::column_sum(s, dy, d.n, d.k, a.outputs[1]), label + ": db");
  });
}

// Element strides of an operand's matrices over y's batch dimensions: 0
// along a dimension the operand holds as 1 (broadcast), row-major otherwise.
std::vector<int64_t> batch_strides(const std::vector<int64_t>& batch, int64_t matrix) {
  std::vector<int64_t> strides(batch.size());
  int64_t step = matrix;
  for (size_t i = batch.size(); i-- > 0;) {
    strides[i] = batch[i] == 1 ? 0 : step;
    step *= batch[i];
  }
  return strides;
}

// The offset of matrix `outer` of the batch dimensions but the last.
int64_t outer_offset(int64_t outer, const std::vector<int64_t>& batch,
                     const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (size_t i = batch.size() - 1; i-- > 0;) {
    off += (outer % batch[i]) * strides[i];
    outer /= batch[i];
  }
  return off;
}

// yᵀ[N,M] = op(b)ᵀ·op(a)ᵀ per matrix (column-major views): b[K,N] row-major
// is op(b)ᵀ as it is, b[N,K] (trans_b) transposed back; likewise a. The last
// batch dimension is one strided-batched call (stride 0 for a broadcast
// operand), the others a loop of such calls in a fixed order.
KernelOr make_matmul(const KernelSpec& spec, const CudaKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(MatMulShape d, matmul_dims(spec));
  LMS_ASSIGN_OR_RETURN(Handle h, make_handle(ctx.stream));
  const Gemm g{d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
               d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
               d.n,
               d.m,
               d.k,
               d.trans_b ? d.k : d.n,
               d.trans_a ? d.m : d.k,
               d.n};
  std::vector<int64_t> batch = d.batch, a_batch = d.a_batch, b_batch = d.b_batch;
  if (batch.empty()) batch = a_batch = b_batch = {1};
  const std::vector<int64_t> sa = batch_strides(a_batch, d.m * d.k);
  const std::vector<int64_t> sb = batch_strides(b_batch, d.k * d.n);
  const std::vector<int64_t> sy = batch_strides(batch, d.m * d.n);
  const int64_t inner = batch.back();
  const int64_t outer = d.batch_count() / (d.batch.empty() ? 1 : inner);
  const std::string label = node_label(spec) + ": cublasSgemmStridedBatched";
  return make_fn_kernel([=](const KernelArgs& args) -> absl::Status {
    const float one = 1.0f, zero = 0.0f;
    for (int64_t o = 0; o < outer; ++o) {
      const float* a = args.inputs[0] + outer_offset(o, batch, sa);
      const float* b = args.inputs[1] + outer_offset(o, batch, sb);
      float* y = args.outputs[0] + outer_offset(o, batch, sy);
      LMS_RETURN_IF_ERROR(
          cublas_status(cublasSgemmStridedBatched_64(h.get(), g.op_a, g.op_b, g.m, g.n, g.k, &one,
                                                     b, g.lda, sb.back(), a, g.ldb, sa.back(),
                                                     &zero, y, g.ldc, sy.back(), inner),
                        label));
    }
    return absl::OkStatus();
  });
}

}  // namespace

KernelOr create_cuda_linear_kernel(const KernelSpec& spec, const CudaKernelContext& ctx) {
  if (spec.op == OpKind::kLinear) return make_linear(spec, ctx);
  if (spec.op == OpKind::kLinearBwdWeights) return make_linear_bwd_weights(spec, ctx);
  if (spec.op == OpKind::kMatMul) return make_matmul(spec, ctx);
  return std::unique_ptr<Kernel>();
}

}  // namespace lms::cuda
