// Shared by the CUDA backend tests: the skip rule (no device -> skipped with
// the reason printed) and helpers to create a device.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

namespace lms::cuda::testing {

// Empty when a CUDA device is usable, else why not.
inline std::string no_device_reason() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no CUDA device: cudaGetDeviceCount returned ") + cudaGetErrorName(err) +
           " (" + cudaGetErrorString(err) + ")";
  }
  if (count == 0) return "no CUDA device: cudaGetDeviceCount reports 0 devices";
  return "";
}

}  // namespace lms::cuda::testing

#define LMS_SKIP_WITHOUT_CUDA()                                               \
  do {                                                                        \
    const std::string lms_reason_ = ::lms::cuda::testing::no_device_reason(); \
    if (!lms_reason_.empty()) GTEST_SKIP() << lms_reason_;                    \
  } while (false)
