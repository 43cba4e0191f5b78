// CUDA runtime, cuDNN and cuBLAS errors as absl::Status, one small header for the
// backend. Every call into those libraries goes through these, so
// no error code is dropped and every message names what failed.
//
//   LMS_RETURN_IF_ERROR(cuda_status(cudaMalloc(&p, n), "cudaMalloc of the device region"));
//   LMS_CUDNN_RETURN_IF_ERROR(cudnnCreate(&handle), "cudnnCreate");
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "lms/status.h"

namespace lms::cuda {

// cudaErrorMemoryAllocation becomes ResourceExhausted, cudaErrorNoDevice and
// cudaErrorInsufficientDriver FailedPrecondition, anything else Internal.
// The message is "<what>: <cudaGetErrorName> (<cudaGetErrorString>)".
inline absl::Status cuda_status(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  std::string msg(what);
  msg += ": ";
  msg += cudaGetErrorName(err);
  msg += " (";
  msg += cudaGetErrorString(err);
  msg += ")";
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

// The CUDNN_STATUS_NOT_SUPPORTED* category (3000..3999 in cuDNN 9) becomes
// Unimplemented, anything else Internal.
inline absl::Status cudnn_status(cudnnStatus_t st, std::string_view what) {
  if (st == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  std::string msg(what);
  msg += ": ";
  msg += cudnnGetErrorString(st);
  const int code = static_cast<int>(st);
  if (code >= 3000 && code < 4000) return absl::UnimplementedError(msg);
  return absl::InternalError(msg);
}

// CUBLAS_STATUS_NOT_SUPPORTED becomes Unimplemented, CUBLAS_STATUS_ALLOC_FAILED
// ResourceExhausted, anything else Internal.
inline absl::Status cublas_status(cublasStatus_t st, std::string_view what) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string msg(what);
  msg += ": ";
  msg += cublasGetStatusName(st);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return absl::UnimplementedError(msg);
  if (st == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

}  // namespace lms::cuda

#define LMS_CUDA_RETURN_IF_ERROR(expr, what) \
  LMS_RETURN_IF_ERROR(::lms::cuda::cuda_status((expr), (what)))
#define LMS_CUDNN_RETURN_IF_ERROR(expr, what) \
  LMS_RETURN_IF_ERROR(::lms::cuda::cudnn_status((expr), (what)))
#define LMS_CUBLAS_RETURN_IF_ERROR(expr, what) \
  LMS_RETURN_IF_ERROR(::lms::cuda::cublas_status((expr), (what)))
