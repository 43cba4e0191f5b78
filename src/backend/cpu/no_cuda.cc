// lms::make_cuda_device for builds without the CUDA backend (lms/device.h):
// compiled into the CPU backend only when src/backend/cuda is not built.
#include <memory>

#include "lms/device.h"

namespace lms {

bool cuda_backend_built() { return false; }

absl::StatusOr<std::unique_ptr<Device>> make_cuda_device(CudaDeviceOptions) {
  return absl::UnimplementedError(
      "make_cuda_device: this build of lms has no CUDA backend (nvcc or cuDNN was not found "
      "when it was configured, or it was built with sanitizers); use make_cpu_device for the "
      "emulated device");
}

}  // namespace lms
