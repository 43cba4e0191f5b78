// attention and attention_bwd of docs/ops.md on the CPU device, tiled
// (FlashAttention-2, Dao 2023): Note [CPU tiled attention].
//
// Note [CPU tiled attention]: the queries of one (n, h) problem are cut into
// tiles of kTileQ rows and its keys into tiles of kTileK. Each product of
// two tiles is a oneDNN matmul run on the calling thread (oneDNN does not
// nest parallel regions), and the row work between products (max, exp,
// sums; attention_rows.h) is vectorised. The workspace is one set of tiles
// per thread, O(kTileQ * kTileK), whatever T and S are.
//
//   forward, one task per (head, query tile): for each key tile in order,
//     S = q kᵀ, the online softmax (running max m and sum l per row,
//     earlier output rescaled by exp(m_old - m_new)), out += P v; then
//     out /= l and lse = m + log l.
//   backward, two passes, so that no result is a sum over tasks:
//     one task per (head, key tile): for each query tile in order,
//       P = exp(scale q kᵀ - lse), dV += Pᵀ dO, dS = P∘(dO vᵀ - rowsum(dO∘O)),
//       dK += dSᵀ q; then dK *= scale;
//     one task per (head, query tile): for each key tile in order, the
//       same P and dS, dQ += dS k; then dQ *= scale.
//
// The backward recomputes P and dS twice (7 tile products per tile pair
// against FlashAttention-2's 5), the price of having no atomics: every
// result is summed in a fixed tile order by one task, so the bits are the
// same for any number of threads and on every run. Causal attention skips
// the tiles wholly above the diagonal and masks the rest per row.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "backend/cpu/kernels/attention_rows.h"
#include "backend/cpu/kernels/pointwise_common.h"
#include "common/align.h"
#include "lms/status.h"

namespace lms::cpu::pointwise {
namespace {

namespace rows = attention_rows;
using dnnl::memory;
using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

constexpr int64_t kTileQ = 128;  // queries per tile
constexpr int64_t kTileK = 128;  // keys per tile (the leading dim of a score tile)
// The backward runs one task per head when there are at least this many
// heads per thread, and two passes of one task per tile otherwise.
constexpr int64_t kHeadsPerThread = 2;

// One axis cut into tiles of `tile`; the last may be shorter.
struct Tiling {
  int64_t len = 0;
  int64_t tile = 0;
  int64_t count() const { return (len + tile - 1) / tile; }
  int64_t size(int64_t i) const { return std::min(tile, len - i * tile); }
};

// The three tile products, for m query rows and n key rows:
//   kXYt:  C[m,n]  = X[m,D] Y[n,D]ᵀ     (S = q kᵀ, dP = dO vᵀ), C a score tile
//   kPY:   C[m,D] += P[m,n] Y[n,D]      (out += P v, dQ += dS k)
//   kPtX:  C[n,D] += P[m,n]ᵀ X[m,D]     (dV += Pᵀ dO, dK += dSᵀ q)
enum Product { kXYt, kPY, kPtX };

struct TileMatmul {
  dnnl::matmul prim;
  memory::desc a, b, c;
};

// The matmuls of every (product, m, n) a kernel meets: m a query tile's
// size, n a key tile's.
class TileProducts {
 public:
  TileProducts(const dnnl::engine& engine, int64_t d) : engine_(engine), d_(d) {}

  void add(Product p, int64_t m, int64_t n) {
    const auto key = std::make_tuple(p, m, n);
    if (mm_.count(key) > 0) return;
    const memory::dim d = d_;
    const auto f32 = memory::data_type::f32;
    TileMatmul t;
    switch (p) {
      case kXYt:
        t.a = memory::desc({m, d}, f32, {d, 1});
        t.b = memory::desc({d, n}, f32, {1, d});
        t.c = memory::desc({m, n}, f32, {kTileK, 1});
        break;
      case kPY:
        t.a = memory::desc({m, n}, f32, {kTileK, 1});
        t.b = memory::desc({n, d}, f32, {d, 1});
        t.c = memory::desc({m, d}, f32, {d, 1});
        break;
      case kPtX:
        t.a = memory::desc({n, m}, f32, {1, kTileK});
        t.b = memory::desc({m, d}, f32, {d, 1});
        t.c = memory::desc({n, d}, f32, {d, 1});
        break;
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(t.a, t.b, t.c), matmul_attr(p != kXYt),
                                    engine_);
    scratch_bytes_ = std::max<uint64_t>(scratch_bytes_, pd.scratchpad_desc().get_size());
    t.prim = dnnl::matmul(pd);
    mm_.emplace(key, std::move(t));
  }

