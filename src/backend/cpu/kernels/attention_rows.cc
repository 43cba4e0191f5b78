#include "backend/cpu/kernels/attention_rows.h"

#include <algorithm>
#include <limits>

// Sanitizer runtimes resolve ifuncs late; they get the baseline code only.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define LMS_ROW_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LMS_ROW_CLONES
#endif

// The eight-lane vectors are passed between always-inline helpers only.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace lms::cpu::pointwise::attention_rows {
namespace {

constexpr int kLanes = 8;

typedef float v8 __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));

inline __attribute__((always_inline)) v8 load(const float* p) {
  return *reinterpret_cast<const v8u*>(p);
}
inline __attribute__((always_inline)) void store(float* p, v8 v) { *reinterpret_cast<v8u*>(p) = v; }

// exp(x) for x in [-87, 0], eight at a time (Cephes expf): x = n ln2 + r,
// |r| <= ln2 / 2, exp(x) = 2^n (1 + r + r² p(r)).
inline __attribute__((always_inline)) v8 exp_nonpositive(v8 x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  x = x < -87.0f ? v8{} - 87.0f : x;
  const v8 n = (x * kLog2e + kRound) - kRound;
  const v8 r = (x - n * kLn2Hi) - n * kLn2Lo;
  v8 p = v8{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const v8i bits = (__builtin_convertvector(n, v8i) + 127) << 23;
  return p * reinterpret_cast<v8>(bits);
}

// Sum of eight lanes in a fixed order.
inline float lane_sum(const float* acc) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace

LMS_ROW_CLONES float max_of(const float* x, int64_t n) {
  float acc[kLanes];
  for (float& a : acc) a = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] = acc[l] > x[i + l] ? acc[l] : x[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] = acc[l] > x[i] ? acc[l] : x[i];
  float m = acc[0];
  for (int l = 1; l < kLanes; ++l) m = m > acc[l] ? m : acc[l];
  return m;
}

LMS_ROW_CLONES float exp_shifted(float* x, int64_t n, float scale, float shift) {
  v8 acc = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const v8 e = exp_nonpositive(load(x + i) * scale - shift);
    store(x + i, e);
    acc += e;
  }
  if (i < n) {
    float tail[kLanes] = {};
    std::copy(x + i, x + n, tail);
    v8 e = exp_nonpositive(load(tail) * scale - shift);
    for (int l = static_cast<int>(n - i); l < kLanes; ++l) e[l] = 0.0f;
    store(tail, e);
    std::copy(tail, tail + (n - i), x + i);
    acc += e;
  }
  float lanes[kLanes];
  store(lanes, acc);
  return lane_sum(lanes);
}

LMS_ROW_CLONES void scale(float* x, int64_t n, float a) {
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

LMS_ROW_CLONES float dot(const float* x, const float* y, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l] * y[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += x[i] * y[i];
  return lane_sum(acc);
}

LMS_ROW_CLONES void softmax_grad(const float* p, const float* dp, float di, int64_t n, float* ds) {
  for (int64_t i = 0; i < n; ++i) ds[i] = p[i] * (dp[i] - di);
}

}  // namespace lms::cpu::pointwise::attention_rows
