// linear_cross_entropy and linear_cross_entropy_bwd of docs/ops.md on the
// CPU device (Note [Chunked language-model head]): the logits x·wᵀ of a
// chunk of rows at a time, never all N·V of them. Per chunk, a oneDNN
// matmul gives the chunk's logits in the workspace; each row's softmax is
// vectorised (attention_rows.h, sums over eight lanes in a fixed order);
// the backward's dx rows are the chunk's dlogits times w, and dw sums the
// chunks' dlogitsᵀ·x in chunk order. The rows' losses are summed in double
// in row order. Every sum has a fixed order, so the bits do not depend on
// the thread that computes a row.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>

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

// The logits of one chunk take at most this many bytes of workspace.
constexpr uint64_t kChunkBytes = uint64_t{8} << 20;

struct ChunkMatmul {
  dnnl::matmul prim;
  memory::desc a, b, c;
};

// The three matmuls of a chunk of m rows.
struct ChunkMatmuls {
  ChunkMatmul logits;  // [m,V] = x_m · wᵀ (w [V,D]) or x_m · w (w [D,V])
  ChunkMatmul dx;      // [m,D] = G · w or G · wᵀ
  ChunkMatmul dw;      // dw += Gᵀ · x_m ([V,D]) or x_mᵀ · G ([D,V])
};

// log Σ exp(row[i]) around the row's maximum; overwrites the row with
// exp(row[i] - max).
float log_sum_exp(float* row, int64_t v) {
  const float max = rows::max_of(row, v);
  return max + std::log(rows::exp_shifted(row, v, 1.0f, max));
}

class LinearCrossEntropy final : public Kernel {
 public:
  LinearCrossEntropy(const KernelSpec& spec, const CpuKernelContext& ctx,
                     const LinearCrossEntropyDims& d)
      : spec_(spec), d_(d), engine_(ctx.engine), stream_(ctx.stream) {
    backward_ = spec.op == OpKind::kLinearCrossEntropyBwd;
    const uint64_t per_row = static_cast<uint64_t>(d.v) * 4;
    chunk_ = std::clamp<int64_t>(static_cast<int64_t>(kChunkBytes / per_row), 1,
                                 std::max<int64_t>(d.n, 1));
    for (int64_t m : {chunk_, d.n % chunk_}) {
      if (m > 0 && matmuls_.count(m) == 0) matmuls_.emplace(m, make_matmuls(m));
    }
    logits_floats_ = align_up(static_cast<uint64_t>(chunk_ * d.v) * 4, kWorkspaceAlign) / 4;
    terms_floats_ = align_up(static_cast<uint64_t>(chunk_) * 8, kWorkspaceAlign) / 4;
  }

  uint64_t workspace_bytes() const override {
    return (logits_floats_ + terms_floats_) * 4 + scratch_bytes_;
  }

  absl::Status run(const KernelArgs& a) override {
    const int64_t* labels = reinterpret_cast<const int64_t*>(a.inputs[2]);
    LMS_ASSIGN_OR_RETURN(const int64_t counted, count_labelled_rows(spec_, labels, d_.logits()));
    try {
      if (backward_) {
        backward(a, labels, counted);
      } else {
        forward(a, labels, counted);
      }
    } catch (const dnnl::error& e) {
      return absl::InternalError(
          absl::StrCat("node '", spec_.name, "': oneDNN matmul of a chunk failed: ", e.what()));
    }
    return absl::OkStatus();
  }