  // Every product for every pair of tile sizes of `q` and `k`.
  void add_all(std::initializer_list<Product> products, const Tiling& q, const Tiling& k) {
    if (q.count() == 0 || k.count() == 0) return;
    for (Product p : products) {
      for (int64_t m : {q.size(0), q.size(q.count() - 1)}) {
        for (int64_t n : {k.size(0), k.size(k.count() - 1)}) add(p, m, n);
      }
    }
  }

  uint64_t scratch_bytes() const { return scratch_bytes_; }

  // One thread's oneDNN stream and memory objects (created once per
  // kernel run, rebound to each tile's pointers).
  class Thread {
   public:
    Thread(const TileProducts& products, void* scratch)
        : products_(products),
          stream_(products.engine_),
          scratch_(memory::desc({static_cast<memory::dim>(products.scratch_bytes_ + 1)},
                                memory::data_type::u8, memory::format_tag::a),
                   products.engine_, scratch) {}

    // C (+)= the product of a and b (pointers into q, k, v, a score tile
    // or an output), on the calling thread.
    void run(Product p, int64_t m, int64_t n, const float* a, const float* b, float* c) {
      const auto key = std::make_tuple(p, m, n);
      auto it = bound_.find(key);
      if (it == bound_.end()) {
        const TileMatmul& t = products_.mm_.at(key);
        auto mem = [&](const memory::desc& md) { return memory(md, products_.engine_, nullptr); };
        it = bound_.emplace(key, Bound{&t, mem(t.a), mem(t.b), mem(t.c)}).first;
      }
      Bound& bound = it->second;
      bound.a.set_data_handle(const_cast<float*>(a));
      bound.b.set_data_handle(const_cast<float*>(b));
      bound.c.set_data_handle(c);
      bound.mm->prim.execute(stream_, {{DNNL_ARG_SRC, bound.a},
                                       {DNNL_ARG_WEIGHTS, bound.b},
                                       {DNNL_ARG_DST, bound.c},
                                       {DNNL_ARG_SCRATCHPAD, scratch_}});
      stream_.wait();
    }

   private:
    struct Bound {
      const TileMatmul* mm;
      memory a, b, c;
    };
    const TileProducts& products_;
    dnnl::stream stream_;
    memory scratch_;
    std::map<std::tuple<Product, int64_t, int64_t>, Bound> bound_;
  };

 private:
  dnnl::engine engine_;
  int64_t d_;
  std::map<std::tuple<Product, int64_t, int64_t>, TileMatmul> mm_;
  uint64_t scratch_bytes_ = 0;
};

// One thread's tiles: scores [kTileQ, kTileK], a second score tile, row
// statistics, and the matmuls' scratchpad.
struct Scratch {
  float* s;
  float* s2;
  float* m;
  float* l;
  float* di;
  void* mm;
};

constexpr uint64_t align_floats(uint64_t n) { return align_up(n * 4, kWorkspaceAlign) / 4; }

class TiledAttention final : public Kernel {
 public:
  TiledAttention(const KernelSpec& spec, const CpuKernelContext& ctx, const AttentionDims& d)
      : name_(spec.name),
        backward_(spec.op == OpKind::kAttentionBwd),
        d_(d),
        q_{d.t, kTileQ},
        k_{d.s, kTileK},
        threads_(std::max(omp_get_max_threads(), 1)),
        products_(ctx.engine, d.d) {
    if (backward_) {
      products_.add_all({kXYt, kPY, kPtX}, q_, k_);
    } else {
      products_.add_all({kXYt, kPY}, q_, k_);
    }
    const uint64_t tile = align_floats(kTileQ * kTileK);
    const uint64_t row = align_floats(kTileQ);
    thread_floats_ = 2 * tile + 3 * row + align_floats(products_.scratch_bytes() / 4 + 1);
  }

