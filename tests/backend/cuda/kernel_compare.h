// Shared by the CUDA kernel tests: one KernelSpec run on a device with given
// host inputs (random, from a printed seed), its outputs and mutated inputs
// read back, and the CUDA result compared with the CPU device's within a
// float tolerance. The fixture skips without a usable CUDA device
// (cuda_test_util.h).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_device.h"
#include "backend/cuda/cuda_device.h"
#include "backend/kernel.h"
#include "cuda_test_util.h"
#include "lms/status.h"

namespace lms::cuda::testing {

using Floats = std::vector<float>;

struct Case {
  std::string op;
  std::vector<Shape> inputs;
  std::vector<Shape> outputs;
  Attrs attrs;
  // Per-input value range [lo, hi]; default [-1, 1]. Scalars like the Adam
  // step need fixed values: lo == hi.
  std::vector<std::pair<float, float>> ranges = {};
};

struct Result {
  std::vector<Floats> outputs;
  std::vector<Floats> inputs_after;  // for ops that mutate inputs
  // Device addresses of the inputs, outputs and workspace, in that order.
  std::vector<const void*> addresses;
};

inline std::vector<Floats> make_inputs(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Floats> in;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    auto [lo, hi] = i < c.ranges.size() ? c.ranges[i] : std::pair<float, float>(-1.f, 1.f);
    std::uniform_real_distribution<float> dist(lo, hi);
    Floats v(static_cast<size_t>(num_elements(c.inputs[i])));
    for (float& x : v) x = lo == hi ? lo : dist(rng);
    in.push_back(std::move(v));
  }
  return in;
}

// Compiles and runs `c` once on `dev` with inputs `in`. With pad_bytes > 0 a
// block of that size is allocated before every buffer (and kept until the
// end), so each input, output and the workspace lies at another offset of
// the device region than in a run without padding.
inline absl::StatusOr<Result> run_on(Device& dev, const Case& c, const std::vector<Floats>& in,
                                     uint64_t pad_bytes = 0) {
  // Case names its op as docs/ops.md does (test tables read like the catalog).
  const std::optional<OpKind> op = parse_op_kind(c.op);
  if (!op) return absl::InvalidArgumentError("unknown op " + c.op);
  KernelSpec spec{{.name = c.op + "_node",
                   .op = *op,
                   .attrs = c.attrs,
                   .input_shapes = c.inputs,
                   .output_shapes = c.outputs}};
  LMS_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, dev.compile(spec));
  std::vector<void*> owned;
  auto allocate = [&](uint64_t bytes) -> absl::StatusOr<void*> {
    if (pad_bytes > 0) {
      LMS_ASSIGN_OR_RETURN(void* pad, dev.allocate(pad_bytes));
      owned.push_back(pad);
    }
    LMS_ASSIGN_OR_RETURN(void* p, dev.allocate(bytes));
    owned.push_back(p);
    return p;
  };
  KernelArgs args;
  Result r;
  for (size_t i = 0; i < in.size(); ++i) {
    LMS_ASSIGN_OR_RETURN(void* p, allocate(in[i].size() * sizeof(float)));
    LMS_RETURN_IF_ERROR(dev.upload(p, in[i].data(), in[i].size() * sizeof(float)));
    args.inputs.push_back(static_cast<float*>(p));
    r.addresses.push_back(p);
  }
  for (const Shape& s : c.outputs) {
    LMS_ASSIGN_OR_RETURN(void* p, allocate(shape_bytes(s)));
    args.outputs.push_back(static_cast<float*>(p));
    r.addresses.push_back(p);
  }
  if (kernel->workspace_bytes() > 0) {
    LMS_ASSIGN_OR_RETURN(args.workspace, allocate(kernel->workspace_bytes()));
    r.addresses.push_back(args.workspace);
  }
  dev.launch(*kernel, args, spec.name, op_name(spec.op));
  LMS_RETURN_IF_ERROR(dev.synchronize());
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    r.outputs.emplace_back(static_cast<size_t>(num_elements(c.outputs[i])));
    LMS_RETURN_IF_ERROR(dev.download(r.outputs.back().data(), args.outputs[i],
                                     r.outputs.back().size() * sizeof(float)));
  }
  for (size_t i = 0; i < in.size(); ++i) {
    r.inputs_after.emplace_back(in[i].size());
    LMS_RETURN_IF_ERROR(
        dev.download(r.inputs_after.back().data(), args.inputs[i], in[i].size() * sizeof(float)));
  }
  for (void* p : owned) dev.deallocate(p);
  return r;
}

// |cuda - cpu| <= abs + rel * |cpu|, element by element.
struct Tolerance {
  float abs = 2e-4f;
  float rel = 2e-3f;
};

inline void expect_close(const Floats& got, const Floats& want, const std::string& what,
                         Tolerance tol = {}) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const float limit = tol.abs + tol.rel * std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= limit)) {
      ++bad;
      ADD_FAILURE() << what << "[" << i << "]: cuda " << got[i] << " vs cpu " << want[i]
                    << " (tolerance " << limit << ")";
    }
  }
}

// A CUDA device and a CPU device of 256 MiB each; skips without a usable
// CUDA device (or fails under LMS_REQUIRE_CUDA=1).
class CpuReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LMS_SKIP_WITHOUT_CUDA();
    auto gpu = CudaDevice::create({.capacity_bytes = 256 << 20, .host_pool_bytes = 16 << 20});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
    auto cpu = cpu::CpuDevice::create({.capacity_bytes = 256 << 20, .host_pool_bytes = 16 << 20});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = std::move(*cpu);
  }

  // Runs `c` on both devices with the same random inputs and compares every
  // output and every input after the run (ops that mutate inputs).
  void compare(const Case& c, uint32_t seed = 1234, Tolerance tol = {}) {
    std::printf("op %s, seed %u\n", c.op.c_str(), seed);
    const std::vector<Floats> in = make_inputs(c, seed);
    auto want = run_on(*cpu_, c, in);
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = run_on(*gpu_, c, in);
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < c.outputs.size(); ++i)
      expect_close(got->outputs[i], want->outputs[i], c.op + " output " + std::to_string(i), tol);
    for (size_t i = 0; i < in.size(); ++i)
      expect_close(got->inputs_after[i], want->inputs_after[i],
                   c.op + " input " + std::to_string(i), tol);
  }

  std::unique_ptr<CudaDevice> gpu_;
  std::unique_ptr<cpu::CpuDevice> cpu_;
};

}  // namespace lms::cuda::testing
