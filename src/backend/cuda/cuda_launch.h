// Host-side launchers of the CUDA backend's own kernels (cuda_*.cu). Plain
// C++ declarations so the Kernel classes (.cc, compiled by the host
// compiler) can call them. Every launcher enqueues on `stream` and returns
// cudaGetLastError() after the launch. Element counts are int64; tensors are
// dense float32 NCHW / NCDHW. Reductions are deterministic: fixed launch
// shapes, tree sums in double, no atomics (Note [CUDA kernel determinism]).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/reduce_plan.h"
#include "common/broadcast.h"

namespace lms::cuda::launch {

// ---- Element-wise (cuda_elementwise.cu) ----

enum class Unary : int {
  kRelu,       // max(x, 0)
  kLeakyRelu,  // x > 0 ? x : alpha*x
  kSigmoid,    // 1 / (1 + exp(-x))
  kTanh,       // tanh(x)
  kScale,      // alpha*x
};
cudaError_t unary(cudaStream_t stream, Unary op, const float* x, float* y, int64_t n, float alpha);

enum class Binary : int {
  kAdd,           // a + b
  kMul,           // a * b
  kReluBwd,       // a = y, b = dy: dy * (y > 0)
  kLeakyReluBwd,  // a = x, b = dy: x > 0 ? dy : alpha*dy
  kSigmoidBwd,    // a = y, b = dy: dy * y * (1 - y)
  kTanhBwd,       // a = y, b = dy: dy * (1 - y * y)
};
cudaError_t binary(cudaStream_t stream, Binary op, const float* a, const float* b, float* y,
                   int64_t n, float alpha);

// y[i] = full[i] + small[b.index(i)] (kAdd) or full[i] * small[b.index(i)]
// (kMul) for the n elements of y (common/broadcast.h).
cudaError_t broadcast_binary(cudaStream_t stream, Binary op, const float* full, const float* small,
                             float* y, int64_t n, BroadcastIndex b);
// sum_to: y[j] = float(sum in double over r of x[p.base(j) + p.term(r)]), r
// in order (common/broadcast.h), one thread per output element.
cudaError_t sum_to(cudaStream_t stream, const float* x, float* y, SumToPlan p);
// transpose: y[i] = x[t.index(i)] for the n elements of y (common/broadcast.h,
// transpose_index).
cudaError_t gather_strided(cudaStream_t stream, const float* x, float* y, int64_t n,
                           BroadcastIndex t);

// y = min(max(x, lo), hi); clip_bwd: dx = dy where lo < x < hi, else 0.
cudaError_t clip(cudaStream_t stream, const float* x, float* y, int64_t n, float lo, float hi);
cudaError_t clip_bwd(cudaStream_t stream, const float* x, const float* dy, float* dx, int64_t n,
                     float lo, float hi);
// dy null: y = min(max(alpha x + beta, 0), 1); else dx = alpha dy where
// 0 < alpha x + beta < 1, else 0.
cudaError_t hard_sigmoid(cudaStream_t stream, const float* x, const float* dy, float* out,
                         int64_t n, float alpha, float beta);
// dy null: y = x * min(max(x + 3, 0), 6) / 6; else dx = dy * (2x + 3) / 6
// on (-3, 3), dy from 3 up, 0 below -3.
cudaError_t hard_swish(cudaStream_t stream, const float* x, const float* dy, float* out, int64_t n);
// gelu: y = 0.5 * x * (1 + erf(x / sqrt(2))) = x * Phi(x); gelu_bwd:
// dx = dy * (Phi(x) + x * phi(x)), phi the standard normal density.
cudaError_t gelu(cudaStream_t stream, const float* x, float* y, int64_t n);
cudaError_t gelu_bwd(cudaStream_t stream, const float* x, const float* dy, float* dx, int64_t n);
cudaError_t fill(cudaStream_t stream, float* y, int64_t n, float value);
// The element types cast converts between.
enum class FloatType : int {
  kF32,
  kBF16,
  kF16,
};
// cast: y[i] = x[i] converted from `from` to `to`, rounding to nearest even
// (__float2bfloat16_rn, __float2half_rn); n elements.
cudaError_t cast(cudaStream_t stream, const void* x, FloatType from, void* y, FloatType to,
                 int64_t n);
// dropout / dropout_bwd: y[i] = bits24(key, i) >= threshold ? x[i] * scale : 0
// (backend/dropout_hash.h; key = step_key(seed, step)).
cudaError_t dropout(cudaStream_t stream, const float* x, float* y, int64_t n, uint64_t key,
                    uint32_t threshold, float scale);
// y[i] = float(double(*scalar) / divisor) (reduce_mean_bwd).
cudaError_t fill_from_scalar(cudaStream_t stream, const float* scalar, double divisor, float* y,
                             int64_t n);
// g = float(2 * dloss / n) * (p - t).
cudaError_t mse_bwd(cudaStream_t stream, const float* p, const float* t, const float* dloss,
                    float* g, int64_t n);
// step += 1 unless `norm` (may be null) is not finite.
cudaError_t increment(cudaStream_t stream, float* step, const float* norm);

// docs/ops.md optimizer updates; `norm` may be null (no clipping). With
// `scale` (loss scaling; norm then set), a norm that is not finite skips
// the update and the gradient is read times float(1 / double(*scale)).
struct SgdParams {
  float lr, momentum, weight_decay, clip_norm;
};
cudaError_t sgd_update(cudaStream_t stream, float* p, const float* g, float* v, const float* scale,
                       const float* norm, int64_t n, SgdParams h);
struct AdamParams {
  float lr, beta1, beta2, eps, weight_decay, clip_norm;
  double decay_steps, decay_power;  // the poly schedule (lr_schedule.h); decay_steps 0 = none
};
// Reads t from `step`; with t < 1 (increment did not run) nothing is updated.
cudaError_t adam_update(cudaStream_t stream, float* p, const float* g, float* m, float* v,
                        const float* step, const float* scale, const float* norm, int64_t n,
                        AdamParams h);
// amp_update_scale of docs/ops.md (GradScaler.update), one thread.
cudaError_t amp_update_scale(cudaStream_t stream, float* scale, float* tracker, const float* norm,
                             double growth_factor, double backoff_factor, float growth_interval);

// ---- Along an axis, embedding (cuda_axis.cu) ----
// x seen as [outer, axis, inner]: y[o, i] = mean over a of x[o, a, i], each
// sum in double in order of a (reduce_mean with an axis).
cudaError_t axis_mean(cudaStream_t stream, const float* x, int64_t outer, int64_t axis,
                      int64_t inner, float* y);
// dx[o, a, i] = float(double(dy[o, i]) / axis) (reduce_mean_bwd with an axis).
cudaError_t axis_mean_bwd(cudaStream_t stream, const float* dy, int64_t outer, int64_t axis,
                          int64_t inner, float* dx);
// y[p, :] = table[ids[p], :] for n ids, table [rows, dim]. *bad (device
// memory) is set to the first position whose id is outside [0, rows), or to
// n when there is none; such positions get zeros.
cudaError_t embedding(cudaStream_t stream, const int64_t* ids, const float* table, int64_t n,
                      int64_t rows, int64_t dim, float* y, unsigned long long* bad);
// dtable[v, :] = sum of dy[p, :] over the positions p with ids[p] = v, in
// increasing p: one thread per element of dtable scans all n ids (O(rows *
// dim * n) reads, no atomics). *bad as for embedding.
cudaError_t embedding_bwd(cudaStream_t stream, const int64_t* ids, const float* dy, int64_t n,
                          int64_t rows, int64_t dim, float* dtable, unsigned long long* bad);

// ---- Softmax cross-entropy (cuda_cross_entropy.cu) ----
// logits[n, c] (float) and labels[n] (int64); a row counts when its label
// is not ignore_index (ignored rows and bad labels do not count).
struct CrossEntropyView {
  int64_t n, c, ignore_index;
};
// Per row, in double: lse[r] = log Σ exp(logits[r, :]) and row_loss[r] =
// lse[r] - logits[r, labels[r]] (0 for a row that does not count); *count =
// the rows that count (M), and *loss (when not null) = Σ row_loss / M, NaN
// for M = 0. *bad (device memory) is set to the first position whose label
// is outside [0, c) and not ignore_index, or to n when there is none. lse,
// row_loss, count: device memory of n, n and 1 doubles.
cudaError_t cross_entropy_rows(cudaStream_t stream, const float* logits, const int64_t* labels,
                               CrossEntropyView v, double* lse, double* row_loss, double* count,
                               float* loss, unsigned long long* bad);
// dlogits[r, j] = (exp(logits[r, j] - lse[r]) - [j == labels[r]]) * dloss / M
// for a row that counts, 0 otherwise (from cross_entropy_rows' lse and count).
cudaError_t cross_entropy_bwd(cudaStream_t stream, const float* logits, const int64_t* labels,
                              CrossEntropyView v, const double* lse, const double* count,
                              const float* dloss, float* dlogits);

// ---- Reductions (cuda_reduce.cu) ----

enum class Reduce : int { kSum, kSumSquares, kSumSquaredDiff /* (a-b)^2 */ };
// Number of partial sums reduce_partials writes for n elements (a function of
// n only, so the summation tree is fixed).
int reduce_blocks(int64_t n);
cudaError_t reduce_partials(cudaStream_t stream, Reduce op, const float* a, const float* b,
                            int64_t n, double* partials);
// out[0] = float(sqrt_result ? sqrt(sum) : sum * scale), sum over `count`
// partials in index order.
cudaError_t finish_sum(cudaStream_t stream, const double* partials, int64_t count, double scale,
                       bool sqrt_result, float* out);

// Grouped sums (channel_sum, dice_sums, norm_stats, norm_bwd_sums) view a
// tensor as [Nv, Cv, S] and reduce each group g < Cv (the elements
// (n*Cv + g)*S + s) over several blocks, two passes, no atomics (Note
// [Grouped reduction plan]). Each takes `scratch` for the first pass's
// partials: partial_bytes(plan_group_reduce(Nv, Cv, S), values) bytes of
// device memory, 8-byte aligned, with `values` as listed at each launcher;
// it is overwritten. Float inputs 16-byte aligned take float4 loads, with
// the same result as unaligned ones.

// x: [N, C, S] floats. out[c] = float(sum over n < N, s < S of
// x[(n*C + c)*S + s]) (the bias gradient of a convolution). values = 1.
cudaError_t channel_sum(cudaStream_t stream, const float* x, int64_t N, int64_t C, int64_t S,
                        double* scratch, float* out);

// Soft Dice, p and t: [slices, S] floats. sums[3*j + {0,1,2}] = (sum p*t,
// sum p, sum t) of slice j, in double (Nv = 1, Cv = slices). values = 3.
cudaError_t dice_sums(cudaStream_t stream, const float* p, const float* t, int64_t slices,
                      int64_t S, double* scratch, double* sums);
cudaError_t dice_loss(cudaStream_t stream, const double* sums, int64_t slices, double eps,
                      float* loss);
cudaError_t dice_bwd(cudaStream_t stream, const float* t, const double* sums, const float* dloss,
                     int64_t slices, int64_t S, double eps, float* g);

// Normalisation over groups: the tensor is viewed as [Nv, Cv, S]; group g
// (< Cv) holds x[(n*Cv + g)*S + s] for all n, s; its parameter index is
// g % C. Batch norm: Nv = N, Cv = C. Instance norm: Nv = 1, Cv = N*C.
struct NormView {
  int64_t nv, cv, s, c;
  double eps;
};
// mean[g], var[g] (biased: divided by M = Nv*S), in double, from one read of
// x: sums shifted by the group's first element. values = 2.
cudaError_t norm_stats(cudaStream_t stream, const float* x, NormView v, double* scratch,
                       double* mean, double* var);
cudaError_t norm_forward(cudaStream_t stream, const float* x, const float* gamma, const float* beta,
                         const double* mean, const double* var, NormView v, float* y);
// sum_dy[g] = sum dy, sum_dyxmu[g] = sum dy*(x - mean[g]), in double, over
// group g of x and dy (same shape). values = 2.
cudaError_t norm_bwd_sums(cudaStream_t stream, const float* x, const float* dy, const double* mean,
                          NormView v, double* scratch, double* sum_dy, double* sum_dyxmu);
cudaError_t norm_bwd_dx(cudaStream_t stream, const float* x, const float* dy, const float* gamma,
                        const double* mean, const double* var, const double* sum_dy,
                        const double* sum_dyxmu, NormView v, float* dx);
// dbeta[c] = sum over groups of c of sum_dy; dgamma[c] likewise of
// sum_dyxmu / sqrt(var + eps).
cudaError_t norm_param_grads(cudaStream_t stream, const double* var, const double* sum_dy,
                             const double* sum_dyxmu, NormView v, float* dgamma, float* dbeta);
// Batch norm's statistics [c] between the double workspace and float
// tensors (the saved batch statistics, the running statistics of eval mode).
cudaError_t stats_to_float(cudaStream_t stream, const double* mean, const double* var, int64_t c,
                           float* mean_out, float* var_out);
cudaError_t stats_to_double(cudaStream_t stream, const float* mean, const float* var, int64_t c,
                            double* mean_out, double* var_out);
// bn_stats_update: r = (1 - momentum) r + momentum batch, in double, the
// variance times unbias = count / (count - 1); one thread per channel.
cudaError_t bn_stats_update(cudaStream_t stream, float* running_mean, float* running_var,
                            const float* mean, const float* var, int64_t c, double momentum,
                            double unbias);

// ---- Layer norm (cuda_layer_norm.cu) ----
// x, y, dy, dx: [rows, cols]; gamma, beta, dgamma, dbeta: [cols]. Each row
// is normalised by its own mean and biased variance, in double.
cudaError_t layer_norm_fwd(cudaStream_t stream, const float* x, const float* gamma,
                           const float* beta, int64_t rows, int64_t cols, double eps, float* y);
// Doubles of device memory layer_norm_bwd needs in `workspace` (8-byte
// aligned, overwritten): the row statistics and the column sums' partials.
int64_t layer_norm_bwd_workspace_doubles(int64_t rows, int64_t cols);
// dx, dgamma = sum over rows of dy*xhat, dbeta = sum over rows of dy; the
// statistics are recomputed from x.
cudaError_t layer_norm_bwd(cudaStream_t stream, const float* x, const float* gamma, const float* dy,
                           int64_t rows, int64_t cols, double eps, double* workspace, float* dx,
                           float* dgamma, float* dbeta);

// ---- Attention (cuda_attention.cu) ----
// heads independent problems (N*H), each q[t,d], k and v [s,d], out [t,d],
// lse [t]; scores scaled by `scale`, key j > query i masked when `causal`.
struct AttentionShape {
  int64_t heads, t, s, d;
  double scale;
  bool causal;
};
// Doubles of device memory attention_fwd needs in `workspace`: one score
// row per block.
int64_t attention_fwd_workspace_doubles(const AttentionShape& a);
// One block per (head, query) row: out = softmax(scores) v, lse the row's
// log-sum-exp.
cudaError_t attention_fwd(cudaStream_t stream, const AttentionShape& a, const float* q,
                          const float* k, const float* v, double* workspace, float* out,
                          float* lse);
// Floats of device memory attention_bwd needs in `workspace`: P and dS of
// one head, [t,s] each (the heads run one after another).
int64_t attention_bwd_workspace_floats(const AttentionShape& a);
// dq, dk, dv with P recomputed from q, k and lse; every sum in index order.
cudaError_t attention_bwd(cudaStream_t stream, const AttentionShape& a, const float* q,
                          const float* k, const float* v, const float* out, const float* lse,
                          const float* dout, float* workspace, float* dq, float* dk, float* dv);

// ---- Spatial (cuda_spatial.cu) ----

// A 2-D problem is a 3-D one with depth 1 (kernel 1, stride 1, pad 0).
struct Geom3 {
  int64_t nc;             // N*C
  int64_t in[3], out[3];  // D, H, W
  int64_t k[3], s[3], p[3];
};
// Max pooling; windows ignore padding; the gradient goes to the first
// maximum of each window in (d, h, w) order, as the CPU device.
cudaError_t max_pool_fwd(cudaStream_t stream, const float* x, Geom3 g, float* y);
cudaError_t max_pool_bwd(cudaStream_t stream, const float* x, const float* dy, Geom3 g, float* dx);
// Average pooling; the divisor is the whole window (include_pad, PyTorch's
// default) or its elements inside the input. The gradient of an input
// element sums, in window order, dy over divisor of each window covering it.
cudaError_t avg_pool_fwd(cudaStream_t stream, const float* x, Geom3 g, bool include_pad, float* y);
cudaError_t avg_pool_bwd(cudaStream_t stream, const float* dy, Geom3 g, bool include_pad,
                         float* dx);
// Upsample by integer factors g.k (out = in * k); linear = half-pixel
// centres with edge clamping (oneDNN resampling_linear), else nearest.
cudaError_t upsample_fwd(cudaStream_t stream, const float* x, Geom3 g, bool linear, float* y);
cudaError_t upsample_bwd(cudaStream_t stream, const float* dy, Geom3 g, bool linear, float* dx);

// ---- linear (cuda_linear.cu) ----

// y[r, k] = b[k] for each of `rows` rows of y[rows, cols] (the bias that the
// product is then added to).
cudaError_t broadcast_rows(cudaStream_t stream, const float* b, int64_t rows, int64_t cols,
                           float* y);
// s[k] = Σ_r x[r, k] over the rows of x[rows, cols], in double, in order.
cudaError_t column_sum(cudaStream_t stream, const float* x, int64_t rows, int64_t cols, float* s);

}  // namespace lms::cuda::launch