  uint64_t workspace_bytes() const override {
    return thread_floats_ * static_cast<uint64_t>(threads_) * 4;
  }

  absl::Status run(const KernelArgs& args) override {
    std::string failure;
    if (backward_ && d_.heads >= kHeadsPerThread * threads_) {
      parallel(args, d_.heads, &failure,
               [&](const KernelArgs& a, int64_t head, const Scratch& w, TileProducts::Thread& st) {
                 head_grads(a, head, w, st);
               });
    } else if (backward_) {
      parallel(args, d_.heads * k_.count(), &failure,
               [&](const KernelArgs& a, int64_t task, const Scratch& w, TileProducts::Thread& st) {
                 key_grads(a, task / k_.count(), task % k_.count(), w, st);
               });
      if (failure.empty()) {
        parallel(
            args, d_.heads * q_.count(), &failure,
            [&](const KernelArgs& a, int64_t task, const Scratch& w, TileProducts::Thread& st) {
              query_grads(a, task / q_.count(), task % q_.count(), w, st);
            });
      }
    } else {
      parallel(args, d_.heads * q_.count(), &failure,
               [&](const KernelArgs& a, int64_t task, const Scratch& w, TileProducts::Thread& st) {
                 forward(a, task / q_.count(), task % q_.count(), w, st);
               });
    }
    if (!failure.empty()) {
      return absl::InternalError(
          absl::StrCat("node '", name_, "': oneDNN matmul of a tile failed: ", failure));
    }
    return absl::OkStatus();
  }

 private:
  // Runs task(args, i, scratch, stream) for i in [0, tasks) on the team.
  // Each task writes its own rows only, so the order tasks run in does not
  // change any bit.
  template <typename Task>
  void parallel(const KernelArgs& args, int64_t tasks, std::string* failure, Task task) const {
#pragma omp parallel num_threads(threads_)
    {
      const uint64_t tid = static_cast<uint64_t>(omp_get_thread_num());
      float* base = static_cast<float*>(args.workspace) + tid * thread_floats_;
      const uint64_t tile = align_floats(kTileQ * kTileK), row = align_floats(kTileQ);
      const Scratch w = {base,
                         base + tile,
                         base + 2 * tile,
                         base + 2 * tile + row,
                         base + 2 * tile + 2 * row,
                         base + 2 * tile + 3 * row};
      std::optional<TileProducts::Thread> thread;
#pragma omp for schedule(dynamic)
      for (int64_t i = 0; i < tasks; ++i) {
        try {
          if (!thread) thread.emplace(products_, w.mm);
          task(args, i, w, *thread);
        } catch (const dnnl::error& e) {
#pragma omp critical(lms_attention_failure)
          *failure = e.what();
        }
      }
    }
  }

  // Keys query t attends to within the key tile starting at s0 with n keys.
  int64_t valid_keys(int64_t t, int64_t s0, int64_t n) const {
    return d_.causal ? std::clamp<int64_t>(t - s0 + 1, 0, n) : n;
  }
  // Key tiles the query tile qi sees: [0, end).
  int64_t key_tiles_of(int64_t qi) const {
    if (!d_.causal) return k_.count();
    const int64_t last_query = qi * kTileQ + q_.size(qi) - 1;
    return last_query / kTileK + 1;
  }

  const float* row_of(const float* base, int64_t head, int64_t len, int64_t r) const {
    return base + (head * len + r) * d_.d;
  }
  float* row_of(float* base, int64_t head, int64_t len, int64_t r) const {
    return base + (head * len + r) * d_.d;
  }