 private:
  ChunkMatmul make(const memory::desc& a, const memory::desc& b, const memory::desc& c,
                   bool accumulate) {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), matmul_attr(accumulate), engine_);
    scratch_bytes_ = std::max<uint64_t>(
        scratch_bytes_, align_up(pd.scratchpad_desc().get_size() + 1, kWorkspaceAlign));
    return {dnnl::matmul(pd), a, b, c};
  }

  ChunkMatmuls make_matmuls(int64_t m) {
    const memory::dim d = d_.d, v = d_.v;
    const auto f32 = memory::data_type::f32;
    const memory::desc x({m, d}, f32, {d, 1});
    const memory::desc g({m, v}, f32, {v, 1});
    ChunkMatmuls mm;
    if (d_.trans_b) {  // w [V,D]
      mm.logits = make(x, memory::desc({d, v}, f32, {1, d}), g, false);
      mm.dx = make(g, memory::desc({v, d}, f32, {d, 1}), x, false);
      mm.dw = make(memory::desc({v, m}, f32, {1, v}), x, memory::desc({v, d}, f32, {d, 1}), true);
    } else {  // w [D,V]
      mm.logits = make(x, memory::desc({d, v}, f32, {v, 1}), g, false);
      mm.dx = make(g, memory::desc({v, d}, f32, {1, v}), x, false);
      mm.dw = make(memory::desc({d, m}, f32, {1, d}), g, memory::desc({d, v}, f32, {v, 1}), true);
    }
    return mm;
  }

  void exec(const ChunkMatmul& mm, const float* a, const float* b, float* c, void* scratch) {
    auto mem = [&](const memory::desc& md, const float* p) {
      return memory(md, engine_, const_cast<float*>(p));
    };
    mm.prim.execute(stream_, {{DNNL_ARG_SRC, mem(mm.a, a)},
                              {DNNL_ARG_WEIGHTS, mem(mm.b, b)},
                              {DNNL_ARG_DST, mem(mm.c, c)},
                              {DNNL_ARG_SCRATCHPAD,
                               memory(memory::desc({static_cast<memory::dim>(scratch_bytes_)},
                                                   memory::data_type::u8, memory::format_tag::a),
                                      engine_, scratch)}});
    stream_.wait();
  }

  float* logits_of(const KernelArgs& a) const { return static_cast<float*>(a.workspace); }
  double* terms_of(const KernelArgs& a) const {
    return reinterpret_cast<double*>(logits_of(a) + logits_floats_);
  }
  void* scratch_of(const KernelArgs& a) const {
    return logits_of(a) + logits_floats_ + terms_floats_;
  }

  // loss[] = (1/M) Σ over counted rows of (lse_n - logit[n, label]), lse_n
  // the row's log-sum-exp; NaN when M = 0 (PyTorch's 0/0).
  void forward(const KernelArgs& a, const int64_t* labels, int64_t counted) {
    float* logits = logits_of(a);
    double* terms = terms_of(a);
    double acc = 0.0;
    for (int64_t r0 = 0; r0 < d_.n; r0 += chunk_) {
      const int64_t m = std::min(chunk_, d_.n - r0);
      const ChunkMatmuls& mm = matmuls_.at(m);
      exec(mm.logits, a.inputs[0] + r0 * d_.d, a.inputs[1], logits, scratch_of(a));
      const int64_t v = d_.v;
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < m; ++r) {
        float* row = logits + r * v;
        const int64_t label = labels[r0 + r];
        if (label == d_.ignore_index) {
          terms[r] = 0.0;
          continue;
        }
        const float picked = row[label];
        terms[r] = static_cast<double>(log_sum_exp(row, v)) - picked;
      }
      for (int64_t r = 0; r < m; ++r) acc += terms[r];
    }
    a.outputs[0][0] = counted == 0 ? std::numeric_limits<float>::quiet_NaN()
                                   : static_cast<float>(acc / static_cast<double>(counted));
  }

  // G = (softmax(logits) - onehot(label)) · dloss / M (zero on ignored
  // rows); dx = G·w per chunk; dw = Σ over chunks in order of Gᵀ·x.
  void backward(const KernelArgs& a, const int64_t* labels, int64_t counted) {
    float* logits = logits_of(a);
    const float s = counted == 0 ? 0.0f
                                 : static_cast<float>(static_cast<double>(a.inputs[3][0]) /
                                                      static_cast<double>(counted));
    float* dw = a.outputs[1];
    std::fill(dw, dw + d_.v * d_.d, 0.0f);
    for (int64_t r0 = 0; r0 < d_.n; r0 += chunk_) {
      const int64_t m = std::min(chunk_, d_.n - r0);
      const ChunkMatmuls& mm = matmuls_.at(m);
      const float* x = a.inputs[0] + r0 * d_.d;
      exec(mm.logits, x, a.inputs[1], logits, scratch_of(a));
      const int64_t v = d_.v;
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < m; ++r) {
        float* row = logits + r * v;
        const int64_t label = labels[r0 + r];
        if (label == d_.ignore_index || s == 0.0f) {
          std::fill(row, row + v, 0.0f);
          continue;
        }
        // softmax(row) · s = exp(row - max) · s / Σ exp(row - max).
        const float max = rows::max_of(row, v);
        const float sum = rows::exp_shifted(row, v, 1.0f, max);
        rows::scale(row, v, s / sum);
        row[label] -= s;
      }
      exec(mm.dx, logits, a.inputs[1], a.outputs[0] + r0 * d_.d, scratch_of(a));
      if (d_.trans_b) {
        exec(mm.dw, logits, x, dw, scratch_of(a));
      } else {
        exec(mm.dw, x, logits, dw, scratch_of(a));
      }
    }
  }

  KernelSpec spec_;
  LinearCrossEntropyDims d_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  bool backward_ = false;
  int64_t chunk_ = 1;
  std::map<int64_t, ChunkMatmuls> matmuls_;  // by rows of the chunk
  uint64_t logits_floats_ = 0;
  uint64_t terms_floats_ = 0;
  uint64_t scratch_bytes_ = 0;
};

}  // namespace

KernelOr create_linear_xent_kernel(const KernelSpec& spec, const CpuKernelContext& ctx) {
  LMS_ASSIGN_OR_RETURN(const LinearCrossEntropyDims d, linear_cross_entropy_dims(spec));
  return std::unique_ptr<Kernel>(std::make_unique<LinearCrossEntropy>(spec, ctx, d));
}

}  // namespace lms::cpu::pointwise
