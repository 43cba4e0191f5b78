// Host conversions between float32 and the 2-byte floats of lms/types.h
// (bf16, f16), for feeding and fetching such tensors as float32 values.
// They are PyTorch's (c10/util/BFloat16.h round_to_nearest_even, and
// c10/util/Half.h's fp16_ieee_from_fp32_value / fp16_ieee_to_fp32_value from
// Marat Dukhan's FP16 library), so a value fed here has the bits
// `torch.tensor(v).to(dtype)` has: round to nearest, ties to even; beyond
// f16's range +-inf; NaN stays NaN. Widening is exact.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "lms/types.h"

namespace lms {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  const uint32_t u = float_bits(f);
  const uint32_t rounding_bias = ((u >> 16) & 1) + 0x7FFF;
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

inline float bf16_to_float(uint16_t h) { return float_from_bits(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_f16(float f) {
  // Scaling by 2^112 then 2^-110 rounds the mantissa at f16's precision in
  // float arithmetic (round to nearest even), saturating to inf past
  // 65504 + half an ulp; the bias handles f16's subnormals.
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = float_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = float_from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = float_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

inline float f16_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized = float_from_bits((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized = float_from_bits((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = 1u << 27;
  const uint32_t result =
      sign | (two_w < denormalized_cutoff ? float_bits(denormalized) : float_bits(normalized));
  return float_from_bits(result);
}

// `n` float32 values to `dtype` (bf16 or f16) at `out` (2 bytes each).
inline void floats_to_half(const float* in, int64_t n, DType dtype, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = dtype == DType::kBFloat16 ? float_to_bf16(in[i]) : float_to_f16(in[i]);
  }
}

// `n` values of `dtype` (bf16 or f16) widened to float32.
inline void half_to_floats(const uint16_t* in, int64_t n, DType dtype, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = dtype == DType::kBFloat16 ? bf16_to_float(in[i]) : f16_to_float(in[i]);
  }
}

}  // namespace lms