  void forward(const KernelArgs& a, int64_t head, int64_t qi, const Scratch& w,
               TileProducts::Thread& st) const {
    const int64_t t0 = qi * kTileQ, m = q_.size(qi), d = d_.d;
    const float scale = static_cast<float>(d_.scale);
    const float* q = row_of(a.inputs[0], head, d_.t, t0);
    float* out = row_of(a.outputs[0], head, d_.t, t0);
    std::fill(out, out + m * d, 0.0f);
    std::fill(w.m, w.m + m, -std::numeric_limits<float>::infinity());
    std::fill(w.l, w.l + m, 0.0f);
    for (int64_t kj = 0; kj < key_tiles_of(qi); ++kj) {
      const int64_t s0 = kj * kTileK, n = k_.size(kj);
      st.run(kXYt, m, n, q, row_of(a.inputs[1], head, d_.s, s0), w.s);
      for (int64_t r = 0; r < m; ++r) {
        float* srow = w.s + r * kTileK;
        const int64_t valid = valid_keys(t0 + r, s0, n);
        std::fill(srow + valid, srow + n, 0.0f);
        if (valid == 0) continue;
        const float m_new = std::max(w.m[r], scale * rows::max_of(srow, valid));
        const float sum = rows::exp_shifted(srow, valid, scale, m_new);
        const float alpha = std::exp(w.m[r] - m_new);  // 0 on the first tile
        if (alpha != 1.0f) rows::scale(out + r * d, d, alpha);
        w.l[r] = alpha * w.l[r] + sum;
        w.m[r] = m_new;
      }
      st.run(kPY, m, n, w.s, row_of(a.inputs[2], head, d_.s, s0), out);
    }
    float* lse = a.outputs[1] + head * d_.t + t0;
    for (int64_t r = 0; r < m; ++r) {
      rows::scale(out + r * d, d, 1.0f / w.l[r]);
      lse[r] = w.m[r] + std::log(w.l[r]);
    }
  }

  // The probabilities P (into w.s) and dS (into w.s2) of query tile qi
  // against key tile kj; w.di holds rowsum(dO∘O) of the query tile.
  void probs_and_grads(const KernelArgs& a, int64_t head, int64_t qi, int64_t kj, const Scratch& w,
                       TileProducts::Thread& st) const {
    const int64_t t0 = qi * kTileQ, m = q_.size(qi), s0 = kj * kTileK, n = k_.size(kj);
    const float scale = static_cast<float>(d_.scale);
    st.run(kXYt, m, n, row_of(a.inputs[0], head, d_.t, t0), row_of(a.inputs[1], head, d_.s, s0),
           w.s);
    const float* lse = a.inputs[4] + head * d_.t + t0;
    for (int64_t r = 0; r < m; ++r) {
      float* srow = w.s + r * kTileK;
      const int64_t valid = valid_keys(t0 + r, s0, n);
      rows::exp_shifted(srow, valid, scale, lse[r]);
      std::fill(srow + valid, srow + n, 0.0f);
    }
    st.run(kXYt, m, n, row_of(a.inputs[5], head, d_.t, t0), row_of(a.inputs[2], head, d_.s, s0),
           w.s2);
    for (int64_t r = 0; r < m; ++r) {
      rows::softmax_grad(w.s + r * kTileK, w.s2 + r * kTileK, w.di[r], n, w.s2 + r * kTileK);
    }
  }

  // rowsum(dO∘O) of query tile qi into w.di.
  void row_dots(const KernelArgs& a, int64_t head, int64_t qi, const Scratch& w) const {
    const int64_t t0 = qi * kTileQ;
    const float* out = row_of(a.inputs[3], head, d_.t, t0);
    const float* dout = row_of(a.inputs[5], head, d_.t, t0);
    for (int64_t r = 0; r < q_.size(qi); ++r) {
      w.di[r] = rows::dot(dout + r * d_.d, out + r * d_.d, d_.d);
    }
  }

