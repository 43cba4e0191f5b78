#include "backend/cpu/kernels/winograd.h"

#include <omp.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/align.h"

namespace lms::cpu {
namespace {

using dnnl::memory;

// Output tiles per matmul (fewer when the problem has fewer): one chunk's
// transformed input and matmul output (36 x kChunkTiles x channels floats
// each, 0.6 MiB at 64 channels) stay in a core's L2 cache between the
// transforms and the matmul.
constexpr int64_t kChunkTiles = 64;
constexpr int64_t kPositions = 36;  // 6x6 transformed tile
constexpr uint64_t kAlignFloats = 16;

uint64_t align_floats(uint64_t n) { return align_up(n, kAlignFloats); }

// Eight channels of one pixel: the unit every transform works on.
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));

#define LMS_AVX2 __attribute__((target("avx2,fma")))

LMS_AVX2 inline v8 load(const float* p) { return *reinterpret_cast<const v8u*>(p); }
LMS_AVX2 inline void store(float* p, v8 v) { *reinterpret_cast<v8u*>(p) = v; }

// r = B^T d for one column of six (Lavin & Gray, F(4x4, 3x3), points 0, ±1, ±2).
LMS_AVX2 inline void input_1d(const v8* d, v8* r) {
  r[0] = 4.f * d[0] - 5.f * d[2] + d[4];
  r[1] = -4.f * (d[1] + d[2]) + d[3] + d[4];
  r[2] = 4.f * (d[1] - d[2]) - d[3] + d[4];
  r[3] = 2.f * (d[3] - d[1]) - d[2] + d[4];
  r[4] = 2.f * (d[1] - d[3]) - d[2] + d[4];
  r[5] = 4.f * d[1] - 5.f * d[3] + d[5];
}

// o = A^T m for one column of six.
LMS_AVX2 inline void output_1d(const v8* m, v8* o) {
  const v8 a = m[1] + m[2], b = m[1] - m[2], c = m[3] + m[4], e = m[3] - m[4];
  o[0] = m[0] + a + c;
  o[1] = b + 2.f * e;
  o[2] = a + 4.f * c;
  o[3] = b + 8.f * e + m[5];
}

// Offset of channel c (a multiple of 8) at pixel (h, w) of image n in a
// blocked layout.
inline int64_t blocked_offset(int64_t n, int64_t c, int64_t h, int64_t w, int64_t channels,
                              int64_t height, int64_t width, int64_t block) {
  return (((n * (channels / block) + c / block) * height + h) * width + w) * block + c % block;
}

// Row t of every position of a transformed chunk [36][chunk][channels]: the
// rows past the last tile are zero, so the matmul reads no garbage.
void zero_row(float* chunk_data, int64_t chunk, int64_t t, int64_t channels) {
  for (int64_t pos = 0; pos < kPositions; ++pos) {
    std::fill_n(chunk_data + (pos * chunk + t) * channels, channels, 0.f);
  }
}

struct Tiling {
  int64_t tiles_h, tiles_w;
  void locate(int64_t tile, int64_t* n, int64_t* th, int64_t* tw) const {
    *n = tile / (tiles_h * tiles_w);
    const int64_t r = tile % (tiles_h * tiles_w);
    *th = r / tiles_w;
    *tw = r % tiles_w;
  }
};

