// Shared by the CUDA backend tests: the skip rule (no usable device ->
// skipped with the exact reason printed) and helpers to create a device.
// With LMS_REQUIRE_CUDA=1 in the environment a skip is a failure instead, so
// a GPU machine with, say, a driver too old for CUDA 13 cannot pass green
// with no GPU coverage.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "absl/status/status.h"

namespace lms::cuda::testing {

// "major.minor" of a CUDA version number (12080 -> "12.8").
inline std::string cuda_version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// Empty when a CUDA device is usable, else why not: no device, a driver too
// old for this runtime (with both versions), or the runtime's error.
inline std::string no_device_reason() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err == cudaErrorInsufficientDriver) {
      int driver = 0, runtime = 0;
      (void)cudaDriverGetVersion(&driver);
      (void)cudaRuntimeGetVersion(&runtime);
      if (driver == 0) {
        return "no CUDA driver installed (cudaGetDeviceCount: cudaErrorInsufficientDriver, "
               "driver version 0; this build's runtime is CUDA " +
               cuda_version_text(runtime) + ")";
      }
      return "driver too old: the driver supports CUDA " + cuda_version_text(driver) +
             ", this build's runtime is CUDA " + cuda_version_text(runtime) +
             " (CUDA 13 needs driver R580 or newer)";
    }
    if (err == cudaErrorNoDevice) return "no CUDA device (cudaErrorNoDevice)";
    return std::string("no usable CUDA device: cudaGetDeviceCount returned ") +
           cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  }
  if (count == 0) return "no CUDA device: cudaGetDeviceCount reports 0 devices";
  return "";
}

// True when LMS_REQUIRE_CUDA is set to 1: every skip becomes a failure.
inline bool cuda_required() {
  const char* v = std::getenv("LMS_REQUIRE_CUDA");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace lms::cuda::testing

// Skips the test with `reason` (a std::string; nothing happens when it is
// empty), or fails it under LMS_REQUIRE_CUDA=1; either returns from the
// calling function, so call it in the test body or check IsSkipped() after.
#define LMS_SKIP_OR_FAIL(reason)                                  \
  do {                                                            \
    const std::string lms_reason_ = (reason);                     \
    if (!lms_reason_.empty()) {                                   \
      if (::lms::cuda::testing::cuda_required()) {                \
        GTEST_FAIL() << "LMS_REQUIRE_CUDA=1 but " << lms_reason_; \
      }                                                           \
      GTEST_SKIP() << lms_reason_;                                \
    }                                                             \
  } while (false)

// Skips the test with the reason, or fails it under LMS_REQUIRE_CUDA=1.
#define LMS_SKIP_WITHOUT_CUDA() LMS_SKIP_OR_FAIL(::lms::cuda::testing::no_device_reason())

// Skips the test when `status` (of creating a device or allocating on it) is
// out of memory, naming what was asked for; fails instead under
// LMS_REQUIRE_CUDA=1. Other errors are left to the test's assertions.
#define LMS_SKIP_IF_OUT_OF_MEMORY(status)                                     \
  do {                                                                        \
    const ::absl::Status lms_oom_ = (status);                                 \
    if (::absl::IsResourceExhausted(lms_oom_)) {                              \
      if (::lms::cuda::testing::cuda_required()) {                            \
        GTEST_FAIL() << "LMS_REQUIRE_CUDA=1 but out of memory: " << lms_oom_; \
      }                                                                       \
      GTEST_SKIP() << "out of memory: " << lms_oom_;                          \
    }                                                                         \
  } while (false)
