// Sub-allocators of the CUDA device's two BfcAllocators: the device region
// (cudaMalloc) and the pinned host pool (cudaHostAlloc). Each hands out the
// one region its allocator takes up front; both return null on failure (the
// BfcAllocator turns that into ResourceExhausted).
#pragma once

#include <cstdint>

#include "allocator/bfc_allocator.h"

namespace lms::cuda {

// cudaMalloc on `device_ordinal` (256-byte aligned or better, as the BFC
// allocator needs; cudaMalloc guarantees at least 256).
class CudaSubAllocator : public SubAllocator {
 public:
  explicit CudaSubAllocator(int device_ordinal) : device_ordinal_(device_ordinal) {}
  void* alloc(uint64_t bytes) override;
  void free(void* base, uint64_t bytes) override;

 private:
  int device_ordinal_;
};

// cudaHostAlloc(cudaHostAllocPortable): page-locked, usable by every stream
// of every device for truly asynchronous copies.
class PinnedSubAllocator : public SubAllocator {
 public:
  explicit PinnedSubAllocator(int device_ordinal) : device_ordinal_(device_ordinal) {}
  void* alloc(uint64_t bytes) override;
  void free(void* base, uint64_t bytes) override;
  bool pages_locked() const override { return true; }

 private:
  int device_ordinal_;
};

}  // namespace lms::cuda