// V[36][T][C] for tiles [first, first + T); rows past the last tile are zero.
LMS_AVX2 void transform_input(const float* x, const WinogradShape& s, const Tiling& tiling,
                              int64_t tiles, int64_t first, int64_t chunk, float* v) {
  const v8 zero = {};
  for (int64_t t = 0; t < chunk; ++t) {
    const int64_t tile = first + t;
    if (tile >= tiles) {
      zero_row(v, chunk, t, s.c);
      continue;
    }
    int64_t n, th, tw;
    tiling.locate(tile, &n, &th, &tw);
    const int64_t h0 = th * 4 - s.pad_h, w0 = tw * 4 - s.pad_w;
    for (int64_t c = 0; c < s.c; c += 8) {
      v8 d[6][6], rows[6][6];
      for (int i = 0; i < 6; ++i) {
        const int64_t h = h0 + i;
        for (int j = 0; j < 6; ++j) {
          const int64_t w = w0 + j;
          const bool inside = h >= 0 && h < s.h && w >= 0 && w < s.w;
          d[i][j] = inside ? load(x + blocked_offset(n, c, h, w, s.c, s.h, s.w, s.block)) : zero;
        }
      }
      for (int j = 0; j < 6; ++j) {
        v8 col[6], r[6];
        for (int i = 0; i < 6; ++i) col[i] = d[i][j];
        input_1d(col, r);
        for (int i = 0; i < 6; ++i) rows[i][j] = r[i];
      }
      for (int i = 0; i < 6; ++i) {
        v8 r[6];
        input_1d(rows[i], r);
        for (int j = 0; j < 6; ++j) store(v + ((i * 6 + j) * chunk + t) * s.c + c, r[j]);
      }
    }
  }
}

// y tiles [first, first + T) from M[36][T][K], plus bias and ReLU.
LMS_AVX2 void transform_output(const float* m, const WinogradShape& s, const Tiling& tiling,
                               int64_t tiles, int64_t first, int64_t chunk, const float* bias,
                               bool relu, float* y) {
  const int64_t last = std::min(tiles, first + chunk);
  for (int64_t tile = first; tile < last; ++tile) {
    const int64_t t = tile - first;
    int64_t n, th, tw;
    tiling.locate(tile, &n, &th, &tw);
    const int64_t h0 = th * 4, w0 = tw * 4;
    for (int64_t k = 0; k < s.k; k += 8) {
      v8 cols[4][6];
      for (int j = 0; j < 6; ++j) {
        v8 col[6], o[4];
        for (int i = 0; i < 6; ++i) col[i] = load(m + ((i * 6 + j) * chunk + t) * s.k + k);
        output_1d(col, o);
        for (int i = 0; i < 4; ++i) cols[i][j] = o[i];
      }
      const v8 b = bias != nullptr ? load(bias + k) : v8{};
      for (int i = 0; i < 4 && h0 + i < s.ho; ++i) {
        v8 o[4];
        output_1d(cols[i], o);
        for (int j = 0; j < 4 && w0 + j < s.wo; ++j) {
          v8 val = o[j] + b;
          if (relu) val = val > 0.f ? val : val * 0.f;
          store(y + blocked_offset(n, k, h0 + i, w0 + j, s.k, s.ho, s.wo, s.block), val);
        }
      }
    }
  }
}

// G of F(4x4, 3x3): the filter transform.
constexpr double kG[6][3] = {{1. / 4, 0, 0},
                             {-1. / 6, -1. / 6, -1. / 6},
                             {-1. / 6, 1. / 6, -1. / 6},
                             {1. / 24, 1. / 12, 1. / 6},
                             {1. / 24, -1. / 12, 1. / 6},
                             {0, 0, 1}};

// U[36][C][K] = G g G^T for the filters of output channels [k_begin, k_end).
void transform_filters(const float* w, const WinogradShape& s, bool backward_data, int64_t k_begin,
                       int64_t k_end, float* u) {
  for (int64_t k = k_begin; k < k_end; ++k) {
    for (int64_t c = 0; c < s.c; ++c) {
      // Backward data: the forward filter is w[K'=C][C'=K], rotated.
      double g[3][3];
      const float* src = backward_data ? w + (c * s.k + k) * 9 : w + (k * s.c + c) * 9;
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j)
          g[i][j] = backward_data ? src[(2 - i) * 3 + 2 - j] : src[i * 3 + j];
      }
      double gg[6][3];
      for (int i = 0; i < 6; ++i) {
        for (int j = 0; j < 3; ++j)
          gg[i][j] = kG[i][0] * g[0][j] + kG[i][1] * g[1][j] + kG[i][2] * g[2][j];
      }
      for (int i = 0; i < 6; ++i) {
        for (int j = 0; j < 6; ++j) {
          const double v = gg[i][0] * kG[j][0] + gg[i][1] * kG[j][1] + gg[i][2] * kG[j][2];
          u[((i * 6 + j) * s.c + c) * s.k + k] = static_cast<float>(v);
        }
      }
    }
  }
}

