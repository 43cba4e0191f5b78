#include "backend/cuda/cuda_memory.h"

#include <cuda_runtime_api.h>

namespace lms::cuda {

void* CudaSubAllocator::alloc(uint64_t bytes) {
  if (cudaSetDevice(device_ordinal_) != cudaSuccess) return nullptr;
  void* base = nullptr;
  if (cudaMalloc(&base, bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the (non-sticky) allocation error
    return nullptr;
  }
  return base;
}

void CudaSubAllocator::free(void* base, uint64_t /*bytes*/) {
  if (base == nullptr) return;
  (void)cudaSetDevice(device_ordinal_);
  (void)cudaFree(base);
}

void* PinnedSubAllocator::alloc(uint64_t bytes) {
  if (cudaSetDevice(device_ordinal_) != cudaSuccess) return nullptr;
  void* base = nullptr;
  if (cudaHostAlloc(&base, bytes, cudaHostAllocPortable) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return base;
}

void PinnedSubAllocator::free(void* base, uint64_t /*bytes*/) {
  if (base == nullptr) return;
  (void)cudaFreeHost(base);
}

}  // namespace lms::cuda
