#include "backend/cpu/workspace_scale.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "backend/kernel.h"
#include "common/align.h"

namespace lms::cpu {
namespace {

constexpr double kMaxScale = 16;
constexpr uint64_t kPrivateAlignmentBytes = 4096;

class ScaledWorkspaceKernel final : public Kernel {
 public:
  ScaledWorkspaceKernel(std::unique_ptr<Kernel> kernel, double scale)
      : kernel_(std::move(kernel)),
        reported_bytes_(static_cast<uint64_t>(
            std::ceil(scale * static_cast<double>(kernel_->workspace_bytes())))) {}

  uint64_t workspace_bytes() const override { return reported_bytes_; }

  // Runs on the compute stream only, so the private buffer needs no lock.
  absl::Status run(const KernelArgs& args) override {
    const uint64_t real_bytes = kernel_->workspace_bytes();
    if (real_bytes <= reported_bytes_) return kernel_->run(args);
    if (private_ == nullptr) {
      const uint64_t rounded = align_up(real_bytes, kPrivateAlignmentBytes);
      private_.reset(static_cast<std::byte*>(std::aligned_alloc(kPrivateAlignmentBytes, rounded)));
      if (private_ == nullptr) {
        return absl::ResourceExhaustedError(
            absl::StrCat("LMS_CPU_WORKSPACE_SCALE: cannot allocate the private workspace of ",
                         real_bytes, " bytes"));
      }
    }
    KernelArgs moved = args;
    moved.workspace = private_.get();
    return kernel_->run(moved);
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<Kernel> kernel_;
  uint64_t reported_bytes_;
  std::unique_ptr<std::byte, Free> private_;
};

}  // namespace

absl::StatusOr<double> workspace_scale_from_env() {
  const char* text = std::getenv("LMS_CPU_WORKSPACE_SCALE");
  if (text == nullptr || *text == '\0') return 1.0;
  double scale = 0;
  if (!absl::SimpleAtod(text, &scale) || !(scale > 0) || scale > kMaxScale) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LMS_CPU_WORKSPACE_SCALE='", text, "' is not allowed: a factor greater than 0 and at most ",
        kMaxScale, " (a test hook, Note [Workspace scale test hook])"));
  }
  return scale;
}

std::unique_ptr<Kernel> scale_workspace(std::unique_ptr<Kernel> kernel, double scale) {
  if (scale == 1.0 || kernel == nullptr) return kernel;
  return std::make_unique<ScaledWorkspaceKernel>(std::move(kernel), scale);
}

}  // namespace lms::cpu