// z = A y for a column of four (the adjoint of output_1d).
LMS_AVX2 inline void output_1d_adjoint(const v8* y, v8* z) {
  const v8 even = y[0] + y[2], odd = y[1] + y[3];
  const v8 even4 = y[0] + 4.f * y[2], odd8 = 2.f * y[1] + 8.f * y[3];
  z[0] = y[0];
  z[1] = even + odd;
  z[2] = even - odd;
  z[3] = even4 + odd8;
  z[4] = even4 - odd8;
  z[5] = y[3];
}

// W[36][T][K] = A dY A^T for the dy tiles [first, first + T); outputs past
// the edge, and rows past the last tile, are zero.
LMS_AVX2 void transform_output_grad(const float* dy, const WinogradShape& s, const Tiling& tiling,
                                    int64_t tiles, int64_t first, int64_t chunk, float* out) {
  const v8 zero = {};
  for (int64_t t = 0; t < chunk; ++t) {
    const int64_t tile = first + t;
    if (tile >= tiles) {
      zero_row(out, chunk, t, s.k);
      continue;
    }
    int64_t n, th, tw;
    tiling.locate(tile, &n, &th, &tw);
    const int64_t h0 = th * 4, w0 = tw * 4;
    for (int64_t k = 0; k < s.k; k += 8) {
      v8 d[4][4], cols[6][4];
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
          const bool inside = h0 + i < s.ho && w0 + j < s.wo;
          d[i][j] = inside
                        ? load(dy + blocked_offset(n, k, h0 + i, w0 + j, s.k, s.ho, s.wo, s.block))
                        : zero;
        }
      }
      for (int j = 0; j < 4; ++j) {
        v8 col[4], z[6];
        for (int i = 0; i < 4; ++i) col[i] = d[i][j];
        output_1d_adjoint(col, z);
        for (int i = 0; i < 6; ++i) cols[i][j] = z[i];
      }
      for (int i = 0; i < 6; ++i) {
        v8 z[6];
        output_1d_adjoint(cols[i], z);
        for (int j = 0; j < 6; ++j) store(out + ((i * 6 + j) * chunk + t) * s.k + k, z[j]);
      }
    }
  }
}

// dw[k][c] = G^T P G for output channels [k_begin, k_end), P the sum of the
// `parts` accumulators [36][K][C] (in order).
void transform_filter_grads(const float* parts, int64_t n_parts, uint64_t part_floats,
                            const WinogradShape& s, int64_t k_begin, int64_t k_end, float* dw) {
  for (int64_t k = k_begin; k < k_end; ++k) {
    for (int64_t c = 0; c < s.c; ++c) {
      double m[6][6];
      for (int pos = 0; pos < kPositions; ++pos) {
        float sum = 0.f;
        for (int64_t part = 0; part < n_parts; ++part) {
          sum += parts[static_cast<uint64_t>(part) * part_floats + (pos * s.k + k) * s.c + c];
        }
        m[pos / 6][pos % 6] = sum;
      }
      double gm[3][6];  // G^T m
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 6; ++j) {
          double v = 0;
          for (int p = 0; p < 6; ++p) v += kG[p][i] * m[p][j];
          gm[i][j] = v;
        }
      }
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) {
          double v = 0;
          for (int q = 0; q < 6; ++q) v += gm[i][q] * kG[q][j];
          dw[(k * s.c + c) * 9 + i * 3 + j] = static_cast<float>(v);
        }
      }
    }
  }
}

// db[k..k+8) = the sum of dy over n, h, w: per row in float, rows in double.
LMS_AVX2 void bias_grad(const float* dy, const WinogradShape& s, int64_t k, float* db) {
  double sum[8] = {};
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t h = 0; h < s.ho; ++h) {
      v8 row = {};
      for (int64_t w = 0; w < s.wo; ++w) {
        row += load(dy + blocked_offset(n, k, h, w, s.k, s.ho, s.wo, s.block));
      }
      for (int l = 0; l < 8; ++l) sum[l] += row[l];
    }
  }
  for (int l = 0; l < 8; ++l) db[k + l] = static_cast<float>(sum[l]);
}

}  // namespace

