// Row operations of the CPU tiled attention (attention_kernels.cc) on one
// [rows, kTileK] tile of scores: each is a loop the compiler vectorises
// (a clone for AVX2 and a baseline clone, picked once per process),
// with sums and maxima over eight lanes in a fixed order, so that a row's
// result depends on its values alone: never on the thread that computes it.
#pragma once

#include <cstdint>

namespace lms::cpu::pointwise::attention_rows {

// max(x[0..n)); -inf for n == 0.
float max_of(const float* x, int64_t n);

// x[i] = exp(scale * x[i] - shift) for i < n (x[i] <= shift / scale, so
// every result is in [0, 1]); returns their sum. exp is Cephes' expf
// polynomial (relative error about 2e-7), results below 2^-126 flushed to
// that bound's neighbourhood rather than 0.
float exp_shifted(float* x, int64_t n, float scale, float shift);

// x[i] *= a for i < n.
void scale(float* x, int64_t n, float a);

// Σ x[i] y[i] over i < n.
float dot(const float* x, const float* y, int64_t n);

// ds[i] = p[i] * (dp[i] - di) for i < n: the softmax backward of one row.
void softmax_grad(const float* p, const float* dp, float di, int64_t n, float* ds);

}  // namespace lms::cpu::pointwise::attention_rows
