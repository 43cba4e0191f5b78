// Helpers shared by the spatial kernel tests: a oneDNN context, guarded
// buffers (canaries after the end catch writes past a tensor or past the
// reported workspace) and a runner.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/kernels/cpu_kernels.h"
#include "backend/cpu/kernels/spatial_kernels.h"

namespace lms::cpu::testing {

inline CpuKernelContext make_context() {
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return CpuKernelContext{engine, dnnl::stream(engine)};
}

// A float buffer followed by a canary region that must stay untouched.
class GuardedBuffer {
 public:
  static constexpr size_t kCanaryFloats = 64;
  static constexpr uint32_t kCanaryBits = 0x7fc0dead;  // a NaN payload

  explicit GuardedBuffer(size_t floats, float fill = NAN) : size_(floats) {
    data_.assign(floats + kCanaryFloats, fill);
    for (size_t i = floats; i < data_.size(); ++i) std::memcpy(&data_[i], &kCanaryBits, 4);
  }
  explicit GuardedBuffer(const std::vector<float>& values) : GuardedBuffer(values.size()) {
    std::copy(values.begin(), values.end(), data_.begin());
  }
  float* data() { return size_ == 0 && data_.empty() ? nullptr : data_.data(); }
  std::vector<float> values() const { return {data_.begin(), data_.begin() + size_}; }
  bool canary_intact() const {
    for (size_t i = size_; i < data_.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &data_[i], 4);
      if (bits != kCanaryBits) return false;
    }
    return true;
  }

 private:
  size_t size_;
  std::vector<float> data_;
};

inline std::vector<float> random_values(size_t n, std::mt19937& rng, float lo = -1.f,
                                        float hi = 1.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::mt19937 seeded_rng(uint32_t seed) {
  std::printf("random seed: %u\n", seed);
  return std::mt19937(seed);
}

// Compiles `spec`, runs it once on `inputs` with NaN-filled outputs and
// workspace (so nothing may rely on zeroed memory), checks every canary, and
// returns the outputs.
inline std::vector<std::vector<float>> run_spec(const KernelSpec& spec,
                                                const std::vector<std::vector<float>>& inputs,
                                                const SpatialKernelOptions& options = {}) {
  static CpuKernelContext ctx = make_context();
  auto kernel = create_spatial_kernel(spec, ctx, options);
  EXPECT_TRUE(kernel.ok()) << kernel.status();
  if (!kernel.ok() || *kernel == nullptr) return {};
  std::vector<GuardedBuffer> in, out;
  for (const auto& v : inputs) in.emplace_back(v);
  for (const Shape& s : spec.output_shapes) out.emplace_back(num_elements(s));
  GuardedBuffer ws(((*kernel)->workspace_bytes() + 3) / 4);
  KernelArgs args;
  for (auto& b : in) args.inputs.push_back(b.data());
  for (auto& b : out) args.outputs.push_back(b.data());
  args.workspace = (*kernel)->workspace_bytes() > 0 ? ws.data() : nullptr;
  absl::Status st = (*kernel)->run(args);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(ws.canary_intact()) << spec.name << " wrote past its workspace";
  std::vector<std::vector<float>> result;
  for (auto& b : in) EXPECT_TRUE(b.canary_intact()) << spec.name << " wrote past an input";
  for (auto& b : out) {
    EXPECT_TRUE(b.canary_intact()) << spec.name << " wrote past an output";
    result.push_back(b.values());
  }
  return result;
}

// |got - ref| <= rel * scale + abs at every element, where scale[i] is the
// sum of absolute values of the terms behind ref[i] (float rounding grows with
// it). Reports the worst element.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& ref,
                         const std::vector<double>& scale, double rel, const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(got[i] - ref[i]);
    double excess = std::isnan(err) ? 1e30 : err - rel * scale[i] - 1e-6;
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  EXPECT_LE(worst_excess, 0.0) << what << ": element " << worst << " got " << got[worst] << " want "
                               << ref[worst] << " (bound " << rel << " x " << scale[worst] << ")";
}

}  // namespace lms::cpu::testing