bool winograd_cpu_supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

WinogradPass::WinogradPass(const WinogradShape& shape, const dnnl::engine& engine, int threads)
    : s_(shape),
      threads_(threads > 0 ? threads : std::max(omp_get_max_threads(), 1)),
      tiles_h_((shape.ho + 3) / 4),
      tiles_w_((shape.wo + 3) / 4),
      tiles_(shape.n * tiles_h_ * tiles_w_),
      chunk_(std::min(kChunkTiles, tiles_)),
      engine_(engine) {}

uint64_t WinogradPass::make_matmul(const memory::desc& src, const memory::desc& weights,
                                   const memory::desc& dst, bool accumulate) {
  // Each thread's matmul gets its own scratchpad: oneDNN's library-managed
  // one is not safe for concurrent execution of one primitive (AVX-512's
  // brgemm matmul computes garbage with it).
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.f);
    attr.set_post_ops(sum);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), attr, engine_);
  scratch_md_ = pd.scratchpad_desc();
  matmul_ = dnnl::matmul(pd);
  return align_floats((scratch_md_.get_size() + 3) / 4);
}

void WinogradPass::matmul(dnnl::stream& stream, const memory& src, const memory& weights,
                          const memory& dst, const memory& scratch, std::string* failure) const {
  try {
    matmul_.execute(stream, {{DNNL_ARG_SRC, src},
                             {DNNL_ARG_WEIGHTS, weights},
                             {DNNL_ARG_DST, dst},
                             {DNNL_ARG_SCRATCHPAD, scratch}});
    stream.wait();
  } catch (const dnnl::error& e) {
#pragma omp critical(lms_winograd_failure)
    *failure = e.what();
  }
}

WinogradConv::WinogradConv(const WinogradShape& shape, bool backward_data, bool bias, bool relu,
                           const dnnl::engine& engine, int threads)
    : WinogradPass(shape, engine, threads),
      backward_data_(backward_data),
      bias_(bias),
      relu_(relu) {
  u_floats_ = align_floats(static_cast<uint64_t>(kPositions * s_.c * s_.k));
  v_floats_ = align_floats(static_cast<uint64_t>(kPositions * chunk_ * s_.c));
  m_floats_ = align_floats(static_cast<uint64_t>(kPositions * chunk_ * s_.k));
  v_md_ = memory::desc({kPositions, chunk_, s_.c}, memory::data_type::f32, memory::format_tag::abc);
  u_md_ = memory::desc({kPositions, s_.c, s_.k}, memory::data_type::f32, memory::format_tag::abc);
  m_md_ = memory::desc({kPositions, chunk_, s_.k}, memory::data_type::f32, memory::format_tag::abc);
  thread_floats_ = v_floats_ + m_floats_ + make_matmul(v_md_, u_md_, m_md_, false);
  workspace_bytes_ = (u_floats_ + thread_floats_ * static_cast<uint64_t>(threads_)) * 4;
}

absl::Status WinogradConv::run(const float* x, const float* w, const float* bias, float* y,
                               void* workspace) const {
  float* u = static_cast<float*>(workspace);
  const Tiling tiling{tiles_h_, tiles_w_};
  const int64_t n_chunks = chunks();
  const float* b = bias_ ? bias : nullptr;
  std::string failure;
  // Inside the team each matmul runs on its caller's thread only (oneDNN does
  // not nest parallel regions), so no chunk's bits depend on the team size.
#pragma omp parallel num_threads(threads_)
  {
    const int64_t tid = omp_get_thread_num();
    const int64_t team = omp_get_num_threads();
    const int64_t per = (s_.k + team - 1) / team;
    transform_filters(w, s_, backward_data_, std::min(s_.k, tid * per),
                      std::min(s_.k, (tid + 1) * per), u);
#pragma omp barrier
    float* v = u + u_floats_ + static_cast<uint64_t>(tid) * thread_floats_;
    float* m = v + v_floats_;
    dnnl::stream stream(engine_);
    const memory v_mem(v_md_, engine_, v), u_mem(u_md_, engine_, u), m_mem(m_md_, engine_, m);
    const memory scratch_mem(scratch_md_, engine_, m + m_floats_);
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < n_chunks; ++chunk) {
      transform_input(x, s_, tiling, tiles_, chunk * chunk_, chunk_, v);
      matmul(stream, v_mem, u_mem, m_mem, scratch_mem, &failure);
      transform_output(m, s_, tiling, tiles_, chunk * chunk_, chunk_, b, relu_, y);
    }
  }
  if (!failure.empty()) return absl::InternalError(absl::StrCat("oneDNN matmul failed: ", failure));
  return absl::OkStatus();
}