  // The whole backward of one head in one pass (FlashAttention-2's loop
  // order: key tiles outside, query tiles inside), used when there are
  // enough heads to keep every thread busy. dQ of query tile i receives
  // dS_ij k_j for j ascending, as in query_grads, and dK, dV as in
  // key_grads, so the bits are those of the two-pass schedule.
  void head_grads(const KernelArgs& a, int64_t head, const Scratch& w,
                  TileProducts::Thread& st) const {
    const int64_t d = d_.d;
    float* dq = row_of(a.outputs[0], head, d_.t, 0);
    std::fill(dq, dq + d_.t * d, 0.0f);
    for (int64_t kj = 0; kj < k_.count(); ++kj) {
      const int64_t s0 = kj * kTileK, n = k_.size(kj);
      float* dk = row_of(a.outputs[1], head, d_.s, s0);
      float* dv = row_of(a.outputs[2], head, d_.s, s0);
      std::fill(dk, dk + n * d, 0.0f);
      std::fill(dv, dv + n * d, 0.0f);
      for (int64_t qi = d_.causal ? s0 / kTileQ : 0; qi < q_.count(); ++qi) {
        const int64_t t0 = qi * kTileQ, m = q_.size(qi);
        row_dots(a, head, qi, w);
        probs_and_grads(a, head, qi, kj, w, st);
        st.run(kPtX, m, n, w.s, row_of(a.inputs[5], head, d_.t, t0), dv);
        st.run(kPtX, m, n, w.s2, row_of(a.inputs[0], head, d_.t, t0), dk);
        st.run(kPY, m, n, w.s2, row_of(a.inputs[1], head, d_.s, s0), dq + t0 * d);
      }
      rows::scale(dk, n * d, static_cast<float>(d_.scale));
    }
    for (int64_t qi = 0; qi < q_.count(); ++qi) {
      rows::scale(dq + qi * kTileQ * d, q_.size(qi) * d, static_cast<float>(d_.scale));
    }
  }

  void key_grads(const KernelArgs& a, int64_t head, int64_t kj, const Scratch& w,
                 TileProducts::Thread& st) const {
    const int64_t s0 = kj * kTileK, n = k_.size(kj), d = d_.d;
    float* dk = row_of(a.outputs[1], head, d_.s, s0);
    float* dv = row_of(a.outputs[2], head, d_.s, s0);
    std::fill(dk, dk + n * d, 0.0f);
    std::fill(dv, dv + n * d, 0.0f);
    const int64_t first = d_.causal ? s0 / kTileQ : 0;
    for (int64_t qi = first; qi < q_.count(); ++qi) {
      const int64_t t0 = qi * kTileQ, m = q_.size(qi);
      row_dots(a, head, qi, w);
      probs_and_grads(a, head, qi, kj, w, st);
      st.run(kPtX, m, n, w.s, row_of(a.inputs[5], head, d_.t, t0), dv);
      st.run(kPtX, m, n, w.s2, row_of(a.inputs[0], head, d_.t, t0), dk);
    }
    rows::scale(dk, n * d, static_cast<float>(d_.scale));
  }

  void query_grads(const KernelArgs& a, int64_t head, int64_t qi, const Scratch& w,
                   TileProducts::Thread& st) const {
    const int64_t t0 = qi * kTileQ, m = q_.size(qi), d = d_.d;
    float* dq = row_of(a.outputs[0], head, d_.t, t0);
    std::fill(dq, dq + m * d, 0.0f);
    row_dots(a, head, qi, w);
    for (int64_t kj = 0; kj < key_tiles_of(qi); ++kj) {
      probs_and_grads(a, head, qi, kj, w, st);
      st.run(kPY, m, k_.size(kj), w.s2, row_of(a.inputs[1], head, d_.s, kj * kTileK), dq);
    }
    rows::scale(dq, m * d, static_cast<float>(d_.scale));
  }

  std::string name_;
  bool backward_;
  AttentionDims d_;
  Tiling q_, k_;
  int threads_;
  TileProducts products_;
  uint64_t thread_floats_ = 0;
};

}  // namespace

KernelOr create_attention_kernel(const KernelSpec& spec, const CpuKernelContext& ctx) {
  if (spec.op != OpKind::kAttention && spec.op != OpKind::kAttentionBwd) {
    return std::unique_ptr<Kernel>();
  }
  LMS_ASSIGN_OR_RETURN(AttentionDims d, attention_dims(spec));
  return std::unique_ptr<Kernel>(std::make_unique<TiledAttention>(spec, ctx, d));
}

}  // namespace lms::cpu::pointwise
