// A Kernel whose run() is a function that enqueues work on the compute
// stream: the shape of every CUDA kernel but the convolutions. The function
// returns the enqueue-time Status (cuda_status / cudnn_status of its calls).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "backend/cuda/cuda_status.h"
#include "backend/kernel.h"

namespace lms::cuda {

class FnKernel final : public Kernel {
 public:
  using Fn = std::function<absl::Status(const KernelArgs&)>;
  explicit FnKernel(Fn fn, uint64_t workspace_bytes = 0)
      : fn_(std::move(fn)), workspace_bytes_(workspace_bytes) {}
  uint64_t workspace_bytes() const override { return workspace_bytes_; }
  absl::Status run(const KernelArgs& args) override { return fn_(args); }

 private:
  Fn fn_;
  uint64_t workspace_bytes_;
};

inline std::unique_ptr<Kernel> make_fn_kernel(FnKernel::Fn fn, uint64_t workspace_bytes = 0) {
  return std::make_unique<FnKernel>(std::move(fn), workspace_bytes);
}

// "node '<name>' (op <op>)", the prefix of every run-time error.
inline std::string node_label(const KernelSpec& spec) {
  return "node '" + spec.name + "' (op " + std::string(op_name(spec.op)) + ")";
}

// A value of device memory copied back once the compute stream `s` has
// reached it: the host waits for the stream here. The kernels that check
// their int64 inputs at run time (embedding's ids, cross-entropy's labels)
// read their bad-position flag this way, then the bad value.
template <typename T>
absl::StatusOr<T> read_back(cudaStream_t s, const T* device_value, const std::string& what) {
  T value{};
  LMS_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&value, device_value, sizeof(T), cudaMemcpyDeviceToHost, s),
      what + ": cudaMemcpyAsync");
  LMS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), what + ": cudaStreamSynchronize");
  return value;
}

}  // namespace lms::cuda