WinogradConvBackwardWeights::WinogradConvBackwardWeights(const WinogradShape& shape, bool bias,
                                                         const dnnl::engine& engine, int threads)
    : WinogradPass(shape, engine, threads), bias_(bias) {
  v_floats_ = align_floats(static_cast<uint64_t>(kPositions * chunk_ * s_.c));
  z_floats_ = align_floats(static_cast<uint64_t>(kPositions * chunk_ * s_.k));
  p_floats_ = align_floats(static_cast<uint64_t>(kPositions * s_.k * s_.c));
  // P[pos] += Z[pos]^T V[pos]: Z is [36][T][K] in memory, read as [36][K][T].
  z_md_ = memory::desc({kPositions, s_.k, chunk_}, memory::data_type::f32, memory::format_tag::acb);
  v_md_ = memory::desc({kPositions, chunk_, s_.c}, memory::data_type::f32, memory::format_tag::abc);
  p_md_ = memory::desc({kPositions, s_.k, s_.c}, memory::data_type::f32, memory::format_tag::abc);
  thread_floats_ = p_floats_ + v_floats_ + z_floats_ + make_matmul(z_md_, v_md_, p_md_, true);
  workspace_bytes_ = thread_floats_ * static_cast<uint64_t>(threads_) * 4;
}

absl::Status WinogradConvBackwardWeights::run(const float* x, const float* dy, float* dw, float* db,
                                              void* workspace) const {
  float* base = static_cast<float*>(workspace);
  const Tiling tiling{tiles_h_, tiles_w_};
  const int64_t n_chunks = chunks();
  std::string failure;
#pragma omp parallel num_threads(threads_)
  {
    const int64_t tid = omp_get_thread_num();
    const int64_t team = omp_get_num_threads();
    float* p = base + static_cast<uint64_t>(tid) * thread_floats_;
    float* v = p + p_floats_;
    float* z = v + v_floats_;
    std::fill(p, p + p_floats_, 0.f);
    dnnl::stream stream(engine_);
    const memory z_mem(z_md_, engine_, z), v_mem(v_md_, engine_, v), p_mem(p_md_, engine_, p);
    const memory scratch_mem(scratch_md_, engine_, z + z_floats_);
    // Each thread sums a contiguous run of chunks into its own P, in order;
    // the runs are added in thread order below (so the bits depend on the
    // team size, as oneDNN's own backward weights do).
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < n_chunks; ++chunk) {
      transform_input(x, s_, tiling, tiles_, chunk * chunk_, chunk_, v);
      transform_output_grad(dy, s_, tiling, tiles_, chunk * chunk_, chunk_, z);
      matmul(stream, z_mem, v_mem, p_mem, scratch_mem, &failure);
    }
    // (the implicit barrier of `omp for` orders every P before the sums)
    const int64_t per = (s_.k + team - 1) / team;
    transform_filter_grads(base, team, thread_floats_, s_, std::min(s_.k, tid * per),
                           std::min(s_.k, (tid + 1) * per), dw);
    if (bias_) {
#pragma omp for schedule(static)
      for (int64_t k = 0; k < s_.k; k += 8) bias_grad(dy, s_, k, db);
    }
  }
  if (!failure.empty()) return absl::InternalError(absl::StrCat("oneDNN matmul failed: ", failure));
  return absl::OkStatus();
}

}  // namespace lms::cpu
