// Achieved memory bandwidth of the CUDA backend's grouped reductions (norm
// statistics, norm backward sums, channel sums, soft Dice sums;
// cuda_launch.h, Note [Grouped reduction plan]) on 3-D and 2-D activation
// shapes, against the device's peak.
//
//   build/bench/cuda_reduce_bench
//
// Each reduction runs kWarmupRuns times, then kTimedRuns times between CUDA
// events; the median time is reported with bytes read / time. Peak bandwidth
// is 2 (double data rate) * memory clock * bus width, from
// cudaDevAttrMemoryClockRate and cudaDevAttrGlobalMemoryBusWidth (CUDA 13
// dropped cudaDeviceProp::memoryClockRate; the attributes remain). Without a
// usable device it prints why and exits 0.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/reduce_plan.h"

namespace lms::cuda {
namespace {

constexpr int kWarmupRuns = 3;
constexpr int kTimedRuns = 21;

// Prints `what` and the error when `err` is not cudaSuccess.
bool failed(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return false;
  std::fprintf(stderr, "cuda_reduce_bench: %s: %s (%s)\n", what, cudaGetErrorName(err),
               cudaGetErrorString(err));
  return true;
}

// count T's of device memory in *p.
template <class T>
bool allocated(T** p, int64_t count) {
  return !failed(cudaMalloc(reinterpret_cast<void**>(p), static_cast<size_t>(count) * sizeof(T)),
                 "cudaMalloc");
}

// Peak DRAM bandwidth in bytes/s, or 0 when the attributes are unavailable.
double peak_bytes_per_s(int device) {
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0.0;
  }
  return 2.0 * clock_khz * 1e3 * (bus_bits / 8.0);
}

// Median of kTimedRuns runs of `launch` in milliseconds, or a negative value
// on a CUDA error.
float median_ms(cudaStream_t stream, const std::function<cudaError_t()>& launch) {
  cudaEvent_t start, stop;
  if (failed(cudaEventCreate(&start), "cudaEventCreate") ||
      failed(cudaEventCreate(&stop), "cudaEventCreate")) {
    return -1;
  }
  std::vector<float> times_ms;
  for (int i = 0; i < kWarmupRuns + kTimedRuns; ++i) {
    float ms = 0;
    if (failed(cudaEventRecord(start, stream), "cudaEventRecord") || failed(launch(), "launch") ||
        failed(cudaEventRecord(stop, stream), "cudaEventRecord") ||
        failed(cudaEventSynchronize(stop), "run") ||
        failed(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime")) {
      return -1;
    }
    if (i >= kWarmupRuns) times_ms.push_back(ms);
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  std::sort(times_ms.begin(), times_ms.end());
  return times_ms[times_ms.size() / 2];
}

struct Reduction {
  std::string name;
  int64_t nv, cv, s;   // the [Nv, Cv, S] view it reduces
  int64_t bytes_read;  // float inputs read once
  std::function<cudaError_t()> launch;
};

// Device buffers of one shape [N, C, ...]: two float tensors x and y, four
// doubles per (n, c) (mean, var, sum_dy, sum_dyxmu; or the Dice sums), the
// partials of the largest plan, and C floats of channel sums.
struct Buffers {
  float *x = nullptr, *y = nullptr;
  double *stats = nullptr, *scratch = nullptr;
  float* out = nullptr;
  void release() {
    for (void* p : std::initializer_list<void*>{x, y, stats, scratch, out}) (void)cudaFree(p);
  }
};

std::vector<Reduction> reductions_of(cudaStream_t st, const std::vector<int64_t>& shape,
                                     const Buffers& b) {
  const int64_t n = shape[0], c = shape[1];
  int64_t s = 1;
  for (size_t i = 2; i < shape.size(); ++i) s *= shape[i];
  const int64_t bytes = n * c * s * int64_t{sizeof(float)};
  const launch::NormView batch{n, c, s, c, 1e-5}, instance{1, n * c, s, c, 1e-5};
  double* mean = b.stats;
  double* var = mean + n * c;
  double* sum_dy = var + n * c;
  double* sum_dyxmu = sum_dy + n * c;
  return {
      {"norm_stats (batch)", n, c, s, bytes,
       [=] { return launch::norm_stats(st, b.x, batch, b.scratch, mean, var); }},
      {"norm_stats (instance)", 1, n * c, s, bytes,
       [=] { return launch::norm_stats(st, b.x, instance, b.scratch, mean, var); }},
      {"norm_bwd_sums (batch)", n, c, s, 2 * bytes,
       [=] {
         return launch::norm_bwd_sums(st, b.x, b.y, mean, batch, b.scratch, sum_dy, sum_dyxmu);
       }},
      {"channel_sum", n, c, s, bytes,
       [=] { return launch::channel_sum(st, b.x, n, c, s, b.scratch, b.out); }},
      {"dice_sums", 1, n * c, s, 2 * bytes,
       [=] { return launch::dice_sums(st, b.x, b.y, n * c, s, b.scratch, b.stats); }},
  };
}

std::string text_of(const std::vector<int64_t>& v) {
  std::string t = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) t.push_back(',');
    t.append(std::to_string(v[i]));
  }
  t.push_back(']');
  return t;
}

// Times every reduction on one shape; false on a CUDA error.
bool bench_shape(cudaStream_t st, const std::vector<int64_t>& shape, double peak) {
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  const int64_t n = shape[0], c = shape[1], groups = n * c, s = elements / groups;
  // Batch views take 2 values per block at most, instance and Dice views 3.
  const uint64_t scratch_bytes = std::max(partial_bytes(plan_group_reduce(n, c, s), 2),
                                          partial_bytes(plan_group_reduce(1, groups, s), 3));
  Buffers b;
  bool ok = allocated(&b.x, elements) && allocated(&b.y, elements) &&
            allocated(&b.stats, 4 * groups) && allocated(&b.out, c) &&
            allocated(&b.scratch, static_cast<int64_t>(scratch_bytes / sizeof(double))) &&
            !failed(launch::fill(st, b.x, elements, 0.5f), "fill") &&
            !failed(launch::fill(st, b.y, elements, 0.25f), "fill");
  for (const Reduction& r : ok ? reductions_of(st, shape, b) : std::vector<Reduction>{}) {
    const GroupReducePlan p = plan_group_reduce(r.nv, r.cv, r.s);
    const float ms = median_ms(st, r.launch);
    if (ms < 0) {
      ok = false;
      break;
    }
    const double bytes_per_s = r.bytes_read / (ms * 1e-3);
    std::printf("%-18s %-22s %-24s %4lld chunks/group %5lld blocks %9.3f ms %8.1f GB/s",
                text_of(shape).c_str(), r.name.c_str(), text_of({r.nv, r.cv, r.s}).c_str(),
                static_cast<long long>(p.chunks), static_cast<long long>(p.blocks()), ms,
                bytes_per_s / 1e9);
    if (peak > 0) std::printf(" %5.1f%% of peak", 100.0 * bytes_per_s / peak);
    std::printf("\n");
  }
  b.release();
  return ok;
}

int run() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf(
        "cuda_reduce_bench: no usable CUDA device: cudaGetDeviceCount returned %s (%s), "
        "%d devices; nothing timed\n",
        cudaGetErrorName(err), cudaGetErrorString(err), count);
    return 0;
  }
  cudaDeviceProp prop{};
  if (failed(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties")) return 1;
  const double peak = peak_bytes_per_s(0);
  std::printf("device 0: %s, %d SMs, peak DRAM bandwidth ", prop.name, prop.multiProcessorCount);
  if (peak > 0) {
    std::printf("%.1f GB/s (memory clock x bus width)\n", peak / 1e9);
  } else {
    std::printf("unavailable (cudaDevAttrMemoryClockRate / GlobalMemoryBusWidth); achieved only\n");
  }
  std::printf("median of %d runs after %d warm-up runs; GB/s = float bytes read / time\n",
              kTimedRuns, kWarmupRuns);
  cudaStream_t st;
  if (failed(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate")) return 1;
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 32, 128, 128, 128}, {2, 64, 64, 64, 64}, {64, 64, 48, 48}, {2, 16, 24, 24, 24}};
  bool ok = true;
  for (const auto& shape : shapes) ok = ok && bench_shape(st, shape, peak);
  (void)cudaStreamDestroy(st);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace lms::cuda

int main() { return lms::cuda::run(); }
