// lms::make_cuda_device for builds with the CUDA backend (lms/device.h).
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_device.h"
#include "lms/device.h"
#include "lms/status.h"

namespace lms {

bool cuda_backend_built() { return true; }

absl::StatusOr<std::unique_ptr<Device>> make_cuda_device(CudaDeviceOptions options) {
  absl::StatusOr<std::unique_ptr<cuda::CudaDevice>> device = cuda::CudaDevice::create(options);
  if (absl::IsFailedPrecondition(device.status())) {
    // No driver, a driver too old for this toolkit, or no GPU: the library
    // cannot provide a CUDA device on this machine.
    return absl::UnimplementedError(absl::StrCat("make_cuda_device: ", device.status().message(),
                                                 "; use make_cpu_device for the emulated device"));
  }
  LMS_RETURN_IF_ERROR(device.status());
  return std::unique_ptr<Device>(std::move(device).value());
}

}  // namespace lms
