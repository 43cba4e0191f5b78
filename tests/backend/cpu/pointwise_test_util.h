// Helpers shared by the pointwise / norm / loss / optimizer kernel tests:
// build a KernelSpec, run its kernel on host vectors (with a NaN-poisoned
// workspace of exactly workspace_bytes(), so a kernel that reads scratch it
// did not write, or writes past it, shows up), random inputs with printed
// seeds, error measures and central finite differences in double.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/cpu/kernels/cpu_kernels.h"
#include "backend/kernel.h"

namespace lms::cpu::testing {

using Buffers = std::vector<std::vector<float>>;

inline CpuKernelContext make_context() {
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return CpuKernelContext{engine, dnnl::stream(engine)};
}

inline KernelSpec make_spec(OpKind op, std::vector<Shape> inputs, std::vector<Shape> outputs,
                            Attrs attrs = {}) {
  return KernelSpec{std::string("test/") + op_name(op), op, std::move(attrs), std::move(inputs),
                    std::move(outputs)};
}

// The kernel for spec from create_cpu_kernel (check_spec, then the kernel); an error if null.
inline absl::StatusOr<std::unique_ptr<Kernel>> compile(const KernelSpec& spec,
                                                       const CpuKernelContext& ctx) {
  auto k = create_cpu_kernel(spec, ctx);
  if (k.ok() && *k == nullptr)
    return absl::NotFoundError(std::string("no pointwise kernel for ") + op_name(spec.op));
  return k;
}

// Runs spec on `inputs` (mutated in place by optimizer ops); returns the
// outputs. The workspace is 64-byte aligned and filled with NaN bytes, with
// a guard region after it that must stay untouched.
inline absl::StatusOr<Buffers> run_spec(const KernelSpec& spec, Buffers& inputs,
                                        const CpuKernelContext& ctx) {
  auto k = compile(spec, ctx);
  if (!k.ok()) return k.status();
  const uint64_t ws_bytes = (*k)->workspace_bytes();
  constexpr uint64_t kGuard = 256;
  std::vector<float> ws((ws_bytes + kGuard) / sizeof(float) + 16,
                        std::numeric_limits<float>::quiet_NaN());
  char* base = reinterpret_cast<char*>(ws.data());
  char* aligned = base + (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  std::vector<char> guard_before(aligned + ws_bytes, aligned + ws_bytes + kGuard);
  Buffers outputs;
  KernelArgs args;
  for (auto& in : inputs) args.inputs.push_back(in.data());
  for (const Shape& s : spec.output_shapes) {
    outputs.emplace_back(num_elements(s), std::numeric_limits<float>::quiet_NaN());
  }
  for (auto& out : outputs) args.outputs.push_back(out.data());
  args.workspace = ws_bytes > 0 ? aligned : nullptr;
  absl::Status st = (*k)->run(args);
  if (!st.ok()) return st;
  if (std::memcmp(guard_before.data(), aligned + ws_bytes, kGuard) != 0) {
    return absl::InternalError("kernel wrote past its workspace");
  }
  return outputs;
}

inline std::vector<float> random_vector(std::mt19937& rng, int64_t n, float lo = -1.f,
                                        float hi = 1.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A generator whose seed is printed so a failure can be replayed.
inline std::mt19937 seeded_rng(uint32_t seed, const char* test) {
  std::printf("[ seed     ] %s: %u\n", test, seed);
  return std::mt19937(seed);
}

// max |got - want| / max(max |want|, floor).
inline double max_rel_error(const std::vector<float>& got, const std::vector<double>& want,
                            double floor = 1e-12) {
  double scale = floor, err = 0;
  for (size_t i = 0; i < want.size(); ++i) scale = std::max(scale, std::abs(want[i]));
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  return err / scale;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Central differences of the scalar f at x, step h, for every element.
inline std::vector<double> finite_diff(const std::function<double(const std::vector<double>&)>& f,
                                       std::vector<double> x, double h = 1e-4) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

inline double dot(const std::vector<double>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

inline bool bit_identical(const Buffers& a, const Buffers& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return false;
    if (std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) return false;
  }
  return true;
}

}  // namespace lms::cpu::testing
