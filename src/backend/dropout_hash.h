// The counter-based generator of dropout's mask (docs/ops.md `dropout`),
// shared by the CPU loop and the CUDA kernel so both devices compute the
// same masks bit for bit. Nothing is stored: the mask of element i at step
// `step` is a pure function of (seed, step, i), so the gradient and a
// recomputation regenerate it.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define LMS_DROPOUT_HD __host__ __device__ __forceinline__
#else
#define LMS_DROPOUT_HD inline
#endif

namespace lms::dropout_hash {

// splitmix64's finaliser (Steele, Lea and Flood 2014).
LMS_DROPOUT_HD uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The per-step key: mixes the seed, then the step.
LMS_DROPOUT_HD uint64_t step_key(int64_t seed, int64_t step) {
  return mix(mix(static_cast<uint64_t>(seed)) ^ static_cast<uint64_t>(step));
}

// u(seed, step, i) * 2^24: the top 24 bits of mix(key ^ i), in [0, 2^24).
LMS_DROPOUT_HD uint32_t bits24(uint64_t key, int64_t i) {
  return static_cast<uint32_t>(mix(key ^ static_cast<uint64_t>(i)) >> 40);
}

// keep(i) = u >= ratio, i.e. bits24 >= ceil(ratio * 2^24) (exact in double).
inline uint32_t threshold(double ratio) {
  return static_cast<uint32_t>(std::ceil(ratio * 16777216.0));
}

// The factor applied to kept elements: float(1 / (1 - ratio)).
inline float keep_scale(double ratio) { return static_cast<float>(1.0 / (1.0 - ratio)); }

}  // namespace lms::dropout_hash
